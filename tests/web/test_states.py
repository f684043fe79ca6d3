"""`web.states.Moves`, the one checker of the status machines of both services: each table
keeps its own vocabulary, and a refusal names the moves there are."""

from __future__ import annotations

from enum import Enum

import pytest

from agent_server.agent.acp.turn import TURN, TurnState
from agent_server.status import MOVES, check_move
from control_plane.models import SANDBOX_MOVES, START_MOVES, SandboxStatus, StartTaskStatus
from events.status import ExecutionStatus
from web.errors import Conflict, InvalidTransition
from web.states import Moves


class Light(Enum):
    RED = "red"
    GREEN = "green"
    AMBER = "amber"


LIGHTS = Moves(
    {
        Light.RED: frozenset({Light.GREEN}),
        Light.GREEN: frozenset({Light.AMBER}),
        Light.AMBER: frozenset({Light.RED}),
    }
)


def test_a_move_is_checked_and_a_refusal_names_the_moves_there_are() -> None:
    assert LIGHTS.check(Light.RED, Light.GREEN) is True
    assert LIGHTS.check(Light.RED, Light.RED) is False  # staying put is no move
    with pytest.raises(InvalidTransition) as refused:
        LIGHTS.check(Light.RED, Light.AMBER)
    assert isinstance(refused.value, Conflict) and refused.value.status_code == 409
    assert (refused.value.current, refused.value.wanted, refused.value.allowed) == (
        "red",
        "amber",
        ("green",),
    )
    assert refused.value.detail == (
        "the status cannot go from red to amber (from red it may go to: green)"
    )
    with pytest.raises(InvalidTransition, match=r"^the light is red \(from red it may go"):
        LIGHTS.check(Light.RED, Light.AMBER, "the light is red")
    assert LIGHTS.sources(Light.RED) == [Light.AMBER]


def test_every_machine_of_both_services_has_one_table_checked_by_moves() -> None:
    machines: list[
        tuple[
            Moves[ExecutionStatus]
            | Moves[SandboxStatus]
            | Moves[StartTaskStatus]
            | Moves[TurnState],
            type[Enum],
        ]
    ] = [
        (MOVES, ExecutionStatus),
        (SANDBOX_MOVES, SandboxStatus),
        (START_MOVES, StartTaskStatus),
        (TURN, TurnState),
    ]
    for moves, vocabulary in machines:
        assert set(moves.table) == set(vocabulary)  # every status has its row
    # The execution status: staying put is refused too, and a refusal lists moves by name.
    with pytest.raises(
        InvalidTransition,
        match=r"^execution_status cannot go from idle to "
        r"idle \(from idle it may go to: running\)$",
    ):
        check_move(ExecutionStatus.IDLE, ExecutionStatus.IDLE)
    # A start ends once: nothing leaves READY or ERROR.
    assert not START_MOVES.table[StartTaskStatus.READY]
    assert not START_MOVES.table[StartTaskStatus.ERROR]
    assert StartTaskStatus.READY not in START_MOVES.table[StartTaskStatus.WAITING_FOR_SANDBOX]
