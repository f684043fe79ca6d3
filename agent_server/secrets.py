"""Secrets: per-conversation values (SPEC 5 rule 4) and the mask that keeps them out of events.

A value never reaches the event log, a websocket, the webhook or the model: every event is
masked as it is written (see EventLog.redactor), and nothing else carries event text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "<secret-hidden>"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Shorter values would mask ordinary words and numbers all over the transcript.
MIN_LENGTH = 4


def check_secrets(values: Mapping[str, str]) -> list[tuple[str, str]]:
    """Problems with a secrets map, as (name, message) pairs (empty when all is well)."""
    problems = []
    for name, value in values.items():
        if not NAME.match(name):
            problems.append((name, "secret names are letters, digits and _ (an environment name)"))
        elif len(value) < MIN_LENGTH:
            problems.append((name, f"secret values need at least {MIN_LENGTH} characters"))
    return problems


class Masker:
    """Replaces every known secret value in text (longest first, so overlaps mask whole)."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._pattern: re.Pattern[str] | None = None
        self.update(values or {})

    def update(self, values: Mapping[str, str]) -> None:
        found = sorted({v for v in values.values() if len(v) >= MIN_LENGTH}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, found))) if found else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        return value if self._pattern is None else self._pattern.sub(MASK, value)

    def data(self, value: Any) -> Any:
        """A copy of JSON-like data with secrets masked in every string (keys kept)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v) for v in value]
        return value
