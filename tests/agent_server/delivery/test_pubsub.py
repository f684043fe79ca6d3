"""agent_server.delivery.pubsub: bounded per-subscriber queues; publishing never waits."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_server.delivery.pubsub import (
    Frame,
    PubSub,
    SubscriptionEnded,
    SubscriptionState,
    TooManySubscribers,
)
from events import PauseEvent, StreamingDeltaEvent


def frame(n: int, size: int = 10) -> Frame:
    return Frame.stored(f"{n:026d}", b"x" * size + b"\n")


def test_a_stored_frame_is_the_line_without_its_newline() -> None:
    f = Frame.stored("id", b'{"a": 1}\n')
    assert (f.event_id, f.text, f.size) == ("id", '{"a": 1}', 8)
    t = Frame.transient(StreamingDeltaEvent(content="hi"))
    assert t.event_id is None and json.loads(t.text)["content"] == "hi"


async def test_publishing_queues_without_waiting_and_cuts_off_a_full_subscriber() -> None:
    pubsub = PubSub(max_subscribers=3, max_events=4, max_bytes=100)
    slow, fast = pubsub.subscribe("c"), pubsub.subscribe("c")
    pubsub.publish("c", [frame(1), frame(2)])
    assert await fast.get() == frame(1) and await fast.get() == frame(2)
    pubsub.publish("c", [frame(3), frame(4)])  # synchronous: nobody is awaited
    assert len(slow) == 4 and slow.state is SubscriptionState.OPEN
    pubsub.publish("c", [frame(5)])  # a fifth event: past max_events
    assert slow.state is SubscriptionState.OVERFLOWED and slow.ended.is_set() and len(slow) == 0
    assert pubsub.count("c") == 1 and pubsub.overflows == 1
    with pytest.raises(SubscriptionEnded):
        await slow.get()
    assert [(await fast.get()).event_id for _ in range(3)] == [frame(n).event_id for n in (3, 4, 5)]

    by_bytes = pubsub.subscribe("c")
    pubsub.publish("c", [frame(6, 60)])
    pubsub.publish("c", [frame(7, 60)])  # 120 bytes waiting: past max_bytes
    assert by_bytes.state is SubscriptionState.OVERFLOWED
    big = pubsub.subscribe("c")
    pubsub.publish("c", [frame(8, 500)])  # one event larger than the limit still goes, alone
    assert big.state is SubscriptionState.OPEN and (await big.get()).size == 500


async def test_subscriber_limit_private_frames_and_transient_events() -> None:
    pubsub = PubSub(max_subscribers=2)
    first, second = pubsub.subscribe("c"), pubsub.subscribe("c")
    with pytest.raises(TooManySubscribers):
        pubsub.subscribe("c")
    assert pubsub.subscribe("other").conversation_id == "other"
    first.put(Frame.transient(PauseEvent()))  # to one subscriber, past any limit
    pubsub.publish("c", [Frame.transient(StreamingDeltaEvent(content="par"))])
    assert json.loads((await first.get()).text)["kind"] == "PauseEvent"
    delta = await first.get()
    assert delta.event_id is None and json.loads(delta.text)["content"] == "par"
    assert len(second) == 1
    second.close()
    assert pubsub.count("c") == 1 and second.state is SubscriptionState.CLOSED
    pubsub.subscribe("c")  # room again


async def test_a_waiting_reader_wakes_on_publish_and_on_close() -> None:
    pubsub = PubSub()
    sub = pubsub.subscribe("c")
    reader = asyncio.create_task(sub.get())
    await asyncio.sleep(0)  # the reader is now waiting
    assert not reader.done()
    pubsub.publish("c", [frame(1)])
    assert await asyncio.wait_for(reader, 5) == frame(1)
    reader = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    pubsub.close_all()
    with pytest.raises(SubscriptionEnded) as caught:
        await asyncio.wait_for(reader, 5)
    assert caught.value.state is SubscriptionState.CLOSED
    assert not pubsub.has_subscribers("c") and pubsub.count() == 0


def test_publishing_to_nobody_and_to_others_is_harmless() -> None:
    pubsub = PubSub()
    other = pubsub.subscribe("other")
    pubsub.publish("c", [frame(1)])
    assert len(other) == 0 and pubsub.count("c") == 0
