"""The ACP session's parts on their own: bounded fields, protocol lines, permission answers."""

from __future__ import annotations

import asyncio

from acp.schema import PermissionOption

from agent_server.agent.acp.calls import MAX_FIELD_CHARS, bounded, choose
from agent_server.agent.acp.process import _lines


def test_bounded_keeps_small_values_and_cuts_large_ones() -> None:
    small = {"command": "ls", "args": [1, 2]}
    assert bounded(small) is small
    cut = bounded("x" * (MAX_FIELD_CHARS + 10))
    assert isinstance(cut, str) and cut.endswith("[... 10 more characters cut]")
    big = bounded({"output": "y" * MAX_FIELD_CHARS})
    assert isinstance(big, str) and len(big) < MAX_FIELD_CHARS + 100
    assert big.startswith('{"output": "yyy')


async def _collect(data: list[bytes], limit: int) -> list[bytes | None]:
    stream = asyncio.StreamReader()
    for piece in data:
        stream.feed_data(piece)
    stream.feed_eof()
    return [line async for line in _lines(stream, limit)]


async def test_lines_are_split_and_an_overlong_one_is_skipped_whole() -> None:
    assert await _collect([b"ab\ncd", b"e\n", b"f"], 10) == [b"ab", b"cde", b"f"]
    assert await _collect([b"short\n", b"x" * 25, b"y" * 25 + b"\nnext\n"], 10) == [
        b"short",
        None,
        b"next",
    ]
    assert await _collect([b"z" * 30], 10) == [None]


def test_permission_answers_pick_the_agent_options() -> None:
    options = [
        PermissionOption(option_id="always", name="Always", kind="allow_always"),
        PermissionOption(option_id="once", name="Once", kind="allow_once"),
        PermissionOption(option_id="no", name="No", kind="reject_once"),
    ]
    assert choose(options, allow=True).outcome.option_id == "once"  # type: ignore[union-attr]
    assert choose(options, allow=False).outcome.option_id == "no"  # type: ignore[union-attr]
    assert choose(options[:2], allow=False).outcome.outcome == "cancelled"
