"""Webhook push (SPEC 4.5): every stored event reaches the receiver, in order, whatever happens.

The first half drives a Pusher in-process through the client seam (httpx.MockTransport) and a
clock that records sleeps, so the retry schedule is checked without waiting. The second half
runs the real server against the real receiver of tests/support/receiver.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_server.config import from_env
from agent_server.delivery.http import WebhookClient
from agent_server.delivery.webhook import CURSOR_FILE, Webhook, needs_push, read_cursor
from agent_server.log import EventLog, last_logged_id
from agent_server.services import Services
from core.retry import Backoff, Clock, parse_retry_after
from events import Message, MessageEvent, PauseEvent, TextContent
from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import ScriptedLLM, call
from tests.support.receiver import Receiver
from tests.support.server import ServerProcess
from tests.support.wait import wait_for

HOOK_KEY = "hook-key-for-tests"
SECRET = "whsec_" + base64.b64encode(b"a webhook secret of 32 bytes....").decode()


# -- in-process: the pusher, its schedule, its cursor ---------------------------------------------


class FakeClock(Clock):
    """Sleeps return at once and are recorded; time moves by what was slept."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.now = 1_000.0
        self.wall = time.time() - self.now
        self.sleeps: list[float] = []
        #: After this many sleeps, the next one waits for `release` (to look at a failing pusher).
        self.hold_after = hold_after
        self.release = asyncio.Event()

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall + self.now

    async def sleep(self, seconds: float) -> None:
        if self.hold_after is not None and len(self.sleeps) >= self.hold_after:
            await self.release.wait()
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class Script:
    """A MockTransport handler answering from a list, then 200; records every request."""

    def __init__(self, *answers: httpx.Response | Exception | int) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            if isinstance(answer, int):
                return httpx.Response(answer, json={"detail": f"status {answer}"})
            return answer
        return httpx.Response(200, json={"success": True})

    def ok_bodies(self) -> list[list[dict[str, Any]]]:
        return [json.loads(r.content) for r in self.requests]


def message(n: int) -> MessageEvent:
    return MessageEvent(
        source="user", llm_message=Message(role="user", content=[TextContent(text=f"m{n}")])
    )


async def make_log(path: Path, n: int) -> EventLog:
    log = await asyncio.to_thread(EventLog.open, path / "events.jsonl")
    if n:
        await log.append(*[message(i) for i in range(n)])
    return log


def webhook_for(script: Script, clock: FakeClock, secret: str | None = None, **kw: Any) -> Webhook:
    client = WebhookClient(
        "http://control.test/api/v1/webhooks",
        HOOK_KEY,
        secret,
        transport=httpx.MockTransport(script),
        clock=clock,
    )
    return Webhook(
        client, backoff=Backoff(1.0, 60.0, random.Random(7)), clock=clock, batch_seconds=0, **kw
    )


async def until(predicate: Callable[[], Any], what: str = "", timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.005)


CID = "6f2c58b1-8d1c-4f5e-9b7a-2a1f0c3d4e5f"


async def test_batches_in_order_signed_and_cursor_saved(tmp_path: Path) -> None:
    log = await make_log(tmp_path, 250)
    script, clock = Script(), FakeClock()
    webhook = webhook_for(script, clock, SECRET, batch_events=100)
    pusher = webhook.watch(CID, tmp_path, log)
    await until(lambda: pusher.status.pending == 0 and read_cursor(tmp_path) == log.last_id)

    assert [len(b) for b in script.ok_bodies()] == [100, 100, 50]
    sent = [e["id"] for body in script.ok_bodies() for e in body]
    assert sent == [log.id_at(i) for i in range(250)]
    first = script.requests[0]
    assert first.url == f"http://control.test/api/v1/webhooks/events/{CID}"
    assert first.headers["x-session-api-key"] == HOOK_KEY
    assert first.headers["content-type"] == "application/json"
    # Standard Webhooks: v1,<base64 HMAC-SHA256 of "id.timestamp.body"> with the decoded secret,
    # checked by the receiver's own implementation.
    receiver = Receiver(secret=SECRET)
    headers = dict(first.headers.items())
    assert int(headers["webhook-timestamp"]) == int(clock.time())
    assert headers["webhook-id"] == f"msg_{log.id_at(0)}_{log.id_at(99)}"
    assert receiver._bad_signature(first.content, headers) is None
    assert receiver._bad_signature(first.content + b" ", headers) == "no valid v1 signature"
    assert pusher.status.delivered_through == log.last_id and pusher.status.last_error is None
    assert clock.sleeps == []

    # Appended later: only the new events go, from the cursor on.
    [late] = await log.append(PauseEvent())
    await until(lambda: read_cursor(tmp_path) == late.id)
    assert [e["id"] for e in script.ok_bodies()[-1]] == [late.id]
    await webhook.stop()


