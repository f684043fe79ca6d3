"""A conversation's execution status (SPEC 3.2) and the moves it may make: one vocabulary for
the agent server that moves it, the control plane that records it and the editor bridge that
waits on it.

Lowercase, as the agent server and the app-conversation record say it (and the OpenHands
servers). The control plane stores it in uppercase and maps the case at its column
(`control_plane.models`).
"""

from __future__ import annotations

from enum import Enum


class ExecutionStatus(str, Enum):
    """SPEC 3.2, lowercase on the wire."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_FOR_CONFIRMATION = "waiting_for_confirmation"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"

    @classmethod
    def parse(cls, value: object) -> ExecutionStatus | None:
        """The status a text names, in either case; None for anything else."""
        try:
            return cls(str(value).lower())
        except ValueError:
            return None


_TO_RUNNING = frozenset({ExecutionStatus.RUNNING})

#: Where each execution status may go next. A run starts from any resting status (a
#: conversation waiting for confirmation starts one only when the actions were approved) and
#: ends in the status its loop returned; waiting actions rejected, the conversation rests.
TRANSITIONS: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    ExecutionStatus.IDLE: _TO_RUNNING,
    ExecutionStatus.RUNNING: frozenset(
        {
            ExecutionStatus.IDLE,
            ExecutionStatus.PAUSED,
            ExecutionStatus.WAITING_FOR_CONFIRMATION,
            ExecutionStatus.FINISHED,
            ExecutionStatus.ERROR,
            ExecutionStatus.STUCK,
        }
    ),
    ExecutionStatus.PAUSED: _TO_RUNNING,
    ExecutionStatus.WAITING_FOR_CONFIRMATION: frozenset(
        {ExecutionStatus.RUNNING, ExecutionStatus.IDLE}
    ),
    ExecutionStatus.FINISHED: _TO_RUNNING,
    ExecutionStatus.ERROR: _TO_RUNNING,
    ExecutionStatus.STUCK: _TO_RUNNING,
}

#: The statuses a conversation rests in: no run under way (a client waits for one of these).
RESTING = frozenset(s for s in ExecutionStatus if s is not ExecutionStatus.RUNNING)
