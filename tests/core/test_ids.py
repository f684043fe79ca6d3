"""core.ids: what counts as an event id, a secret's name and a `${NAME}` reference."""

from __future__ import annotations

import time

import pytest

from core.ids import ENV_NAME, EVENT_ID, EVENT_ID_PATTERN, PLACEHOLDER, is_event_id, new_event_id


def test_a_new_event_id_is_an_event_id() -> None:
    event_id = new_event_id()
    assert len(event_id) == 26 and is_event_id(event_id) and EVENT_ID.match(event_id)


def test_later_ids_sort_after_earlier_ones_as_plain_strings() -> None:
    first = new_event_id()
    time.sleep(0.002)  # ULIDs order by millisecond
    assert new_event_id() > first


@pytest.mark.parametrize(
    "value",
    [
        "01J00000000000000000000000",  # 26 characters, Crockford base32
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    ],
)
def test_event_ids_are_accepted(value: str) -> None:
    assert is_event_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "01J0000000000000000000000",  # 25
        "01J000000000000000000000000",  # 27
        "01J0000000000000000000000I",  # I, L, O and U are not Crockford digits
        "01J0000000000000000000000U",
        "01j00000000000000000000000",  # lower case is not what the log writes
        "01J00000000000000000000000\n",  # no trailing newline sneaks through
        " 01J00000000000000000000000",
    ],
)
def test_anything_else_is_not_an_event_id(value: str) -> None:
    assert not is_event_id(value) and EVENT_ID.match(value) is None


def test_the_pattern_embeds_in_a_bigger_one() -> None:
    import re

    line = re.compile(rf'\{{"id":"({EVENT_ID_PATTERN})"')
    match = line.match('{"id":"01J00000000000000000000000","kind":"x"}')
    assert match is not None and match.group(1) == "01J00000000000000000000000"


@pytest.mark.parametrize("name", ["API_TOKEN", "_private", "a1", "X" * 128])
def test_environment_names(name: str) -> None:
    assert ENV_NAME.match(name)


@pytest.mark.parametrize("name", ["", "1ABC", "A-B", "A B", "É", "X" * 129])
def test_not_environment_names(name: str) -> None:
    assert not ENV_NAME.match(name)


def test_placeholders_name_the_secrets_they_reference() -> None:
    assert PLACEHOLDER.findall("Bearer ${API_TOKEN} for ${user_2}") == ["API_TOKEN", "user_2"]
    assert PLACEHOLDER.findall("$API_TOKEN ${1X} ${} {A}") == []
    assert PLACEHOLDER.fullmatch("${REF}") and not PLACEHOLDER.fullmatch("x${REF}")
