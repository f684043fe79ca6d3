"""Confirmation mode: which actions wait for a person's approval (SPEC 3.2)."""

from __future__ import annotations

from agent_server.agent.policies import AlwaysConfirm, ConfirmationPolicy, ConfirmRisky
from events import ActionEvent, SecurityRisk


def needs_confirmation(policy: ConfirmationPolicy, event: ActionEvent, acts: bool) -> bool:
    """True when this action may only run after an explicit accept.

    Tools that change nothing (finish, think) never wait.
    """
    if not acts or event.action is None:
        return False
    return needs_risk_confirmation(policy, event.security_risk)


def needs_risk_confirmation(policy: ConfirmationPolicy, risk: SecurityRisk) -> bool:
    """True when the policy wants an accept for an action of this risk (an ACP agent's
    permission request is asked through here too)."""
    if isinstance(policy, AlwaysConfirm):
        return True
    if isinstance(policy, ConfirmRisky):
        if risk == SecurityRisk.UNKNOWN:
            return policy.confirm_unknown
        return risk.rank >= SecurityRisk(policy.threshold).rank
    return False