async def test_a_restarted_pusher_resumes_from_its_cursor(tmp_path: Path) -> None:
    log = await make_log(tmp_path, 30)
    (tmp_path / CURSOR_FILE).write_text(json.dumps({"delivered_through": log.id_at(19)}))
    script, clock = Script(), FakeClock()
    webhook = webhook_for(script, clock)
    webhook.watch(CID, tmp_path, log)
    await until(lambda: read_cursor(tmp_path) == log.last_id)
    assert [e["id"] for b in script.ok_bodies() for e in b] == [log.id_at(i) for i in range(20, 30)]
    await webhook.stop()


async def test_server_errors_back_off_exponentially_keeping_the_batch(tmp_path: Path) -> None:
    log = await make_log(tmp_path, 3)
    script, clock = Script(500, 502, 503, httpx.ConnectError("refused"), 408), FakeClock()
    webhook = webhook_for(script, clock)
    pusher = webhook.watch(CID, tmp_path, log)
    await until(lambda: read_cursor(tmp_path) == log.last_id)

    assert len(script.requests) == 6
    assert len({r.content for r in script.requests}) == 1  # the same batch every time
    ceilings = [1, 2, 4, 8, 16]
    assert all(c / 2 <= s <= c and s >= 1 for s, c in zip(clock.sleeps, ceilings)), clock.sleeps
    assert pusher.failures == 0 and pusher.status.last_error is None
    await webhook.stop()


async def test_retries_and_lag_are_measured_for_the_metrics(tmp_path: Path) -> None:
    """What GET /metrics shows: failed attempts, and how long the oldest event has waited."""
    log = await make_log(tmp_path, 3)
    script, clock = Script(500, 500), FakeClock(hold_after=1)
    webhook = webhook_for(script, clock)
    webhook.watch(CID, tmp_path, log)
    await until(lambda: webhook.retries == 2, "two failed attempts")
    assert webhook.lag() == clock.sleeps[0] > 0  # waiting since the pusher saw the events
    assert webhook.totals().pending == 3 and webhook.totals().failing == 1
    clock.release.set()
    await until(lambda: read_cursor(tmp_path) == log.last_id)
    assert webhook.lag() == 0 and webhook.retries == 2
    await webhook.stop()


async def test_the_delay_is_capped_and_retries_never_stop(tmp_path: Path) -> None:
    log = await make_log(tmp_path, 1)
    script, clock = Script(*[httpx.ConnectError("refused")] * 40), FakeClock(hold_after=20)
    webhook = webhook_for(script, clock)
    pusher = webhook.watch(CID, tmp_path, log)
    await until(lambda: len(script.requests) == 21, "21 attempts")
    assert pusher.status.pending == 1
    assert pusher.status.last_error is not None and "unreachable" in pusher.status.last_error
    assert pusher.status.last_attempt is not None
    assert max(clock.sleeps) <= 60 and min(clock.sleeps[10:]) >= 30
    assert webhook.totals().failing == 1 and webhook.totals().pending == 1
    clock.release.set()
    await until(lambda: read_cursor(tmp_path) == log.last_id, "delivery after 40 failures")
    assert len(script.requests) == 41
    await webhook.stop()


