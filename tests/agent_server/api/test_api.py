"""The conversation and event endpoints (SPEC 2.6, 4.4, 7) against the real server.

Every check is what a client sees over HTTP, plus, where the claim is about storage (the
search returns exactly what is stored), the files of the server's state directory.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import agent_spec, create
from tests.support.llm import ScriptedLLM, call
from tests.support.server import KEY, ServerProcess
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

MASK = "**********"
C = "/api/conversations"


def events(client: httpx.Client, conv_id: str, **params: Any) -> dict[str, Any]:
    r = client.get(f"{C}/{conv_id}/events/search", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def all_pages(client: httpx.Client, url: str, **params: Any) -> list[dict[str, Any]]:
    """Follow next_page_id to the end; fails on a loop."""
    items: list[dict[str, Any]] = []
    page_id = None
    for _ in range(1000):
        query = {**params, **({"page_id": page_id} if page_id else {})}
        r = client.get(url, params=query)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["items"]) <= params.get("limit", 100)
        items += page["items"]
        page_id = page["next_page_id"]
        if page_id is None:
            return items
    raise AssertionError("paging never ended")


def tool_titles(client: httpx.Client, conv_id: str) -> list[str]:
    page = events(client, conv_id, kind__eq="SystemPromptEvent", limit=1)
    assert len(page["items"]) == 1
    return [t["title"] for t in page["items"][0]["tools"]]


def message(text: str, run: bool = False) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "run": run}


def aware(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp)
    assert moment.tzinfo is not None and moment.utcoffset() == timedelta(0), stamp
    return moment


@pytest.fixture(scope="module")
def conv(
    server: ServerProcess, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """A conversation with a few user messages, shared by the read-only tests."""
    with server.client() as c:
        made = create(c, llm, "api-shared", tmp_path_factory.mktemp("shared"))
        for text in ("one", "two", "three"):
            r = c.post(f"{C}/{made['id']}/events", json=message(text))
            assert r.status_code == 200, r.text
    return made


# -- creating and reading conversations ---------------------------------------------------


def test_create_answers_201_with_the_conversation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    secret = f"sk-real-{uuid.uuid4().hex}"
    workspace = tmp_path / "not" / "yet" / "there"
    r = client.post(
        C,
        json={
            "agent": agent_spec(llm, key, api_key=secret),
            "workspace": {"working_dir": str(workspace)},
            "title": "my task",
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert str(uuid.UUID(body["id"])) == body["id"]
    assert body["execution_status"] == "idle"
    assert body["title"] == "my task"
    assert body["agent"]["llm"]["api_key"] == MASK
    assert body["agent"]["llm"]["model"] == "openai/test-model"
    assert body["agent"]["llm"]["base_url"] == llm.base_url(key)
    assert body["workspace"]["working_dir"] == str(workspace)
    assert isinstance(body["metrics"], dict) and body["metrics"]["accumulated_cost"] == 0
    assert aware(body["created_at"]) <= aware(body["updated_at"])
    assert workspace.is_dir()
    # The key is nowhere a client can read it.
    for url in (
        f"{C}/{body['id']}",
        f"{C}?ids={body['id']}",
        f"{C}/search",
        f"{C}/{body['id']}/events/search",
    ):
        answer = client.get(url)
        assert answer.status_code == 200 and secret not in answer.text, url
    assert secret not in r.text


def test_create_with_the_same_conversation_id_returns_the_existing_one(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv_id = str(uuid.uuid4())
    first = create(client, llm, key, tmp_path, conversation_id=conv_id, title="first")
    assert first["id"] == conv_id
    r = client.post(
        C,
        json={
            "agent": agent_spec(llm, key),
            "conversation_id": conv_id,
            "workspace": {"working_dir": str(tmp_path / "other")},
            "title": "second",
        },
    )
    assert r.status_code == 200, r.text
    assert r.json() == first
    assert not (tmp_path / "other").exists()
    assert client.get(f"{C}/{conv_id}").json() == first
    assert len(events(client, conv_id)["items"]) == 1  # one SystemPromptEvent, not two


def test_get_and_batch_get(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    a = create(client, llm, key, tmp_path / "a")
    b = create(client, llm, key, tmp_path / "b")
    assert client.get(f"{C}/{a['id']}").json() == a
    unknown = str(uuid.uuid4())
    r = client.get(C, params=[("ids", b["id"]), ("ids", unknown), ("ids", a["id"])])
    assert r.status_code == 200
    assert r.json() == [b, None, a]


def test_search_pages_cover_everything_once(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    mine = {create(client, llm, key, tmp_path / str(i))["id"] for i in range(5)}
    total = client.get(f"{C}/count").json()
    assert isinstance(total, int) and total >= 5
    paged = all_pages(client, f"{C}/search", limit=2)
    ids = [c["id"] for c in paged]
    assert len(ids) == len(set(ids)) == total
    assert mine <= set(ids)
    newest_first = [aware(c["created_at"]) for c in paged]
    assert newest_first == sorted(newest_first, reverse=True)
    # One big page holds the same conversations in the same order.
    assert [
        c["id"] for c in client.get(f"{C}/search", params={"limit": 100}).json()["items"]
    ] == ids[:100]
    oldest_first = all_pages(client, f"{C}/search", limit=3, sort_order="CREATED_AT")
    assert [c["id"] for c in oldest_first] == ids[::-1]


def test_search_and_count_filter_by_status(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, call("finish", message="done"))
    done = create(client, llm, key, tmp_path / "done")
    assert client.post(f"{C}/{done['id']}/run").status_code == 200
    wait_for(
        lambda: client.get(f"{C}/{done['id']}").json()["execution_status"] == "finished",
        what="the run to finish",
    )
    idle = create(client, llm, key, tmp_path / "idle")
    for status, member, outsider in (("finished", done, idle), ("idle", idle, done)):
        found = all_pages(client, f"{C}/search", limit=100, status=status)
        assert all(c["execution_status"] == status for c in found)
        assert member["id"] in {c["id"] for c in found}
        assert outsider["id"] not in {c["id"] for c in found}
        assert client.get(f"{C}/count", params={"status": status}).json() == len(found)


def test_delete_removes_the_conversation_but_not_its_workspace(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    made = create(client, llm, key, tmp_path)
    (tmp_path / "work.txt").write_text("keep me")
    count = client.get(f"{C}/count").json()
    r = client.delete(f"{C}/{made['id']}")
    assert r.status_code == 200 and r.json() == {"success": True}
    for url in (
        f"{C}/{made['id']}",
        f"{C}/{made['id']}/events/search",
        f"{C}/{made['id']}/events/count",
    ):
        gone = client.get(url)
        assert gone.status_code == 404 and isinstance(gone.json()["detail"], str), url
    assert client.get(C, params={"ids": made["id"]}).json() == [None]
    assert client.get(f"{C}/count").json() == count - 1
    assert made["id"] not in {c["id"] for c in all_pages(client, f"{C}/search")}
    assert client.delete(f"{C}/{made['id']}").status_code == 404
    assert (tmp_path / "work.txt").read_text() == "keep me"
    assert not (server.state_dir / "conversations" / uuid.UUID(made["id"]).hex).exists()


def test_run_finishes_and_a_second_run_while_running_is_harmless(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    slow_finish = call("finish", message="all done")
    slow_finish.delay = 1.5
    llm.script(key, slow_finish)
    made = create(client, llm, key, tmp_path, message="do it")
    url = f"{C}/{made['id']}"
    first = client.post(url + "/run")
    assert first.status_code == 200 and first.json() == {"success": True}
    assert client.get(url).json()["execution_status"] == "running"
    second = client.post(url + "/run")
    assert second.status_code == 200
    assert client.get(url).json()["execution_status"] == "running"
    wait_for(lambda: client.get(url).json()["execution_status"] == "finished", what="finished")
    assert len(llm.requests_for(key)) == 1  # the second run did not start a second loop
    actions = events(client, made["id"], kind__eq="ActionEvent")["items"]
    assert [a["tool_name"] for a in actions] == ["finish"]
    assert client.get(url).json()["metrics"]["accumulated_token_usage"]["prompt_tokens"] > 0


def test_delete_stops_a_running_conversation(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    slow = call("finish", message="too late")
    slow.delay = 20
    llm.script(key, slow)
    made = create(client, llm, key, tmp_path, message="take your time", run=True)
    assert client.get(f"{C}/{made['id']}").json()["execution_status"] == "running"
    started = time.monotonic()
    r = client.delete(f"{C}/{made['id']}")
    assert r.status_code == 200 and time.monotonic() - started < 10
    assert client.get(f"{C}/{made['id']}").status_code == 404
    assert not (server.state_dir / "conversations" / uuid.UUID(made["id"]).hex).exists()
    assert tmp_path.is_dir()


def test_concurrent_creates_with_one_conversation_id_make_one_conversation(
    server: ServerProcess, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv_id = str(uuid.uuid4())
    body = {
        "agent": agent_spec(llm, key),
        "conversation_id": conv_id,
        "workspace": {"working_dir": str(tmp_path)},
    }

    def post(_: int) -> tuple[int, str]:
        with server.client() as c:
            r = c.post(C, json=body)
            return r.status_code, r.json()["id"]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, range(4)))
    assert sorted(status for status, _ in answers) == [200, 200, 200, 201]
    assert {made for _, made in answers} == {conv_id}
    with server.client() as c:
        assert (
            c.get(f"{C}/{conv_id}/events/count", params={"kind__eq": "SystemPromptEvent"}).json()
            == 1
        )


# -- SPEC 2.6: which tools the agent gets ----------------------------------------------------


def test_an_agent_without_tools_has_only_finish_and_think(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    made = create(client, llm, key, tmp_path)
    assert sorted(tool_titles(client, made["id"])) == ["finish", "think"]


def test_tools_given_inline_are_added_to_finish_and_think(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    made = create(client, llm, key, tmp_path, tools=["file_editor"])
    assert sorted(tool_titles(client, made["id"])) == ["file_editor", "finish", "think"]
    assert made["agent"]["tools"] == [{"name": "file_editor", "params": {}}]


@pytest.fixture
def settings_with_tools(client: httpx.Client, llm: ScriptedLLM, key: str) -> Iterator[str]:
    secret = f"sk-settings-{uuid.uuid4().hex}"
    r = client.patch(
        "/api/settings",
        json={
            "agent": {
                "llm": {
                    "model": "openai/settings-model",
                    "base_url": llm.base_url(key),
                    "api_key": secret,
                },
                "tools": [{"name": "task_tracker"}],
            }
        },
    )
    assert r.status_code == 200, r.text
    yield secret
    r = client.patch("/api/settings", json={"agent": {"llm": None, "tools": []}})
    assert r.status_code == 200, r.text


def test_inline_agent_without_tools_drops_the_tools_of_the_settings(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, settings_with_tools: str
) -> None:
    made = create(client, llm, key, tmp_path)
    assert sorted(tool_titles(client, made["id"])) == ["finish", "think"]
    assert made["agent"]["tools"] == []
    assert made["agent"]["llm"]["model"] == "openai/test-model"


def test_a_request_without_agent_uses_the_settings_agent_with_its_tools(
    client: httpx.Client, tmp_path: Path, settings_with_tools: str
) -> None:
    r = client.post(C, json={"workspace": {"working_dir": str(tmp_path)}})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["agent"]["llm"]["model"] == "openai/settings-model"
    assert made["agent"]["llm"]["api_key"] == MASK
    assert settings_with_tools not in r.text
    assert sorted(tool_titles(client, made["id"])) == ["finish", "task_tracker", "think"]


def test_a_request_without_workspace_gets_the_default_one(
    client: httpx.Client, llm: ScriptedLLM, key: str, server: ServerProcess
) -> None:
    r = client.post(C, json={"agent": agent_spec(llm, key)})
    assert r.status_code == 201, r.text
    working_dir = Path(r.json()["workspace"]["working_dir"])
    assert working_dir.is_absolute() and working_dir.is_dir()


# -- events ----------------------------------------------------------------------------------


def test_a_user_message_is_a_message_event(client: httpx.Client, conv: dict[str, Any]) -> None:
    r = client.post(f"{C}/{conv['id']}/events", json=message("hi"))
    assert r.status_code == 200, r.text
    sent = r.json()
    assert sent["kind"] == "MessageEvent" and sent["source"] == "user"
    assert sent["llm_message"]["role"] == "user"
    assert sent["llm_message"]["content"][0]["text"] == "hi"
    assert client.get(f"{C}/{conv['id']}/events/{sent['id']}").json() == sent
    last = events(client, conv["id"], sort_order="TIMESTAMP_DESC", limit=1)["items"][0]
    assert last == sent
    assert client.get(f"{C}/{conv['id']}").json()["execution_status"] == "idle"  # run: false


def test_search_returns_exactly_the_stored_events(
    client: httpx.Client, conv: dict[str, Any], server: ServerProcess
) -> None:
    items = events(client, conv["id"], limit=1000)["items"]
    stored = server.state_dir / "conversations" / uuid.UUID(conv["id"]).hex / "events.jsonl"
    assert items == [json.loads(line) for line in stored.read_text().splitlines()]
    ids = [e["id"] for e in items]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    stamps = [aware(e["timestamp"]) for e in items]
    assert stamps == sorted(stamps)
    assert items[0]["kind"] == "SystemPromptEvent"
    texts = [e["llm_message"]["content"][0]["text"] for e in items if e["kind"] == "MessageEvent"]
    assert texts[:3] == ["one", "two", "three"]


def test_search_filters_by_kind_and_source(client: httpx.Client, conv: dict[str, Any]) -> None:
    everything = events(client, conv["id"], limit=1000)["items"]
    for params, keep in (
        ({"kind__eq": "MessageEvent"}, lambda e: e["kind"] == "MessageEvent"),
        ({"kind__eq": "SystemPromptEvent"}, lambda e: e["kind"] == "SystemPromptEvent"),
        ({"kind__eq": "PauseEvent"}, lambda e: e["kind"] == "PauseEvent"),
        ({"source__eq": "user"}, lambda e: e["source"] == "user"),
        ({"source__eq": "agent"}, lambda e: e["source"] == "agent"),
        (
            {"kind__eq": "MessageEvent", "source__eq": "agent"},
            lambda e: e["kind"] == "MessageEvent" and e["source"] == "agent",
        ),
    ):
        expected = [e for e in everything if keep(e)]
        assert events(client, conv["id"], limit=1000, **params)["items"] == expected, params
        r = client.get(f"{C}/{conv['id']}/events/count", params=params)
        assert r.status_code == 200 and r.json() == len(expected), params
    assert client.get(f"{C}/{conv['id']}/events/count").json() == len(everything)


def test_search_filters_messages_by_their_text(client: httpx.Client, conv: dict[str, Any]) -> None:
    """OpenHands' `body` filter (the web frontend and the API skill client search with it)."""
    url = f"{C}/{conv['id']}/events/search"
    everything = events(client, conv["id"], limit=1000)["items"]
    client.post(f"{C}/{conv['id']}/events", json=message("Please fix the Parser bug"))
    fixed = events(client, conv["id"], body="PARSER BUG")["items"]
    assert [e["llm_message"]["content"][0]["text"] for e in fixed] == ["Please fix the Parser bug"]
    assert events(client, conv["id"], body="t")["items"] == [
        e
        for e in [*everything, *fixed]
        if e["kind"] == "MessageEvent" and "t" in e["llm_message"]["content"][0]["text"]
    ]  # two, three; not one
    assert (
        all_pages(client, url, limit=1, body="o") == events(client, conv["id"], body="o")["items"]
    )
    assert client.get(f"{C}/{conv['id']}/events/count", params={"body": "parser"}).json() == 1
    assert events(client, conv["id"], body="parser", kind__eq="ActionEvent")["items"] == []
    assert events(client, conv["id"], body="nowhere at all")["items"] == []
    r = client.get(url, params={"body": ""})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "body"]


