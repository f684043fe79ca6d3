"""Path parameters, validated like any other input (422 with loc ["path", name])."""

from __future__ import annotations

import re
import uuid

from starlette.requests import Request

from web.errors import invalid

#: What an id of this control plane may be (the OpenAPI document declares the same).
ID_PATTERN = r"^[A-Za-z0-9-]{1,64}$"
_ID = re.compile(ID_PATTERN)
#: An id this control plane made (a UUID, with or without its hyphens): what the batch reads
#: take, so that text no id has is a 422 rather than a null.
MADE_ID = (
    r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
    r"[0-9a-fA-F]{12}$"
)


def path_id(request: Request, name: str) -> str:
    value = str(request.path_params[name])
    if not _ID.match(value):
        raise invalid(
            ["path", name],
            "not an id: 1 to 64 letters, digits or '-'",
            "string_pattern_mismatch",
            value,
        )
    return value


def path_uuid(request: Request, name: str) -> str:
    value = str(request.path_params[name])
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise invalid(
            ["path", name], "Input should be a valid UUID", "uuid_parsing", value
        ) from None
