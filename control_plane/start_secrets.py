"""What a client is shown of a start's secrets: never a value, whole or in part.

A start request carries secrets: its own, and its plugins' environments and headers (keys,
often). Its task shows clients two things that could quote them:

- the request itself, shown again (`shown`): each secret's and each plugin value's name kept,
  its value REDACTED, as the OpenHands app server shows it;
- the detail of a failed start (`masked`), which may quote what a sandbox or the agent server
  answered: every value the start used (its secrets, the user's stored ones, the user's LLM
  key) is masked in it, in its JSON-escaped form too, and so is any piece of 8 characters or
  more (up to 64) of its start or its end, since an error often quotes an input cut short.

`masked` is not `core.masking.Masker`: that one masks the encodings a program may print a
secret in (base64, hex, URL), wherever a conversation's events go; this one looks for pieces
of a few known values in one short text.
"""

from __future__ import annotations

import json
from typing import Any

from control_plane.start_request import StartRequest
from core.masking import MASK, MIN_LENGTH, REDACTED


def shown(request: StartRequest) -> dict[str, Any]:
    """The start request as a client may see it again: secret values, and the values of
    plugins' environments and headers, REDACTED (their names kept)."""
    data = request.model_dump(mode="json")
    data["secrets"] = dict.fromkeys(request.secrets, REDACTED)
    for plugin in data["plugins"]:
        plugin["env"] = dict.fromkeys(plugin["env"], REDACTED)
        plugin["headers"] = dict.fromkeys(plugin["headers"], REDACTED)
    return data


def masked(text: str, secrets: list[str]) -> str:
    """`text` with each secret (and its JSON-escaped form) replaced, and with any run of 8 or
    more characters of one (an error quotes an input cut short) too."""
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= MIN_LENGTH:
            for form in (value, json.dumps(value)[1:-1]):
                text = text.replace(form, MASK)
            for k in range(min(len(value), 64), 7, -1):  # a piece of its start or end
                text = text.replace(value[:k], MASK).replace(value[-k:], MASK)
    return text