def test_search_sorts_and_pages(client: httpx.Client, conv: dict[str, Any]) -> None:
    url = f"{C}/{conv['id']}/events/search"
    everything = events(client, conv["id"], limit=1000)["items"]
    assert len(everything) >= 4
    descending = events(client, conv["id"], sort_order="TIMESTAMP_DESC", limit=1000)["items"]
    assert descending == everything[::-1]
    for limit in (1, 2, 3):
        assert all_pages(client, url, limit=limit) == everything
        assert all_pages(client, url, limit=limit, sort_order="TIMESTAMP_DESC") == descending
    first = events(client, conv["id"], limit=2)
    assert first["items"] == everything[:2] and first["next_page_id"] == everything[2]["id"]
    assert events(client, conv["id"], limit=len(everything))["next_page_id"] is None
    messages = all_pages(client, url, limit=1, kind__eq="MessageEvent", sort_order="TIMESTAMP_DESC")
    assert messages == [e for e in descending if e["kind"] == "MessageEvent"]


def test_search_by_time(client: httpx.Client, conv: dict[str, Any]) -> None:
    everything = events(client, conv["id"], limit=1000)["items"]
    for pivot in everything[1:3]:
        moment = aware(pivot["timestamp"])
        later = events(client, conv["id"], timestamp__gte=pivot["timestamp"])["items"]
        earlier = events(client, conv["id"], timestamp__lt=pivot["timestamp"])["items"]
        assert later == [e for e in everything if aware(e["timestamp"]) >= moment]
        assert earlier == [e for e in everything if aware(e["timestamp"]) < moment]
        assert pivot in later and pivot not in earlier
        # The same instant written with Z or another offset means the same thing.
        zulu = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert events(client, conv["id"], timestamp__gte=zulu)["items"] == later
        shifted = moment.astimezone(datetime.fromisoformat("2000-01-01T00:00:00+05:30").tzinfo)
        assert events(client, conv["id"], timestamp__gte=shifted.isoformat())["items"] == later
    window = events(
        client,
        conv["id"],
        timestamp__gte=everything[1]["timestamp"],
        timestamp__lt=everything[3]["timestamp"],
    )["items"]
    assert window == [
        e
        for e in everything
        if aware(everything[1]["timestamp"])
        <= aware(e["timestamp"])
        < aware(everything[3]["timestamp"])
    ]
    pivot = everything[1]["timestamp"]
    count = client.get(f"{C}/{conv['id']}/events/count", params={"timestamp__gte": pivot}).json()
    assert count == len([e for e in everything if aware(e["timestamp"]) >= aware(pivot)])


