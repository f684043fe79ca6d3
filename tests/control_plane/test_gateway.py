"""The LLM gateway (issue 36) as a user and a sandbox meet it: a conversation's model calls go
through the control plane, which puts the user's key in; the sandbox holds only a token of its
own, which opens nothing but the gateway. Real control planes with process sandboxes, the
scripted LLM as the upstream (it records the headers it got), a user's limits seen in the
conversation's transcript."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.crypto import token_sandbox
from control_plane.gateway import MAX_BODY, credentials
from control_plane.gateway.limits import caps
from control_plane.gateway.metering import Meter, cost
from control_plane.gateway.upstream import join
from control_plane.settings import UserSettings
from control_plane.store import Database, accounts
from control_plane.store import usage as store_usage
from core import processes
from tests.control_plane.support import (
    ControlPlane,
    ShiftedClock,
    configure_llm,
    conversation,
    make_config,
    sandbox_pid,
    start,
)
from tests.support.llm import Reply, ScriptedLLM, call, error, text
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

KEY = "sk-test-key"
GATEWAY = "/api/v1/llm"
#: The key built in the shell, so the command that looks for it does not hold it.
FIND_KEY = "k=sk-test; "


def session_of(client: httpx.Client, sid: str) -> str:
    key: str = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["session_api_key"]
    return key


def given_llm(client: httpx.Client, sid: str) -> tuple[str, str]:
    """The LLM base URL and key a sandbox's own clients are given (users/me, as the Cloud
    workspace asks it, with the sandbox's session key)."""
    r = client.get(
        "/api/v1/users/me",
        params={"expose_secrets": True},
        headers={"X-Session-API-Key": session_of(client, sid)},
    )
    assert r.status_code == 200, r.text
    return r.json()["llm_base_url"], r.json()["llm_api_key"]


def transcript(client: httpx.Client, cid: str) -> str:
    r = client.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100})
    assert r.status_code == 200, r.text
    return json.dumps(r.json())


def ended(client: httpx.Client, cid: str, status: str = "finished", timeout: float = 60) -> None:
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == status,
        timeout,
        what=f"the run to be {status}",
    )


def usage(client: httpx.Client, **params: Any) -> dict[str, Any]:
    r = client.get("/api/v1/llm-usage", params=params)
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def chat(
    plane: ControlPlane, token: str | None, path: str = "/chat/completions", **kw: Any
) -> httpx.Response:
    """A model call to the gateway as a sandbox's client makes it (OpenAI's shape)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(kw.pop("headers", {}))
    body = kw.pop("json", {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]})
    return httpx.post(plane.url + GATEWAY + path, json=body, headers=headers, timeout=30, **kw)


def sandbox_processes(plane: ControlPlane, sid: str) -> list[int]:
    """The sandbox's launcher and everything under it."""
    found, todo = [], [sandbox_pid(plane, sid)]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(processes.children(pid))
    return found


def files_holding(root: Path, secret: bytes) -> list[Path]:
    holding = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret in path.read_bytes():
                    holding.append(path)
            except OSError:
                continue
    return holding


# -- through a real control plane -------------------------------------------------------------