async def test_retry_after_is_honoured(tmp_path: Path) -> None:
    log = await make_log(tmp_path, 2)
    later = format_datetime(
        datetime.fromtimestamp(FakeClock().time(), UTC) + timedelta(seconds=20), usegmt=True
    )
    script = Script(
        httpx.Response(429, headers={"retry-after": "7"}),
        httpx.Response(503, headers={"retry-after": later}),
        httpx.Response(429, headers={"retry-after": "3600"}),
    )
    clock = FakeClock()
    webhook = webhook_for(script, clock)
    webhook.watch(CID, tmp_path, log)
    await until(lambda: read_cursor(tmp_path) == log.last_id)
    assert clock.sleeps[0] == 7
    assert 12 <= clock.sleeps[1] <= 13  # an HTTP date 20 s after the start, 7 s slept already
    assert clock.sleeps[2] == 60  # bounded by the longest delay
    await webhook.stop()


async def test_a_refused_batch_is_kept_logged_and_retried_at_the_longest_delay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = await make_log(tmp_path, 2)
    refusal = httpx.Response(400, json={"detail": "we do not like this batch"})
    script, clock = Script(refusal, refusal), FakeClock(hold_after=1)
    webhook = webhook_for(script, clock)
    with caplog.at_level(logging.WARNING, logger="agent_server.delivery.webhook"):
        pusher = webhook.watch(CID, tmp_path, log)
        await until(lambda: len(script.requests) == 2)
        assert "we do not like this batch" in (pusher.status.last_error or "")
        assert pusher.status.pending == 2
        clock.release.set()
        await until(lambda: read_cursor(tmp_path) == log.last_id)
    assert clock.sleeps == [60, 60]
    assert "we do not like this batch" in caplog.text and "keeping them" in caplog.text
    assert len({r.content for r in script.requests}) == 1
    await webhook.stop()


async def test_a_batch_too_large_is_split(tmp_path: Path) -> None:
    log = await make_log(tmp_path, 8)
    script, clock = Script(413, 413), FakeClock()
    webhook = webhook_for(script, clock)
    webhook.watch(CID, tmp_path, log)
    await until(lambda: read_cursor(tmp_path) == log.last_id)
    sizes = [len(json.loads(r.content)) for r in script.requests]
    assert sizes == [8, 4, 2, 6]  # halved until accepted; the rest then goes as one batch
    delivered = [e["id"] for b in script.ok_bodies()[2:] for e in b]
    assert delivered == [log.id_at(i) for i in range(8)]
    await webhook.stop()


def test_backoff_schedule() -> None:
    backoff = Backoff(1.0, 60.0, random.Random(3))
    for failures in range(1, 30):
        ceiling = min(60.0, 2.0 ** (failures - 1))
        for _ in range(20):
            delay = backoff.delay(failures)
            assert max(1.0, ceiling / 2) <= delay <= ceiling
    # Retry-After is bounded both ways: "0" or a date in the past must not mean a tight loop.
    assert backoff.retry_after(3600) == 60 and backoff.retry_after(-5) == 1
    assert backoff.retry_after(0) == 1
    assert parse_retry_after("2.5", 0) == 2.5
    assert parse_retry_after("soon", 0) is None and parse_retry_after(None, 0) is None


def test_the_log_tail_says_whether_a_push_is_needed(tmp_path: Path) -> None:
    log_file = tmp_path / "events.jsonl"
    assert last_logged_id(log_file) is None and not needs_push(tmp_path)
    ids = ["01J0000000000000000000000" + c for c in "ABC"]
    big = "x" * 200_000  # lines longer than one read chunk
    log_file.write_text("".join(f'{{"id":"{i}","pad":"{big}"}}\n' for i in ids) + '{"id":"01J00')
    assert last_logged_id(log_file, chunk=4096) == ids[-1]  # the torn line is not an event
    assert needs_push(tmp_path)  # no cursor
    (tmp_path / CURSOR_FILE).write_text(json.dumps({"delivered_through": ids[1]}))
    assert needs_push(tmp_path)
    (tmp_path / CURSOR_FILE).write_text(json.dumps({"delivered_through": ids[2]}))
    assert not needs_push(tmp_path)
    (tmp_path / CURSOR_FILE).write_text("{not json")
    assert read_cursor(tmp_path) is None and needs_push(tmp_path)