def test_get_one_event(client: httpx.Client, conv: dict[str, Any]) -> None:
    for event in events(client, conv["id"])["items"]:
        r = client.get(f"{C}/{conv['id']}/events/{event['id']}")
        assert r.status_code == 200 and r.json() == event


# -- 404 -------------------------------------------------------------------------------------

UNKNOWN = "9f0c2a4e-1b7d-4c55-8a3e-2d6f1e0b7c91"
NOT_FOUND = [
    ("GET", f"{C}/{UNKNOWN}", None),
    ("DELETE", f"{C}/{UNKNOWN}", None),
    ("POST", f"{C}/{UNKNOWN}/run", None),
    ("POST", f"{C}/{UNKNOWN}/pause", None),
    ("POST", f"{C}/{UNKNOWN}/interrupt", None),
    ("POST", f"{C}/{UNKNOWN}/events", message("hello?")),
    ("GET", f"{C}/{UNKNOWN}/events/search", None),
    ("GET", f"{C}/{UNKNOWN}/events/count", None),
    ("GET", f"{C}/{UNKNOWN}/events/01KAAAAAAAAAAAAAAAAAAAAAAA", None),
]


@pytest.mark.parametrize(
    ("method", "url", "body"), NOT_FOUND, ids=[f"{m} {u}" for m, u, _ in NOT_FOUND]
)
def test_unknown_conversation_is_404(
    client: httpx.Client, method: str, url: str, body: Any
) -> None:
    r = client.request(method, url, json=body)
    assert r.status_code == 404, r.text
    assert set(r.json()) == {"detail"} and UNKNOWN in r.json()["detail"]


