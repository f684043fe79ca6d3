"""The one check of a conversation's status moves (the vocabulary and its table are the wire
contract's, `events.status`).

The agent reports the status a run ended in; only the conversation applies it, through
`check_move`, so no status is ever reached by a move the table does not list.
"""

from __future__ import annotations

from agent_server.errors import InvalidTransition
from events.status import TRANSITIONS, ExecutionStatus
from web.states import Moves

#: The table as a checker; a refusal lists the allowed moves by name.
MOVES = Moves(
    TRANSITIONS,
    listed=lambda statuses: sorted(statuses, key=lambda s: s.value),
    error=InvalidTransition,
)


def check_move(current: ExecutionStatus, to: ExecutionStatus) -> None:
    """Raises InvalidTransition, naming the allowed moves, unless the table lists this one
    (staying put too: no status moves to itself)."""
    if not MOVES.allows(current, to):
        raise MOVES.refused(current, to)


__all__ = ["MOVES", "TRANSITIONS", "ExecutionStatus", "check_move"]
