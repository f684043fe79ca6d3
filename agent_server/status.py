"""The one check of a conversation's status moves (the vocabulary and its table are the wire
contract's, `events.status`).

The agent reports the status a run ended in; only the conversation applies it, through
`check_move`, so no status is ever reached by a move the table does not list.
"""

from __future__ import annotations

from agent_server.errors import InvalidTransition
from events.status import TRANSITIONS, ExecutionStatus


def check_move(current: ExecutionStatus, to: ExecutionStatus) -> None:
    """Raises InvalidTransition, naming the allowed moves, unless the table lists this one."""
    if to not in TRANSITIONS[current]:
        raise InvalidTransition(current.value, to.value,
                                sorted(s.value for s in TRANSITIONS[current]))


__all__ = ["TRANSITIONS", "ExecutionStatus", "check_move"]