@pytest.mark.parametrize("event_id", ["01KAAAAAAAAAAAAAAAAAAAAAAA", "not-an-event", "0" * 26])
def test_unknown_event_is_404(client: httpx.Client, conv: dict[str, Any], event_id: str) -> None:
    r = client.get(f"{C}/{conv['id']}/events/{event_id}")
    assert r.status_code == 404, r.text
    assert isinstance(r.json()["detail"], str)


@pytest.mark.parametrize(
    ("method", "url", "status"),
    [
        ("GET", "/api/nope", 404),
        ("GET", "/nope", 404),
        ("PUT", "/api/settings", 405),
        ("POST", f"{C}/count", 405),
        ("POST", "/health", 405),
    ],
)
def test_unknown_routes_and_methods_answer_a_json_detail(
    client: httpx.Client, method: str, url: str, status: int
) -> None:
    r = client.request(method, url)
    assert r.status_code == status
    assert r.headers["content-type"].startswith("application/json")
    assert isinstance(r.json()["detail"], str)


def test_an_oversized_body_is_413(client: httpx.Client) -> None:
    before = client.get(f"{C}/count").json()
    r = client.post(
        C,
        content=b'{"title": "' + b"x" * (9 * 1024 * 1024) + b'"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and isinstance(r.json()["detail"], str)
    assert client.get(f"{C}/count").json() == before


# -- 422: SPEC 7's HTTPValidationError, and nothing changes ----------------------------------


def assert_validation_error(r: httpx.Response, loc: list[Any]) -> list[dict[str, Any]]:
    """The SPEC 7 shape, with an error at `loc` (a prefix of its location)."""
    assert r.status_code == 422, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"detail"}
    assert isinstance(body["detail"], list) and body["detail"]
    for item in body["detail"]:
        assert {"loc", "msg", "type"} <= set(item) <= {"loc", "msg", "type", "input", "ctx"}
        assert isinstance(item["loc"], list) and item["loc"]
        assert all(isinstance(p, (str, int)) for p in item["loc"])
        assert item["loc"][0] in ("body", "query", "path")
        assert isinstance(item["msg"], str) and item["msg"]
        assert isinstance(item["type"], str) and item["type"]
        if "ctx" in item:
            assert item["ctx"] is None or isinstance(item["ctx"], dict)
    assert any(item["loc"][: len(loc)] == loc for item in body["detail"]), body
    return body["detail"]


