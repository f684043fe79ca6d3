"""Routes whose path parameters give way to a route that spells the same place literally.

Starlette tries routes in order and serves the first whose path and method match, so
`DELETE /api/conversations/search` went to `DELETE /api/conversations/{conversation_id}` and was
a 422 about a bad UUID, and `OPTIONS` there answered `Allow: DELETE, GET, HEAD, PATCH`: methods
the document does not list for the path. A path that a literal route spells is that route's
alone: another method is its 405, with its methods in `Allow`.
"""

from __future__ import annotations

import re
from typing import TypeVar

from starlette import routing
from starlette.routing import Match
from starlette.types import Scope


class Route(routing.Route):
    #: The paths of the more literal routes this one gives way to (set by `literal_first`).
    shadows: tuple[re.Pattern[str], ...] = ()

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE and self.shadows:
            path = scope["path"].removeprefix(scope.get("root_path", ""))  # as Starlette's
            if any(shadow.match(path) for shadow in self.shadows):
                return Match.NONE, {}
        return match, child


R = TypeVar("R", bound=routing.BaseRoute)


def literal_first(routes: list[R]) -> list[R]:
    """`routes`, each of this module's Route giving way to the routes with fewer parameters
    whose paths it would also match (`/conversations/search` over `/conversations/{id}`)."""
    plain = [r for r in routes if isinstance(r, routing.Route)]
    for route in routes:
        if not isinstance(route, Route) or not route.param_convertors:
            continue
        route.shadows = tuple(
            dict.fromkeys(
                other.path_regex
                for other in plain
                if len(other.param_convertors) < len(route.param_convertors)
                and route.path_regex.match(re.sub(r"\{[^}]+\}", "x", other.path_format))
            )
        )
    return routes


__all__ = ["Route", "literal_first"]
