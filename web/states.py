"""One shape for every status machine of both services: a table of the moves each status may
make, and the one check of a move.

A conversation's execution status (`events.status`), a sandbox's status and a start task's
stage (`control_plane.models`) and an ACP turn (`agent_server.agent.acp.turn`) each keep their
table beside their vocabulary; `Moves` answers the three questions asked of any of them (may
it go there, where may it go, where may it come from) and raises the one error
(`web.errors.InvalidTransition`, 409) that names the moves there are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Generic, TypeVar

from web.errors import InvalidTransition

S = TypeVar("S", bound=Enum)


class Moves(Generic[S]):
    """`table`: status -> the statuses it may move to (every status a key; staying put is no
    move). `listed` orders the statuses a refusal names (the enum's order by default)."""

    def __init__(
        self,
        table: Mapping[S, frozenset[S]],
        *,
        listed: Callable[[Iterable[S]], list[S]] | None = None,
        error: type[InvalidTransition] = InvalidTransition,
    ) -> None:
        self.table = dict(table)
        self._order = list(self.table)
        self._listed = listed or (lambda statuses: [s for s in self._order if s in statuses])
        self._error = error

    def __getitem__(self, current: S) -> frozenset[S]:
        return self.table[current]

    def allows(self, current: S, wanted: S) -> bool:
        return wanted in self.table[current]

    def allowed(self, current: S) -> list[S]:
        """Where `current` may go, in the listed order."""
        return self._listed(self.table[current])

    def sources(self, wanted: S) -> list[S]:
        """The statuses `wanted` may be entered from: a store writes a move only on a row
        still in one of them, so a move races nothing."""
        return [s for s in self._order if wanted in self.table[s]]

    def check(self, current: S, wanted: S, refusal: str | None = None) -> bool:
        """Whether `current` -> `wanted` is a move (False: it is there already); a move the
        table does not list raises InvalidTransition naming the allowed ones."""
        if wanted is current:
            return False
        if wanted in self.table[current]:
            return True
        raise self.refused(current, wanted, refusal)

    def refused(self, current: S, wanted: S, refusal: str | None = None) -> InvalidTransition:
        """The error of a move the table does not list."""
        return self._error(
            str(current.value),
            str(wanted.value),
            [str(s.value) for s in self.allowed(current)],
            refusal=refusal,
        )
