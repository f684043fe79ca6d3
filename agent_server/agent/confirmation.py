"""Confirmation mode: which actions wait for a person's approval (SPEC 3.2)."""

from __future__ import annotations

from agent_server.events import ActionEvent, SecurityRisk
from agent_server.agent.spec import AlwaysConfirm, ConfirmRisky, ConfirmationPolicy


def needs_confirmation(policy: ConfirmationPolicy, event: ActionEvent, acts: bool) -> bool:
    """True when this action may only run after an explicit accept.

    Tools that change nothing (finish, think) never wait.
    """
    if not acts or event.action is None:
        return False
    if isinstance(policy, AlwaysConfirm):
        return True
    if isinstance(policy, ConfirmRisky):
        if event.security_risk == SecurityRisk.UNKNOWN:
            return policy.confirm_unknown
        return event.security_risk.rank >= SecurityRisk(policy.threshold).rank
    return False
