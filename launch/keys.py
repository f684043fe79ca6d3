"""The keys over a pipe: a launcher writes them, the agent server reads them to the end.

A sandbox's launcher (bubblewrap's pid 1, a container's tini) holds the environment it passes
on, readable inside the sandbox; so the keys never travel in one. They are one JSON object of
variable names to values, written on a pipe (a container's stdin, a Swarm secret's file, a
warm server's claim body) whose descriptor `AGENT_SERVER_KEYS_FD` names; the server reads it
to its end and sets those variables for itself alone (`agent_server.secrecy`).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, TypeAdapter

from launch.env import variable

#: Far more than the keys need; a writer that never stops is refused.
MAX_BYTES = 64 * 1024
#: The session key's variable (the one key without the agent server's prefix).
SESSION_API_KEY = "SESSION_API_KEY"


class Keys(BaseModel):
    """The keys a launcher hands over; a field left None is not sent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_api_key: str
    webhook_secret: str | None = None
    """What the server signs its webhook deliveries with."""
    webhook_sender: str | None = None
    """Who the server is to its webhook (the sandbox's id), with `webhook_secret`."""
    network_url: str | None = None
    network_token: str | None = None
    """The sandbox's credential for `network_url`."""
    webhook_api_key: str | None = None
    """The key sent to the webhook (accepted by the server; no launcher sends it today)."""

    def variables(self) -> dict[str, str]:
        """Variable -> value of every key set, in the fields' order."""
        return {name_of(field): value for field, value in self if value is not None}

    def encode(self) -> bytes:
        """What goes on the pipe."""
        return json.dumps(self.variables()).encode()


def name_of(field: str) -> str:
    """The variable a key field travels as."""
    return SESSION_API_KEY if field == "session_api_key" else variable(field)


#: The variables the pipe may carry: the server's keys, nothing else.
NAMES = frozenset(name_of(field) for field in Keys.model_fields)
_OBJECT = TypeAdapter(dict[str, str])


def decode(data: bytes) -> dict[str, str]:
    """The variables `data` sets; ValueError when it is not a JSON object of key names to
    strings (pydantic's ValidationError is one): checked before anything acts on it."""
    keys = _OBJECT.validate_python(json.loads(data))
    if unknown := sorted(set(keys) - NAMES):
        raise ValueError(f"not a key: {', '.join(unknown)}")
    return keys
