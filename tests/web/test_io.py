"""Reading a query (`web.io.read_query`), as both services read theirs: a list takes repeated
and comma-joined values, any other field one value, and a repeated one is a 422 (the fuzz found
`?sandbox_id__eq=a&sandbox_id__eq=b` answered with one of them, chosen in silence)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request

from web.errors import InvalidInput
from web.io import read_query


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    ids: list[str] = []


def asked(query: str) -> Request:
    return Request({"type": "http", "query_string": query.encode(), "headers": []})


def test_a_list_takes_repeated_and_comma_joined_values() -> None:
    assert read_query(asked("ids=a&ids=b,c&name=x"), Query) == Query(name="x", ids=["a", "b", "c"])


def test_a_single_value_given_twice_is_refused_where_it_was() -> None:
    with pytest.raises(InvalidInput) as refused:
        read_query(asked("name=a&name=b"), Query)
    [error] = refused.value.errors
    assert error["loc"] == ["query", "name"] and error["input"] == ["a", "b"]
    assert "one value" in error["msg"]


def test_names_the_query_does_not_know_are_refused_by_the_model() -> None:
    with pytest.raises(InvalidInput, match="query.other"):
        read_query(asked("other=1"), Query)