async def test_settings_come_from_the_environment_and_the_key_defaults_to_the_session_key(
    tmp_path: Path,
) -> None:
    config = from_env(
        {
            "SESSION_API_KEY": "first,second",
            "AGENT_SERVER_STATE_DIR": str(tmp_path),
            "AGENT_SERVER_WEBHOOK_URL": "http://x/hooks",
            "AGENT_SERVER_WEBHOOK_BATCH_EVENTS": "7",
            "AGENT_SERVER_WS_QUEUE_EVENTS": "9",
        }
    )
    settings = config.delivery
    assert settings.webhook_batch_events == 7 and settings.ws_queue_events == 9
    services = Services.build(config)
    delivery = services.delivery
    assert delivery.webhook is not None
    assert delivery.webhook.client.headers("m", b"[]")["x-session-api-key"] == "first"
    assert "webhook-signature" not in delivery.webhook.client.headers("m", b"[]")
    assert delivery.webhook.batch_events == 7
    await delivery.close()


def test_the_receiver_is_strict() -> None:
    receiver = Receiver(api_key=HOOK_KEY).start()
    try:
        url = receiver.base_url + f"/events/{CID}"
        good = [{"kind": "PauseEvent", "source": "user"}]
        with httpx.Client(headers={"X-Session-API-Key": HOOK_KEY}) as c:
            assert c.post(url, json=good).json() == {"success": True}
            unknown = c.post(url, json=[{**good[0], "surprise": 1}])
            assert unknown.status_code == 422
            assert unknown.json()["detail"][0]["type"] == "extra_forbidden"
            assert c.post(url, json=good[0]).status_code == 422
            assert c.post(url, json=[{"kind": "NoSuchEvent"}]).status_code == 422
            assert c.post(receiver.base_url + "/events/not-a-uuid", json=good).status_code == 422
        assert httpx.post(url, json=good, headers={"X-Session-API-Key": "wrong"}).status_code == 401
    finally:
        receiver.stop()


# -- the real server against the real receiver -----------------------------------------------------


def hook_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    return {
        "AGENT_SERVER_WEBHOOK_URL": receiver.base_url,
        "AGENT_SERVER_WEBHOOK_API_KEY": HOOK_KEY,
        "AGENT_SERVER_WEBHOOK_SECRET": SECRET,
        "AGENT_SERVER_WEBHOOK_BATCH_MS": "20",
        "AGENT_SERVER_WEBHOOK_RETRY_MIN": "0.05",
        "AGENT_SERVER_WEBHOOK_RETRY_MAX": "0.5",
        **extra,
    }


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    rec = Receiver(api_key=HOOK_KEY, secret=SECRET).start()
    yield rec
    rec.stop()


@pytest.fixture
def healthy(receiver: Receiver) -> Iterator[Receiver]:
    """The shared receiver, up and answering normally before and after the test."""
    receiver.delay, receiver.refuse = 0.0, None
    if receiver._server is None:
        receiver.up()
    yield receiver
    receiver.delay, receiver.refuse = 0.0, None
    if receiver._server is None:
        receiver.up()


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("hooked") / "state", env=hook_env(receiver)
    ).start()
    yield proc
    proc.stop()


def steps(llm: ScriptedLLM, key: str, n: int, delay: float = 0.0) -> None:
    from tests.support.llm import Reply

    llm.script(
        key,
        *[Reply(tool_calls=[("think", {"thought": f"step {i}"})], delay=delay) for i in range(n)],
        call("finish", message="done"),
    )


def stored(client: httpx.Client, cid: str) -> list[dict[str, Any]]:
    return events(client, cid)


def wait_delivered(
    receiver: Receiver, client: httpx.Client, cid: str, timeout: float = 30
) -> list[dict[str, Any]]:
    """Wait until the receiver holds every stored event (deduped by id); returns them."""
    want = [e["id"] for e in stored(client, cid)]
    wait_for(
        lambda: receiver.unique_ids(cid) == want,
        timeout=timeout,
        what=f"{len(want)} events at the receiver (has {len(receiver.unique_ids(cid))})",
    )
    return stored(client, cid)


