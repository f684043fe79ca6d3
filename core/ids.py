"""Identifiers and names: the shapes every process checks the same way.

Event ids are ULIDs in Crockford base32 (26 characters, no I, L, O or U), so they sort by
time as plain strings: the log, the webhook cursor and the control plane compare them that
way. The environment-name and `${NAME}` placeholder patterns live here too (not in
`core.masking`): they say what a secret may be called, which is a naming rule, and the
masking code only uses them.
"""

from __future__ import annotations

import re

from ulid import ULID

#: One event id, unanchored, for building bigger patterns (a log line's prefix).
EVENT_ID_PATTERN = "[0-9A-HJKMNP-TV-Z]{26}"
#: A whole string that is one event id (use `.match`; the anchors make it exact).
EVENT_ID = re.compile(rf"\A{EVENT_ID_PATTERN}\Z")

#: An environment variable's name, which is also what a secret may be called (it becomes one).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: `${NAME}`: a reference to a secret inside configuration; group 1 is the name.
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def new_event_id() -> str:
    """A fresh event id for the current time.

    Ids from here sort by millisecond only; an event log that needs strictly increasing ids
    within one millisecond keeps its own monotonic generator on top of the same format.
    """
    return str(ULID())


def is_placeholder(value: object) -> bool:
    """Whether `value` is one whole `${NAME}` reference (safe to show: it names a secret, it
    does not hold one)."""
    return isinstance(value, str) and PLACEHOLDER.fullmatch(value) is not None


def is_event_id(value: str) -> bool:
    """Whether `value` is exactly one event id (no surrounding text, no trailing newline)."""
    return EVENT_ID.match(value) is not None


__all__ = [
    "ENV_NAME",
    "EVENT_ID",
    "EVENT_ID_PATTERN",
    "PLACEHOLDER",
    "is_event_id",
    "is_placeholder",
    "new_event_id",
]
