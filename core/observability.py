"""SPEC 2.5's observability fields, one set of rules for the control plane and the agent server.

`observability_span_name` names a child span under a conversation's root span (stable and
low-cardinality: a short identifier, not free text), `observability_tags` are added to the
root span, `observability_metadata` holds trace-level attributes. Metadata values are
scalars (string, number, boolean) or homogeneous arrays of one scalar type; anything else (a
nested object, null, a mixed array, an array of arrays or objects) is refused with one error
located at its key. Every size is bounded, so a request cannot make a span huge.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
)

#: A span name: a short identifier (letters, digits and `_ . : / -`), 1 to 128 characters.
SPAN_NAME = r"^[A-Za-z0-9_.:/-]{1,128}$"
#: Tags and metadata keys: text without control characters.
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]*$"
#: A metadata key: 1 to 128 characters, none a control character (one pattern, so the
#: document says it as the keys' `propertyNames`).
KEY = r"^[^\x00-\x1f\x7f-\x9f]{1,128}$"
MAX_TAGS = 50
MAX_TAG_LENGTH = 200
MAX_KEYS = 100
MAX_TEXT = 1000
MAX_ITEMS = 100
MAX_ITEM_TEXT = 200
#: Integers an OTLP attribute carries (int64).
INT64 = 2**63

SpanName = Annotated[str, StringConstraints(pattern=SPAN_NAME)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TAG_LENGTH, pattern=PRINTABLE)]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Key = Annotated[str, StringConstraints(pattern=KEY)]
Integer = Annotated[StrictInt, Field(ge=-INT64, lt=INT64)]
Number = Integer | Annotated[StrictFloat, Field(allow_inf_nan=False)]
Text = Annotated[StrictStr, Field(max_length=MAX_TEXT)]
ItemText = Annotated[StrictStr, Field(max_length=MAX_ITEM_TEXT)]


def _integer_in_range(value: Any) -> bool:
    """False for an integer an OTLP attribute cannot carry (the float form would take it and
    silently round it: refused instead)."""
    return not isinstance(value, int) or isinstance(value, bool) or -INT64 <= value < INT64


def _kind(value: Any) -> str | None:
    """The SPEC's scalar type of a value (a boolean is no number), None for any other value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _shape(value: Any) -> Any:
    """One clear error for a value of the wrong shape, before the union tries each form."""
    if isinstance(value, list):
        kinds = {_kind(item) for item in value}
        if None in kinds or len(kinds) > 1:
            raise ValueError(
                "an array must hold scalars of one type: string[], number[] or "
                "boolean[] (no null, object or array inside)"
            )
        if len(value) > MAX_ITEMS:
            raise ValueError(f"an array holds at most {MAX_ITEMS} values")
        if any(isinstance(item, str) and len(item) > MAX_ITEM_TEXT for item in value):
            raise ValueError(f"a string in an array is at most {MAX_ITEM_TEXT} characters")
        if not all(_integer_in_range(item) for item in value):
            raise ValueError("an integer in an array is a 64-bit signed integer")
    elif _kind(value) is None:
        raise ValueError("a value is a string, number or boolean, or an array of one of them")
    elif isinstance(value, str) and len(value) > MAX_TEXT:
        raise ValueError(f"a string value is at most {MAX_TEXT} characters")
    elif not _integer_in_range(value):
        raise ValueError("an integer is a 64-bit signed integer")
    return value


Value = Annotated[
    Text
    | StrictBool
    | Number
    | Annotated[list[ItemText], Field(max_length=MAX_ITEMS)]
    | Annotated[list[StrictBool], Field(max_length=MAX_ITEMS)]
    | Annotated[list[Number], Field(max_length=MAX_ITEMS)],
    BeforeValidator(_shape),
]
Metadata = Annotated[dict[Key, Value], Field(max_length=MAX_KEYS)]