@pytest.mark.e2e
def test_every_event_arrives_as_search_returns_it_in_order(
    hooked: ServerProcess, healthy: Receiver, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    steps(llm, key, 5)
    with hooked.client() as c:
        conv = create(c, llm, key, tmp_path, message="go", run=True, llm_extra={"stream": True})
        assert wait_status(c, conv["id"]) == "finished"
        want = wait_delivered(healthy, c, conv["id"])
        assert healthy.events(conv["id"]) == want  # once each, in order, as search returns them
        kinds = {e["kind"] for e in want}
        assert {
            "SystemPromptEvent",
            "MessageEvent",
            "ActionEvent",
            "ObservationEvent",
            "ConversationStateUpdateEvent",
        } <= kinds
        assert "StreamingDeltaEvent" not in kinds
        batch = next(b for b in healthy.batches if b.conversation_id == conv["id"])
        assert batch.headers["x-session-api-key"] == HOOK_KEY
        assert batch.headers["webhook-signature"].startswith("v1,")

        status = wait_for(
            lambda: (
                (w := c.get(f"/api/conversations/{conv['id']}").json()["webhook"])["pending"] == 0
                and w
            )
        )
        assert status["delivered_through"] == want[-1]["id"] and status["last_error"] is None
        assert c.get("/server_info").json()["webhook"]["failing"] == 0


@pytest.mark.e2e
def test_a_conversations_info_is_posted_when_it_starts_pauses_changes_and_is_deleted(
    hooked: ServerProcess, healthy: Receiver, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """As the OpenHands agent server does (its /conversations webhook): a control plane learns
    of a conversation made straight on the agent server before its first event arrives."""
    with hooked.client() as c:
        conv = create(c, llm, key, tmp_path)
        cid = conv["id"]
        assert c.post(f"/api/conversations/{cid}/pause").status_code == 200
        paused = c.get(f"/api/conversations/{cid}").json()["execution_status"]
        assert c.patch(f"/api/conversations/{cid}", json={"title": "Renamed"}).status_code == 200
        assert c.delete(f"/api/conversations/{cid}").status_code == 200

    def statuses() -> list[str]:
        return [i["execution_status"] for i in list(healthy.infos) if i["id"] == cid]

    assert wait_for(lambda: len(statuses()) == 4 and statuses()) == [
        "idle",
        paused,
        paused,
        "deleting",
    ]
    assert [i["title"] for i in healthy.infos if i["id"] == cid][2] == "Renamed"
    first = next(i for i in healthy.infos if i["id"] == cid)
    assert first["agent"]["llm"]["model"] == conv["agent"]["llm"]["model"]
    assert "sk-test-key" not in json.dumps(healthy.infos)


@pytest.mark.e2e
def test_receiver_down_for_the_whole_run_then_up(
    hooked: ServerProcess, healthy: Receiver, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    healthy.down()
    steps(llm, key, 8)
    with hooked.client() as c:
        conv = create(c, llm, key, tmp_path, message="go", run=True)
        assert wait_status(c, conv["id"]) == "finished"
        lag = wait_for(
            lambda: (
                (w := c.get(f"/api/conversations/{conv['id']}").json()["webhook"])["last_error"]
                and w
            ),
            what="the failure reported",
        )
        assert lag["pending"] > 0 and "unreachable" in lag["last_error"]
        totals = c.get("/server_info").json()["webhook"]
        assert totals["failing"] >= 1 and totals["pending"] >= lag["pending"]
        assert healthy.ids(conv["id"]) == []

        healthy.up()
        want = wait_delivered(healthy, c, conv["id"])
        assert healthy.events(conv["id"]) == want
        wait_for(
            lambda: c.get(f"/api/conversations/{conv['id']}").json()["webhook"]["pending"] == 0
        )


@pytest.mark.e2e
def test_errors_and_refusals_are_retried_until_accepted(
    hooked: ServerProcess, healthy: Receiver, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    steps(llm, key, 3)
    healthy.fail(500, times=2)
    healthy.fail(429, times=1, retry_after=0.2)
    healthy.refuse = (400, "batch refused by the test")
    with hooked.client() as c:
        conv = create(c, llm, key, tmp_path, message="go", run=True)
        assert wait_status(c, conv["id"]) == "finished"
        wait_for(lambda: len(healthy.attempts_for(conv["id"])) >= 5, what="five attempts")
        lag = c.get(f"/api/conversations/{conv['id']}").json()["webhook"]
        assert "HTTP 400" in lag["last_error"] and "batch refused by the test" in lag["last_error"]
        healthy.refuse = None
        want = wait_delivered(healthy, c, conv["id"])
    assert healthy.events(conv["id"]) == want
    statuses = [a.status for a in healthy.attempts_for(conv["id"])]
    assert statuses[:3] == [500, 500, 429] and 400 in statuses
    assert "webhook refused" in hooked.output()


@pytest.mark.e2e
def test_killed_mid_delivery_everything_arrives_after_restart(
    tmp_path_factory: pytest.TempPathFactory,
    healthy: Receiver,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
) -> None:
    proc = ServerProcess(
        tmp_path_factory.mktemp("killed") / "state",
        env=hook_env(healthy, AGENT_SERVER_WEBHOOK_BATCH_EVENTS="3"),
    ).start()
    try:
        healthy.delay = 0.2
        with proc.client() as c:
            conv = create(c, llm, key, tmp_path)
            for i in range(
                30
            ):  # stored events without a run: a fresh server's first LLM call is slow
                send(c, conv["id"], f"note {i}", run=False)
            want = [e["id"] for e in stored(c, conv["id"])]
        wait_for(lambda: len(healthy.ids(conv["id"])) >= 6, what="a few batches")
        proc.kill()
        got_before = healthy.unique_ids(conv["id"])
        assert 0 < len(got_before) < len(want)

        healthy.delay = 0.0
        proc.start()  # the log stays closed until its cursor file says it is behind: it does
        wait_for(
            lambda: healthy.unique_ids(conv["id"]) == want,
            timeout=30,
            what="every event after the restart",
        )
        received = healthy.ids(conv["id"])
        # At least once: a repeat is at most the batch in flight at the kill.
        assert len(received) - len(want) <= 3
        assert received[: len(got_before)] == want[: len(got_before)]
    finally:
        healthy.delay = 0.0
        proc.stop()


@pytest.mark.e2e
def test_sigterm_flushes_what_the_log_holds(
    tmp_path_factory: pytest.TempPathFactory,
    healthy: Receiver,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
) -> None:
    # Batches wait a minute for more events: only the shutdown flush can send these.
    proc = ServerProcess(
        tmp_path_factory.mktemp("flushed") / "state",
        env=hook_env(healthy, AGENT_SERVER_WEBHOOK_BATCH_MS="60000"),
    ).start()
    try:
        with proc.client() as c:
            conv = create(c, llm, key, tmp_path)
            for i in range(5):
                send(c, conv["id"], f"note {i}", run=False)
            want = stored(c, conv["id"])
        assert healthy.ids(conv["id"]) == []
        assert proc.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
        assert healthy.events(conv["id"]) == want
    finally:
        proc.stop()


@pytest.mark.e2e
def test_a_conversation_id_used_again_after_a_delete_is_pushed(
    hooked: ServerProcess, healthy: Receiver, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    import uuid

    cid = str(uuid.uuid4())
    with hooked.client() as c:
        first = create(c, llm, key, tmp_path, conversation_id=cid)
        assert first["id"] == cid
        wait_delivered(healthy, c, cid)
        assert c.delete(f"/api/conversations/{cid}").status_code == 200
        again = c.post(
            "/api/conversations",
            json={
                "conversation_id": cid,
                "agent": {"llm": {"model": "openai/x"}},
                "workspace": {"working_dir": str(tmp_path)},
            },
        )
        assert again.status_code == 201
        r = c.post(
            f"/api/conversations/{cid}/events",
            json={"content": [{"type": "text", "text": "second life"}]},
        )
        assert r.status_code == 200
        want = [e["id"] for e in stored(c, cid)]
        wait_for(
            lambda: set(want) <= set(healthy.unique_ids(cid)),
            timeout=30,
            what="the second life's events at the receiver",
        )
        wait_for(
            lambda: c.get(f"/api/conversations/{cid}").json()["webhook"]["pending"] == 0,
            what="nothing pending",
        )
