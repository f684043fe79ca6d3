"""A conversation's execution status (SPEC 3.2) and the table of the moves it may make.

The agent reports the status a run ended in; only the conversation applies it, through
`check_move`, so no status is ever reached by a move the table does not list. Both read this
module, which imports nothing of either.
"""

from __future__ import annotations

from enum import Enum

from agent_server.errors import InvalidTransition


class ExecutionStatus(str, Enum):
    """SPEC 3.2, lowercase as the agent server returns it."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_FOR_CONFIRMATION = "waiting_for_confirmation"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"


_TO_RUNNING = frozenset({ExecutionStatus.RUNNING})

#: Where each execution status may go next. A run starts from any resting status (a
#: conversation waiting for confirmation starts one only when the actions were approved) and
#: ends in the status its loop returned; waiting actions rejected, the conversation rests.
TRANSITIONS: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    ExecutionStatus.IDLE: _TO_RUNNING,
    ExecutionStatus.RUNNING: frozenset({
        ExecutionStatus.IDLE, ExecutionStatus.PAUSED, ExecutionStatus.WAITING_FOR_CONFIRMATION,
        ExecutionStatus.FINISHED, ExecutionStatus.ERROR, ExecutionStatus.STUCK}),
    ExecutionStatus.PAUSED: _TO_RUNNING,
    ExecutionStatus.WAITING_FOR_CONFIRMATION: frozenset({ExecutionStatus.RUNNING,
                                                         ExecutionStatus.IDLE}),
    ExecutionStatus.FINISHED: _TO_RUNNING,
    ExecutionStatus.ERROR: _TO_RUNNING,
    ExecutionStatus.STUCK: _TO_RUNNING,
}


def check_move(current: ExecutionStatus, to: ExecutionStatus) -> None:
    """Raises InvalidTransition, naming the allowed moves, unless the table lists this one."""
    if to not in TRANSITIONS[current]:
        raise InvalidTransition(current.value, to.value,
                                sorted(s.value for s in TRANSITIONS[current]))
