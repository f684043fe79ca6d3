"""Approval modes: what the editor offers as session modes, and the confirmation policy each
sets on the conversation (docs/agent-server.md, "Safety").

The ids are the OpenHands CLI's ACP modes, so an editor configured for one knows the other.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from acp.schema import SessionMode, SessionModeState

ModeId = Literal["always-ask", "always-approve", "llm-approve"]
MODE_IDS: tuple[str, ...] = get_args(ModeId)

_MODES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "always-ask": (
        "Always ask",
        "Ask before every action the agent takes in the sandbox",
        {"kind": "AlwaysConfirm"},
    ),
    "always-approve": (
        "Always approve",
        "Run every action without asking",
        {"kind": "NeverConfirm"},
    ),
    "llm-approve": (
        "Ask for risky actions",
        "Ask only for actions the model rates HIGH risk, or does not rate",
        {"kind": "ConfirmRisky", "threshold": "HIGH", "confirm_unknown": True},
    ),
}


def policy(mode: str) -> dict[str, Any]:
    """The confirmation policy of a mode (a KeyError for an unknown one)."""
    return dict(_MODES[mode][2])


def asks(mode: str) -> bool:
    """Whether actions may wait for the editor's answer in this mode."""
    return mode != "always-approve"


def state(current: str) -> SessionModeState:
    return SessionModeState(
        current_mode_id=current,
        available_modes=[
            SessionMode(id=mode, name=name, description=description)
            for mode, (name, description, _) in _MODES.items()
        ],
    )


__all__ = ["MODE_IDS", "ModeId", "asks", "policy", "state"]
