"""The shared enums and the sandbox status machine (control_plane.models), in-process."""

from __future__ import annotations

import pytest

from control_plane.models import (
    SANDBOX_TRANSITIONS,
    ExecutionStatus,
    InvalidTransition,
    SandboxStatus,
    ensure_usable,
    entered_from,
    transition,
)
from web.errors import Conflict, Gone

S = SandboxStatus


def test_execution_status_is_read_in_either_case() -> None:
    waiting = ExecutionStatus.WAITING_FOR_CONFIRMATION
    assert ExecutionStatus.parse("waiting_for_confirmation") is waiting
    assert ExecutionStatus.parse("nonsense") is None


def test_a_sandbox_status_moves_only_along_the_table() -> None:
    assert set(SANDBOX_TRANSITIONS) == set(SandboxStatus)
    # ERROR and MISSING are read-only for good: ERROR is only ever deleted, MISSING is final.
    assert (
        SANDBOX_TRANSITIONS[S.ERROR] == {S.MISSING}
        and SANDBOX_TRANSITIONS[S.MISSING] == frozenset()
    )
    assert transition("s1", S.RUNNING, S.PAUSED, "paused") is True
    assert transition("s1", S.PAUSED, S.PAUSED, "paused") is False  # staying put is no move
    with pytest.raises(InvalidTransition) as refused:
        transition("s1", S.STARTING, S.PAUSED, "paused")
    assert refused.value.status_code == 409
    assert refused.value.detail == (
        "sandbox s1 is STARTING: it cannot be paused now (from "
        "STARTING it may go to: RUNNING, ERROR, MISSING)"
    )
    with pytest.raises(InvalidTransition, match=r"may go to: MISSING\)"):
        transition("s1", S.ERROR, S.RUNNING, "resumed")
    with pytest.raises(Gone, match=r"MISSING: it cannot be resumed now .*may go to: none"):
        transition("s1", S.MISSING, S.RUNNING, "resumed")


def test_the_store_is_told_where_each_status_may_be_entered_from() -> None:
    assert entered_from(S.RUNNING) == [S.STARTING, S.PAUSED]
    assert entered_from(S.PAUSED) == [S.RUNNING]
    assert entered_from(S.ERROR) == [S.STARTING, S.RUNNING, S.PAUSED]
    assert entered_from(S.MISSING) == [S.STARTING, S.RUNNING, S.PAUSED, S.ERROR]
    assert entered_from(S.STARTING) == []  # only ever made so


def test_one_rule_refuses_using_an_error_or_missing_sandbox() -> None:
    for usable in (S.STARTING, S.RUNNING, S.PAUSED):
        ensure_usable("s1", usable, "no matter")
    with pytest.raises(Conflict, match="sandbox s1 is in ERROR: it is read-only") as error:
        ensure_usable("s1", S.ERROR, "it is read-only")
    assert error.value.status_code == 409
    with pytest.raises(Gone, match="sandbox s1 is MISSING: it is read-only"):
        ensure_usable("s1", S.MISSING, "it is read-only")