def _conv_body(tmp: str = "/tmp/agent-server-test-422", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "agent": {
            "llm": {"model": "openai/m", "api_key": "sk-x", "base_url": "http://127.0.0.1:9/v1"}
        },
        "workspace": {"working_dir": tmp},
    }
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = body
        for p in parents:
            node = node[p]
        node[last] = value
    return body


#: (id, method, url ({cid} is the shared conversation), request keywords, expected loc)
INVALID: list[tuple[str, str, str, dict[str, Any], list[Any]]] = [
    ("malformed json", "POST", C, {"content": b'{"agent": '}, ["body"]),
    ("body is a list", "POST", C, {"json": []}, ["body"]),
    ("body is a number", "POST", C, {"json": 3}, ["body"]),
    ("body is a string", "POST", C, {"json": "agent"}, ["body"]),
    ("body is not utf-8", "POST", C, {"content": b'{"title": "\xff"}'}, ["body"]),
    ("agent is a string", "POST", C, {"json": _conv_body(agent="x")}, ["body", "agent"]),
    ("llm missing", "POST", C, {"json": {"agent": {"tools": []}}}, ["body", "agent", "llm"]),
    (
        "model is a number",
        "POST",
        C,
        {"json": _conv_body(**{"agent.llm.model": 5})},
        ["body", "agent", "llm", "model"],
    ),
    (
        "temperature too high",
        "POST",
        C,
        {"json": _conv_body(**{"agent.llm.temperature": 5})},
        ["body", "agent", "llm", "temperature"],
    ),
    (
        "tools is a string",
        "POST",
        C,
        {"json": _conv_body(**{"agent.tools": "file_editor"})},
        ["body", "agent", "tools"],
    ),
    (
        "tool without name",
        "POST",
        C,
        {"json": _conv_body(**{"agent.tools": [{}]})},
        ["body", "agent", "tools", 0, "name"],
    ),
    (
        "unknown tool",
        "POST",
        C,
        {"json": _conv_body(**{"agent.tools": [{"name": "file_editor"}, {"name": "teleporter"}]})},
        ["body", "agent", "tools", 1, "name"],
    ),
    (
        "relative working_dir",
        "POST",
        C,
        {"json": _conv_body(tmp="relative/dir")},
        ["body", "workspace", "working_dir"],
    ),
    (
        "working_dir is a file",
        "POST",
        C,
        {"json": _conv_body(tmp="/etc/passwd")},
        ["body", "workspace", "working_dir"],
    ),
    (
        "bad conversation_id",
        "POST",
        C,
        {"json": _conv_body(conversation_id="conv-1")},
        ["body", "conversation_id"],
    ),
    (
        "max_iterations 0",
        "POST",
        C,
        {"json": _conv_body(max_iterations=0)},
        ["body", "max_iterations"],
    ),
    (
        "empty initial message",
        "POST",
        C,
        {"json": _conv_body(initial_message={"content": []})},
        ["body", "initial_message", "content"],
    ),
    (
        "message from assistant",
        "POST",
        C + "/{cid}/events",
        {"json": {"role": "assistant", "content": [{"type": "text", "text": "x"}]}},
        ["body", "role"],
    ),
    (
        "message content a string",
        "POST",
        C + "/{cid}/events",
        {"json": {"content": "hi"}},
        ["body", "content"],
    ),
    (
        "message run not a bool",
        "POST",
        C + "/{cid}/events",
        {"json": {**message("x"), "run": "maybe"}},
        ["body", "run"],
    ),
    ("message malformed json", "POST", C + "/{cid}/events", {"content": b"{"}, ["body"]),
    ("message body empty", "POST", C + "/{cid}/events", {"content": b""}, ["body"]),
    ("path id not a uuid: get", "GET", C + "/not-a-uuid", {}, ["path", "conversation_id"]),
    ("path id not a uuid: delete", "DELETE", C + "/not-a-uuid", {}, ["path", "conversation_id"]),
    ("path id not a uuid: run", "POST", C + "/12345/run", {}, ["path", "conversation_id"]),
    ("path id not a uuid: pause", "POST", C + "/x/pause", {}, ["path", "conversation_id"]),
    ("path id not a uuid: interrupt", "POST", C + "/x/interrupt", {}, ["path", "conversation_id"]),
    (
        "path id not a uuid: send",
        "POST",
        C + "/x/events",
        {"json": message("x")},
        ["path", "conversation_id"],
    ),
    ("path id not a uuid: search", "GET", C + "/x/events/search", {}, ["path", "conversation_id"]),
    ("path id not a uuid: count", "GET", C + "/x/events/count", {}, ["path", "conversation_id"]),
    (
        "path id not a uuid: event",
        "GET",
        C + "/x/events/01KAAAAAAAAAAAAAAAAAAAAAAA",
        {},
        ["path", "conversation_id"],
    ),
    (
        "unknown kind",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"kind__eq": "Gossip"}},
        ["query", "kind__eq"],
    ),
    (
        "unknown source",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"source__eq": "robot"}},
        ["query", "source__eq"],
    ),
    ("limit 0", "GET", C + "/{cid}/events/search", {"params": {"limit": 0}}, ["query", "limit"]),
    (
        "limit 1001",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"limit": 1001}},
        ["query", "limit"],
    ),
    (
        "limit abc",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"limit": "abc"}},
        ["query", "limit"],
    ),
    ("limit -1", "GET", C + "/{cid}/events/search", {"params": {"limit": -1}}, ["query", "limit"]),
    (
        "bad page_id",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"page_id": "page-2"}},
        ["query", "page_id"],
    ),
    (
        "naive timestamp__gte",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"timestamp__gte": "2026-01-31T12:00:00"}},
        ["query", "timestamp__gte"],
    ),
    (
        "garbage timestamp__lt",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"timestamp__lt": "yesterday"}},
        ["query", "timestamp__lt"],
    ),
    (
        "bad sort_order",
        "GET",
        C + "/{cid}/events/search",
        {"params": {"sort_order": "SIDEWAYS"}},
        ["query", "sort_order"],
    ),
    (
        "count: unknown kind",
        "GET",
        C + "/{cid}/events/count",
        {"params": {"kind__eq": "Gossip"}},
        ["query", "kind__eq"],
    ),
    (
        "count: naive timestamp",
        "GET",
        C + "/{cid}/events/count",
        {"params": {"timestamp__lt": "2026-01-31T12:00:00"}},
        ["query", "timestamp__lt"],
    ),
    ("conversations: limit 0", "GET", C + "/search", {"params": {"limit": 0}}, ["query", "limit"]),
    (
        "conversations: limit abc",
        "GET",
        C + "/search",
        {"params": {"limit": "abc"}},
        ["query", "limit"],
    ),
    (
        "conversations: bad status",
        "GET",
        C + "/search",
        {"params": {"status": "sleeping"}},
        ["query", "status"],
    ),
    (
        "conversations: bad sort",
        "GET",
        C + "/search",
        {"params": {"sort_order": "RANDOM"}},
        ["query", "sort_order"],
    ),
    (
        "count: bad status",
        "GET",
        C + "/count",
        {"params": {"status": "sleeping"}},
        ["query", "status"],
    ),
    ("batch: no ids", "GET", C, {}, ["query", "ids"]),
    ("batch: bad id", "GET", C, {"params": {"ids": "zz"}}, ["query", "ids"]),
    ("settings: malformed json", "PATCH", "/api/settings", {"content": b"{"}, ["body"]),
    ("settings: body a list", "PATCH", "/api/settings", {"json": [1]}, ["body"]),
    (
        "settings: temperature 5",
        "PATCH",
        "/api/settings",
        {"json": {"agent": {"llm": {"model": "m", "temperature": 5}}}},
        ["body", "agent", "llm", "temperature"],
    ),
    (
        "settings: tools a dict",
        "PATCH",
        "/api/settings",
        {"json": {"agent": {"tools": {}}}},
        ["body", "agent", "tools"],
    ),
]


