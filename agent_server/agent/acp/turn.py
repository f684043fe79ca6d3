"""Where an ACP conversation's turn is: one `TurnState`, moved only along TURN_MOVES (the
session checks each move with `TURN`, and raises on any other, so a lost state is a loud bug,
never a stuck turn)."""

from __future__ import annotations

from enum import Enum

from web.states import Moves


class TurnState(Enum):
    """Where the prompt in flight is."""

    IDLE = "idle"  # none: the next run sends the unsent messages
    WORKING = "working"  # the agent works on it
    ASKING = "asking"  # and its permission requests wait for the user (`_waiting`)
    CANCELLED = "cancelled"  # session/cancel was sent: drained, not read, before the next one


#: The moves a turn makes. Any state may end in IDLE: the turn ended, or the process stopped.
TURN_MOVES: dict[TurnState, frozenset[TurnState]] = {
    TurnState.IDLE: frozenset({TurnState.WORKING}),
    TurnState.WORKING: frozenset({TurnState.ASKING, TurnState.CANCELLED, TurnState.IDLE}),
    TurnState.ASKING: frozenset({TurnState.WORKING, TurnState.CANCELLED, TurnState.IDLE}),
    TurnState.CANCELLED: frozenset({TurnState.IDLE}),
}
TURN = Moves(TURN_MOVES)