def test_the_key_never_enters_the_sandbox(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    plane = control_plane
    client = plane.client(plane.new_user("alice"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    task = start(client, "look around", run=False)
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    root = plane.config.state_dir / "sandboxes" / sid
    environ = "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"
    llm.script(
        key,
        call(
            "terminal",
            command=FIND_KEY + f'echo "[found $(grep -rls "$k-key" {root} '
            f'| wc -l)]"; echo "[environ $({environ} | grep -c "$k-key")]"',
        ),
        call("finish", message="done"),
    )
    r = client.post(
        f"/api/v1/app-conversations/{cid}/send-message",
        json={"role": "user", "content": [{"type": "text", "text": "go"}], "run": True},
    )
    assert r.status_code == 200, r.text
    ended(client, cid)
    wait_for(lambda: '"tool_name": "finish"' in transcript(client, cid), 30, what="the events")

    # The model was called with the user's key, every time; the sandbox was never given it.
    assert [h.get("authorization") for h in llm.headers_for(key)] == [f"Bearer {KEY}"] * 2
    base_url, token = given_llm(client, sid)
    assert base_url.endswith(GATEWAY) and token_sandbox(token) == sid and KEY not in token
    record = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    info = httpx.get(
        f"{record['exposed_urls'][0]['url']}/api/conversations/{cid}",
        headers={"X-Session-API-Key": record["session_api_key"]},
        timeout=10,
    ).json()
    assert info["agent"]["llm"]["base_url"] == base_url
    told = transcript(client, cid)
    assert "[found 0]" in told and "[environ 0]" in told, told  # the agent found nothing
    assert files_holding(root, KEY.encode()) == []
    assert [p for p in root.rglob("meta.json") if token.encode() in p.read_bytes()]  # the token
    for pid in sandbox_processes(plane, sid):
        assert KEY.encode() not in Path(f"/proc/{pid}/environ").read_bytes(), pid

    # What went through is counted, per sandbox and day.
    report = wait_for(
        lambda: u if (u := usage(client))["today"]["requests"] >= 2 else None, 30, what="the usage"
    )
    assert report["today"]["prompt_tokens"] > 0 and report["today"]["completion_tokens"] > 0
    assert [(row["sandbox_id"], row["day"]) for row in report["rows"]] == [(sid, report["day"])]
    assert report["resets_at"].startswith(report["day"][:8]) or report["resets_at"] > report["day"]


def test_only_a_live_sandboxs_own_token_opens_the_gateway(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    plane = control_plane
    client = plane.client(plane.new_user("bob"))
    configure_llm(client, llm.base_url(key), grouping_strategy="NO_GROUPING")
    first, second = (start(client)["sandbox_id"] for _ in range(2))
    _, token = given_llm(client, first)
    _, other = given_llm(client, second)
    llm.script(key, text("through"))
    ok = chat(plane, token)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "through"

    mac = other.rsplit("_", 1)[1]
    refused = {
        "none": chat(plane, None),
        "wrong": chat(plane, "sbt_" + "0" * 32 + "_x"),
        "not a token": chat(plane, KEY),
        "another sandbox's MAC": chat(plane, f"sbt_{first}_{mac}"),
        "cut short": chat(plane, token[:-1]),
        "as x-api-key, wrong": chat(plane, None, headers={"x-api-key": token + "x"}),
    }
    assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 401)
    assert refused["wrong"].json()["error"]["code"] == "invalid_api_key"
    assert len(llm.requests_for(key)) == 1  # none of the refused reached the model
    # The other sandbox's own token works until the sandbox is deleted (and a moment after:
    # a token checked is used again for REUSE_SECONDS).
    llm.script(key, text("other"))
    assert chat(plane, other).status_code == 200
    r = client.delete(f"/api/v1/sandboxes/{second}", params={"sandbox_id": second})
    assert r.status_code == 200, r.text
    wait_for(lambda: chat(plane, other).status_code == 401, 10, what="the token refused")
    # A body past the bound is refused before anything is forwarded. (The polls above may
    # have been forwarded while the checked token was still in use: counted from here.)
    forwarded = len(llm.requests_for(key))
    big = chat(
        plane,
        token,
        content=b"x" * (MAX_BODY + 1),
        json=None,
        headers={"Content-Type": "application/json"},
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert len(llm.requests_for(key)) == forwarded

    # Where the control plane must not, or cannot, call: said in the provider's shape.
    patch = {"llm_base_url": "http://169.254.169.254/v1"}
    assert client.patch("/api/v1/settings", json=patch).status_code == 200
    r = wait_for(
        lambda: (a := chat(plane, token)).status_code == 403 and a,
        10,
        what="the new base URL in force",
    )
    assert "link-local" in r.json()["error"]["message"]
    patch = {"llm_base_url": None, "llm_model": "bedrock/anthropic.claude-v2"}
    assert client.patch("/api/v1/settings", json=patch).status_code == 200
    r = wait_for(
        lambda: (a := chat(plane, token)).status_code == 400 and a,
        10,
        what="the new model in force",
    )
    assert r.json()["error"]["code"] == "no_base_url"
    assert "set llm_base_url" in r.json()["error"]["message"]


def test_a_stream_passes_through_as_it_comes(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    plane = control_plane
    client = plane.client(plane.new_user("carol"))
    configure_llm(client, llm.base_url(key), tools=["terminal"], llm_stream=True)
    llm.script(key, call("terminal", command="echo streamed"), call("finish", message="done"))
    task = start(client, "go")
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    ended(client, cid)
    assert all(body.get("stream") is True for body in llm.requests_for(key))
    report = wait_for(
        lambda: u if (u := usage(client))["today"]["requests"] >= 2 else None, 30, what="the usage"
    )
    assert report["today"]["completion_tokens"] >= 20  # read from the streams' last chunks

    # Chunk by chunk, not gathered: the first words arrive while the model holds the rest.
    held = threading.Event()
    llm.script(key, Reply(text="first words, then the rest of it", hold=held, hold_after=8))
    _, token = given_llm(client, sid)
    body = {
        "model": "test-model",
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
        "stream_options": {"include_usage": True},
    }
    seen: list[str] = []
    with httpx.stream(
        "POST",
        plane.url + GATEWAY + "/chat/completions",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {token}"},
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                seen.append(choices[0]["delta"].get("content") or "" if choices else "")
            if not held.is_set() and "".join(seen).startswith("first wo"):
                held.set()  # seen while the model held the rest: nothing gathered it
    assert "".join(seen) == "first words, then the rest of it" and held.is_set()


def test_a_responses_api_model_goes_through_with_its_reasoning(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    """A GPT-5 model: the agent calls the Responses API through the gateway, which puts the
    user's key in, passes the reasoning item back and forth untouched and counts the usage."""
    plane = control_plane
    client = plane.client(plane.new_user("rhea"))
    configure_llm(client, llm.base_url(key), tools=["terminal"], llm_model="openai/gpt-5-mini")
    llm.script(
        key,
        Reply(
            text="Looking.",
            reasoning="First, list the files.",
            tool_calls=[("terminal", {"command": "echo listed"})],
        ),
        Reply(text="Done.", reasoning="Nothing more to do."),
    )
    task = start(client, "go")
    cid = task["app_conversation_id"]
    ended(client, cid)
    first, second = llm.requests_for(key)
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    [item] = [i for i in second["input"] if i.get("type") == "reasoning"]
    assert {k: item.get(k) for k in ("id", "summary", "encrypted_content")} == llm.reasoning_items[
        item["id"]
    ]
    assert [h.get("authorization") for h in llm.headers_for(key)] == [f"Bearer {KEY}"] * 2
    report = wait_for(
        lambda: u if (u := usage(client))["today"]["requests"] >= 2 else None, 30, what="the usage"
    )
    assert report["today"]["prompt_tokens"] > 0 and report["today"]["completion_tokens"] >= 20


def test_an_anthropic_model_is_called_with_its_own_header(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    plane = control_plane
    client = plane.client(plane.new_user("dave"))
    configure_llm(client, llm.anthropic_base_url(key), llm_model="anthropic/claude-sonnet-4-5")
    llm.script(key, call("finish", message="done"))
    task = start(client, "go")
    ended(client, task["app_conversation_id"])
    [headers] = llm.headers_for(key)
    assert headers["x-api-key"] == KEY and "authorization" not in headers
    assert headers.get("anthropic-version")
    report = wait_for(
        lambda: u if (u := usage(client))["today"]["requests"] else None, 30, what="the usage"
    )
    assert (report["today"]["prompt_tokens"], report["today"]["completion_tokens"]) == (100, 20)
    assert report["today"]["cost_usd"] > 0  # priced by litellm's map
    # A refusal in Anthropic's shape, to an Anthropic client.
    refused = chat(
        plane,
        None,
        "/v1/messages",
        headers={"x-api-key": "sbt_nope_x", "anthropic-version": "2023-06-01"},
    )
    assert refused.status_code == 401 and refused.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": refused.json()["error"]["message"]},
    }


def test_an_upstream_429_reaches_the_agent_which_waits_as_told(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    plane = control_plane
    client = plane.client(plane.new_user("erin"))
    configure_llm(client, llm.base_url(key))
    llm.script(key, error(429, "slow down", retry_after=2), call("finish", message="done"))
    task = start(client, "go")
    ended(client, task["app_conversation_id"])
    first, second = (arrived for arrived, _ in llm.timings[key])
    assert second - first >= 1.9  # its Retry-After, not the agent's own sub-second backoff
    # As the upstream said it: status, Retry-After, body.
    _, token = given_llm(client, task["sandbox_id"])
    llm.script(key, error(429, "later, please", retry_after=7))
    r = chat(plane, token)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"]["message"] == "later, please"


def test_a_spent_budget_ends_the_run_saying_so(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    plane = control_plane
    client = plane.client(plane.new_user("frank"))
    configure_llm(
        client, llm.base_url(key), llm_model="openai/gpt-4o-mini", llm_daily_budget_usd=0.000001
    )
    llm.script(key, text("all done"))  # one call: the agent finishes on a plain answer
    first = start(client, "go")
    ended(client, first["app_conversation_id"])
    spent = wait_for(
        lambda: u if (u := usage(client))["today"]["cost_usd"] > 0 else None,
        30,
        what="the first call's cost",
    )
    assert spent["daily_budget_usd"] == 0.000001 and spent["today"]["cost_usd"] > 0.000001

    llm.script(key, call("finish", message="never asked"))
    task = start(client, "again", sandbox_id=first["sandbox_id"])
    cid = task["app_conversation_id"]
    ended(client, cid, "error", timeout=30)  # at once: no retries until midnight
    told = wait_for(
        lambda: t if "budget" in (t := transcript(client, cid)) else None,
        30,
        what="the refusal in the transcript",
    )
    resets = spent["resets_at"].replace("+00:00", "Z")
    assert "daily LLM budget is spent" in told and "$0.000001 per day" in told, told
    assert "your setting" in told and f"resets at {resets}" in told, told
    assert len(llm.requests_for(key)) == 1  # the refused call never reached the model

    _, token = given_llm(client, task["sandbox_id"])
    r = chat(plane, token)
    assert r.status_code == 402 and r.json()["error"]["code"] == "daily_budget_exceeded"
    assert 0 < int(r.headers["retry-after"]) <= 86400
    anthropic = chat(plane, None, "/v1/messages", headers={"x-api-key": token})
    assert anthropic.status_code == 402 and anthropic.json()["error"]["type"] == "billing_error"


def test_the_rate_holds_the_agent_until_the_next_minute(
    tmp_path: Path, llm: ScriptedLLM, key: str
) -> None:
    clock = ShiftedClock()
    plane = ControlPlane(make_config(tmp_path / "cp"), clock).start()
    try:
        client = plane.client(plane.new_user("gina"))
        configure_llm(client, llm.base_url(key), llm_requests_per_minute=1)
        task = start(client, "go", run=False)
        cid, sid = task["app_conversation_id"], task["sandbox_id"]
        _, token = given_llm(client, sid)
        clock.offset += (48 - clock.time() % 60) % 60  # 12 s before a minute ends
        llm.script(key, text("one"))
        assert chat(plane, token).status_code == 200
        refused = chat(plane, token)
        assert refused.status_code == 429 and refused.json()["error"]["type"] == "requests"
        assert "1 requests per minute (your setting)" in refused.json()["error"]["message"]
        assert 1 <= int(refused.headers["retry-after"]) <= 13
        anthropic = chat(plane, token, "/v1/messages")
        assert anthropic.json()["error"]["type"] == "rate_limit_error"
        next_minute = time.monotonic() + 60 - clock.time() % 60

        llm.script(key, call("finish", message="done"))
        r = client.post(
            f"/api/v1/app-conversations/{cid}/send-message",
            json={"role": "user", "content": [{"type": "text", "text": "go"}], "run": True},
        )
        assert r.status_code == 200, r.text
        ended(client, cid)
        arrived = llm.timings[key][-1][0]
        assert arrived >= next_minute - 0.5  # the agent waited for the minute, then went on
    finally:
        plane.stop()


# -- the parts, alone ---------------------------------------------------------------------------


def test_paths_join_without_doubling() -> None:
    assert (
        join("https://api.openai.com/v1", "chat/completions", "")
        == "https://api.openai.com/v1/chat/completions"
    )
    assert (
        join("https://api.anthropic.com", "/v1/messages", "")
        == "https://api.anthropic.com/v1/messages"
    )
    assert (
        join("https://proxy.example/v1/messages", "/v1/messages", "beta=true")
        == "https://proxy.example/v1/messages?beta=true"
    )
    assert (
        join("https://x.example/openai/?api-version=1", "/chat/completions", "key=k")
        == "https://x.example/openai/chat/completions?api-version=1&key=k"
    )


def test_the_key_goes_where_the_token_was() -> None:
    for headers, query, place in (
        ({"authorization": "Bearer sbt_a_b"}, [], "authorization"),
        ({"x-api-key": "sbt_a_b"}, [], "x-api-key"),
        ({"api-key": "sbt_a_b"}, [], "api-key"),
        ({"x-goog-api-key": "sbt_a_b"}, [], "x-goog-api-key"),
        ({}, [("alt", "sse"), ("key", "sbt_a_b")], "key"),
    ):
        found = credentials.find(headers, query)
        assert found is not None and (found.place, found.token) == (place, "sbt_a_b")
        sent, asked = credentials.swapped(
            [*headers.items(), ("x-api-key", "sbt_a_b"), ("accept", "*/*")], query, found, "real"
        )
        expected = {"authorization": "Bearer real"}.get(place, "real")
        assert (dict(sent).get(place) or dict(asked).get(place)) == expected
        assert "sbt_a_b" not in json.dumps([sent, asked]) and ("accept", "*/*") in sent
    assert credentials.find({"authorization": "Basic eDp5"}, []) is None


def test_usage_is_read_from_answers_streamed_or_not() -> None:
    openai = Meter("text/event-stream")
    for chunk in (
        b'data: {"model":"gpt-4o-mini","choices":[{"delta":{"content":"hi"}}]}\n\ndata: ',
        b'{"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":11,',
        b'"completion_tokens":7}}\n\ndata: [DONE]\n\n',
    ):
        openai.feed(chunk)
    used = openai.finish()
    assert (used.prompt_tokens, used.completion_tokens, used.model) == (11, 7, "gpt-4o-mini")
    assert cost(used, None, "openai") > 0 and cost(used, "no-such-model", None) > 0

    anthropic = Meter("text/event-stream; charset=utf-8")
    for line in (
        'event: message_start\ndata: {"type":"message_start","message":{"model":'
        '"claude-sonnet-4-5","usage":{"input_tokens":5,"cache_read_input_tokens":20,'
        '"output_tokens":1}}}\n\n',
        'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":9}}',
    ):
        anthropic.feed(line.encode())
    used = anthropic.finish()
    assert (used.prompt_tokens, used.completion_tokens, used.cache_read_tokens) == (25, 9, 20)

    whole = Meter("application/json")
    whole.feed(b'{"model":"m","usage":{"input_tokens":3,"output_tokens":4}}')
    used = whole.finish()
    assert (used.prompt_tokens, used.completion_tokens) == (3, 4)
    assert cost(used, None, "openai") == 0.0  # a model litellm cannot price is free


def test_responses_api_usage_is_read_streamed_or_not() -> None:
    """OpenAI's Responses API: its usage in the response, or in the stream's last event."""
    usage = (
        '{"input_tokens":40,"output_tokens":9,"input_tokens_details":{"cached_tokens":32},'
        '"output_tokens_details":{"reasoning_tokens":5}}'
    )
    streamed = Meter("text/event-stream")
    for line in (
        'event: response.created\ndata: {"type":"response.created","response":'
        '{"model":"gpt-5-mini","usage":null}}\n\n',
        'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        '"delta":"hi"}\n\n',
        'event: response.completed\ndata: {"type":"response.completed","response":'
        f'{{"model":"gpt-5-mini","usage":{usage}}}}}\n\n',
    ):
        streamed.feed(line.encode())
    whole = Meter("application/json")
    whole.feed(f'{{"object":"response","model":"gpt-5-mini","usage":{usage}}}'.encode())
    for meter in (streamed, whole):
        used = meter.finish()
        assert (used.prompt_tokens, used.completion_tokens, used.cache_read_tokens, used.model) == (
            40,
            9,
            32,
            "gpt-5-mini",
        )
        assert cost(used, None, "openai") > 0


def test_a_user_may_only_lower_the_deployments_caps(tmp_path: Path) -> None:
    config = make_config(tmp_path, llm_daily_budget_usd=5.0, llm_requests_per_minute=60)
    lower = caps(config, UserSettings(llm_daily_budget_usd=1.0, llm_requests_per_minute=600))
    assert lower.budget_usd is not None and lower.budget_usd.value == 1.0
    assert lower.budget_usd.whose == "your setting"
    assert lower.per_minute is not None and lower.per_minute.value == 60
    assert lower.per_minute.whose == "the deployment's cap"
    none = caps(make_config(tmp_path), UserSettings())
    assert none.budget_usd is None and none.per_minute is None


def test_the_usage_route_bounds_its_days(control_plane: ControlPlane) -> None:
    client = control_plane.client(control_plane.new_user("hal"))
    for days in (0, 91, "x"):
        assert client.get("/api/v1/llm-usage", params={"days": days}).status_code == 422
    report = usage(client, days=90)
    assert (
        report["today"]
        == {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        and report["rows"] == []
    )
    assert control_plane.client(None).get("/api/v1/llm-usage").status_code == 401


def test_the_usage_route_bounds_its_rows_and_totals_every_one(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    from control_plane.api import gateway as route

    monkeypatch.setattr(route, "MAX_ROWS", 3)
    client = control_plane.client(control_plane.new_user("ida"))
    user_id = client.get("/api/v1/users/me").json()["id"]

    async def spend() -> str:
        db = Database(control_plane.config.db_url)
        try:
            today = db.now().strftime("%Y-%m-%d")
            for n in range(5):
                await store_usage.add(db, user_id, f"s{n}", today, prompt_tokens=10, cost_usd=0.5)
            return today
        finally:
            await db.close()

    today = asyncio.run(spend())
    report = usage(client)
    assert len(report["rows"]) == 3 and report["more"] is True
    assert {r["day"] for r in report["rows"]} == {today}
    assert report["today"] == {
        "requests": 5,
        "prompt_tokens": 50,
        "completion_tokens": 0,
        "cost_usd": 2.5,
    }


async def test_usage_adds_up_per_sandbox_and_day(database_url: str) -> None:
    db = Database(database_url)
    await db.migrate()
    try:
        user = await accounts.get_or_create_user(db, "ivy")
        for sandbox, day, cost_usd in (
            ("sa", "2026-01-01", 0.5),
            ("sa", "2026-01-02", 0.25),
            ("sa", "2026-01-02", 0.25),
            ("sb", "2026-01-02", 1.0),
        ):
            await store_usage.add(
                db, user.id, sandbox, day, prompt_tokens=10, completion_tokens=2, cost_usd=cost_usd
            )
        assert await store_usage.spent(db, user.id, "2026-01-02") == 1.5
        assert await store_usage.spent(db, user.id, "2026-01-03") == 0.0
        rows = await store_usage.since(db, user.id, "2026-01-02")
        assert [(r.sandbox_id, r.day, r.requests, r.prompt_tokens, r.cost_usd) for r in rows] == [
            ("sa", "2026-01-02", 2, 20, 0.5),
            ("sb", "2026-01-02", 1, 10, 1.0),
        ]
        await asyncio.gather(*(store_usage.add(db, user.id, "sc", "2026-01-02") for _ in range(20)))
        assert [
            r.requests
            for r in await store_usage.since(db, user.id, "2026-01-02")
            if r.sandbox_id == "sc"
        ] == [20]
    finally:
        await db.close()