def _snapshot(client: httpx.Client, conv_id: str) -> tuple[Any, ...]:
    return (
        client.get(f"{C}/count").json(),
        client.get(f"{C}/{conv_id}/events/count").json(),
        client.get(f"{C}/{conv_id}").json(),
        client.get("/api/settings").json(),
    )


@pytest.mark.parametrize(
    ("method", "url", "request_kw", "loc"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_input_is_422_and_changes_nothing(
    client: httpx.Client,
    conv: dict[str, Any],
    method: str,
    url: str,
    request_kw: dict[str, Any],
    loc: list[Any],
) -> None:
    before = _snapshot(client, conv["id"])
    headers = {"content-type": "application/json"} if "content" in request_kw else {}
    r = client.request(method, url.format(cid=conv["id"]), headers=headers, **request_kw)
    assert_validation_error(r, loc)
    assert _snapshot(client, conv["id"]) == before


def test_unknown_tool_422_names_the_known_tools(client: httpx.Client) -> None:
    r = client.post(C, json=_conv_body(**{"agent.tools": [{"name": "teleporter"}]}))
    (item,) = assert_validation_error(r, ["body", "agent", "tools", 0, "name"])
    assert "teleporter" in item["msg"]
    assert "file_editor" in item["msg"] and "task_tracker" in item["msg"]


def test_validation_errors_carry_input_and_ctx(client: httpx.Client, conv: dict[str, Any]) -> None:
    r = client.get(f"{C}/{conv['id']}/events/search", params={"limit": 1001})
    (item,) = assert_validation_error(r, ["query", "limit"])
    assert item["input"] == "1001" and item["ctx"] == {"le": 1000}


def test_a_validation_error_never_echoes_the_api_key(client: httpx.Client) -> None:
    secret = f"sk-echo-{uuid.uuid4().hex}"
    body = _conv_body(**{"agent.llm.api_key": secret, "agent.llm.temperature": 9})
    r = client.post(C, json=body)
    assert_validation_error(r, ["body", "agent", "llm", "temperature"])
    assert secret not in r.text
    r = client.post(C, json=_conv_body(**{"agent.llm.api_key": secret, "agent.tools": "x"}))
    assert r.status_code == 422 and secret not in r.text
    r = client.post(C, json={"agent": {"llm": {"api_key": secret}}})  # the input is the llm object
    assert_validation_error(r, ["body", "agent", "llm", "model"])
    assert secret not in r.text
    r = client.patch("/api/settings", json={"agent": {"llm": {"api_key": secret}}})
    assert_validation_error(r, ["body", "agent", "llm", "model"])
    assert secret not in r.text


def test_unknown_fields_are_tolerated(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, conv: dict[str, Any]
) -> None:
    body = {
        "agent": {**agent_spec(llm, key), "condenser": {"kind": "NoOpCondenser"}, "mcp_config": {}},
        "workspace": {"working_dir": str(tmp_path), "kind": "LocalWorkspace", "shared": True},
        "confirmation_policy": {"kind": "NeverConfirm"},
        "frobnicate": 1,
    }
    body["agent"]["llm"]["drop_params"] = True
    r = client.post(C, json=body)
    assert r.status_code == 201, r.text
    assert "frobnicate" not in r.text
    r = client.get(f"{C}/{conv['id']}/events/search", params={"limit": 2, "foo": "bar"})
    assert r.status_code == 200 and len(r.json()["items"]) == 2
    r = client.post(f"{C}/{conv['id']}/events", json={**message("extra"), "priority": "high"})
    assert r.status_code == 200, r.text


# -- odd JSON (on a server of its own: a 500 would spoil the log check below) ----------

NASTY_BODIES = [
    pytest.param(
        "POST", C, b'{"agent": {"llm": {"model": "m"}}, "max_iterations": NaN}', id="create NaN"
    ),
    pytest.param(
        "POST", C, b'{"agent": {"llm": {"model": "m"}}, "max_iterations": 1e400}', id="create 1e400"
    ),
    pytest.param(
        "POST",
        C,
        b'{"agent": {"llm": {"model": "m", "temperature": -Infinity}}}',
        id="create -Infinity",
    ),
    pytest.param(
        "PATCH",
        "/api/settings",
        b'{"agent": {"llm": {"model": "m", "timeout": NaN}}}',
        id="settings NaN",
    ),
    pytest.param(
        "POST",
        C + "/{cid}/events",
        b'{"content": [{"text": "x"}], "run": Infinity}',
        id="message Infinity",
    ),
    pytest.param(
        "POST", C, b'{"agent": {"llm": {"model": "m"}}, "title": "\\ud800"}', id="create surrogate"
    ),
    pytest.param(
        "POST", C + "/{cid}/events", b'{"content": [{"text": "\\udc00"}]}', id="message surrogate"
    ),
]


@pytest.fixture(scope="module")
def scratch(
    llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str]]:
    proc = ServerProcess(tmp_path_factory.mktemp("scratch") / "state").start()
    with proc.client() as c:
        made = create(c, llm, "scratch", tmp_path_factory.mktemp("scratch-ws"))
    yield proc, made["id"]
    proc.stop()


@pytest.mark.parametrize(("method", "url", "raw"), NASTY_BODIES)
def test_odd_json_is_422_not_500(
    scratch: tuple[ServerProcess, str], method: str, url: str, raw: bytes
) -> None:
    server, conv_id = scratch
    with server.client() as c:
        before = _snapshot(c, conv_id)
    with server.client() as c:  # a fresh connection: after a 500 the server drops the old one
        r = c.request(
            method,
            url.format(cid=conv_id),
            content=raw,
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422, r.text
        assert_validation_error(r, ["body"])
    with server.client() as c:
        assert _snapshot(c, conv_id) == before


def test_no_500_and_no_secret_in_the_server_log(server: ServerProcess) -> None:
    # Last in the module on purpose: the server's log (stdout and stderr) covers every request
    # made above, agent runs included.
    log = server.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "unexpected error" not in log, log[-3000:]
    assert " 500 " not in log
    for secret in (KEY, "sk-test-key", "sk-real-", "sk-settings-", "sk-echo-"):
        assert secret not in log, secret


def test_conversation_search_refuses_a_bad_page_id(client: httpx.Client) -> None:
    r = client.get("/api/conversations/search", params={"page_id": "not-a-conversation"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "page_id"]


def test_bad_tool_params_are_422_and_leave_nothing(
    client: httpx.Client, llm: ScriptedLLM, tmp_path: Path
) -> None:
    cid = str(uuid.uuid4())
    body = {
        "conversation_id": cid,
        "workspace": {"working_dir": str(tmp_path)},
        "agent": {
            "llm": {"model": "openai/x"},
            "tools": [{"name": "terminal", "params": {"no_output_timeout": -1}}],
        },
    }
    for _ in range(2):
        r = client.post("/api/conversations", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == [
            "body",
            "agent",
            "tools",
            0,
            "params",
            "no_output_timeout",
        ]
    assert client.get(f"/api/conversations/{cid}").status_code == 404
