"""The OpenHands web frontend's V1 calls and the `openhands-api` skill client's, as they send
them (issue 26).

The frontend's requests are written from `frontend/src/api/*-service` of OpenHands/OpenHands as
axios sends them: an `undefined` field is left out, `x || null` is sent as null, query strings
are built with URLSearchParams. The skill client's are those its SKILL.md documents
(OpenHands/extensions, skills/openhands-api). They run against a real control plane with
process sandboxes; what the clients read of each answer is checked.
"""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control_plane.support import ControlPlane, configure_llm, make_config
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

PLAN = "/workspace/project/.agents_tmp/PLAN.md"
#: V1AppConversationStartTask and V1AppConversation (v1-conversation-service.types.ts).
TASK_FIELDS = {
    "id",
    "created_by_user_id",
    "status",
    "detail",
    "app_conversation_id",
    "sandbox_id",
    "agent_server_url",
    "request",
    "created_at",
    "updated_at",
}
RECORD_FIELDS = {
    "id",
    "created_by_user_id",
    "sandbox_id",
    "selected_repository",
    "selected_branch",
    "git_provider",
    "title",
    "trigger",
    "pr_number",
    "llm_model",
    "metrics",
    "created_at",
    "updated_at",
    "sandbox_status",
    "execution_status",
    "conversation_url",
    "session_api_key",
    "public",
    "sub_conversation_ids",
}


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    control_plane = ControlPlane(make_config(tmp_path / "cp")).start()
    yield control_plane
    control_plane.stop()


def create_conversation(api: httpx.Client, text: str) -> dict[str, Any]:
    """V1ConversationService.createConversation(undefined, undefined, text): the start request
    with every `x || null` field null (plugins: null was a 422 before)."""
    body = {
        "parent_conversation_id": None,
        "plugins": None,
        "sandbox_id": None,
        "llm_model": None,
        "initial_message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }
    r = api.post("/api/v1/app-conversations", json=body)
    assert r.is_success, r.text
    task: dict[str, Any] = r.json()
    return task


def get_start_task(api: httpx.Client, task_id: str) -> dict[str, Any] | None:
    found: list[dict[str, Any] | None] = api.get(
        f"/api/v1/app-conversations/start-tasks?ids={task_id}"
    ).json()
    return found[0] if found else None


def test_the_frontends_create_poll_list_read_and_patch_calls(
    plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    account = plane.new_user("frontend-user")
    api = plane.client(account)
    configure_llm(api, llm.base_url(key))
    llm.script(
        key,
        call(
            "terminal",
            command="mkdir -p .agents_tmp && echo '# The plan' > .agents_tmp/PLAN.md",
            security_risk="LOW",
        ),
        call("finish", message="planned"),
    )

    # Create, then poll the start task until READY (getStartTask), as the frontend does.
    task = create_conversation(api, "Write the plan")
    assert TASK_FIELDS <= set(task) and task["status"] == "WORKING"
    ready = wait_for(
        lambda: (t := get_start_task(api, task["id"])) and t["status"] in ("READY", "ERROR") and t,
        90,
        what="the start task",
    )
    assert ready["status"] == "READY", ready
    assert ready["created_by_user_id"] and ready["agent_server_url"]
    cid, sid = ready["app_conversation_id"], ready["sandbox_id"]

    # searchStartTasks(100): the last twenty minutes, as Date.toISOString() writes them.
    since = (datetime.now(UTC) - timedelta(minutes=20)).isoformat(timespec="milliseconds")
    params = httpx.QueryParams({"limit": "100", "created_at__gte": since.replace("+00:00", "Z")})
    r = api.get(f"/api/v1/app-conversations/start-tasks/search?{params}")
    assert r.status_code == 200, r.text
    assert [t["id"] for t in r.json()["items"]] == [task["id"]] and "next_page_id" in r.json()

    # batchGetAppConversations: a record per id, null for an unknown one.
    unknown = uuid.uuid4().hex
    r = api.get(f"/api/v1/app-conversations?ids={cid}&ids={unknown}")
    assert r.status_code == 200, r.text
    record, missing = r.json()
    assert missing is None and RECORD_FIELDS <= set(record)
    assert record["sandbox_id"] == sid and record["llm_model"] == "openai/test-model"
    assert record["pr_number"] == [] and record["sub_conversation_ids"] == []

    def counted() -> dict[str, Any] | None:
        c: dict[str, Any] = api.get(f"/api/v1/app-conversations?ids={cid}").json()[0]
        usage = (c["metrics"] or {}).get("accumulated_token_usage") or {}
        return c if c["execution_status"] == "finished" and usage.get("prompt_tokens") else None

    finished = wait_for(counted, 90, what="the run and its usage")
    assert set(finished["metrics"]) >= {
        "accumulated_cost",
        "max_budget_per_task",
        "accumulated_token_usage",
    }

    # searchConversations(20) and searchConversationsBySandboxId.
    page = api.get("/api/v1/app-conversations/search?limit=20").json()
    assert [c["id"] for c in page["items"]] == [cid] and page["next_page_id"] is None
    other = api.get(f"/api/v1/app-conversations/search?sandbox_id__eq={uuid.uuid4().hex}&limit=100")
    assert other.status_code == 200 and other.json()["items"] == []
    same = api.get(f"/api/v1/app-conversations/search?sandbox_id__eq={sid}&limit=100").json()
    assert [c["id"] for c in same["items"]] == [cid]

    # readConversationFile: the plan the agent wrote; "" for a file that is not there.
    assert (
        api.get(
            f"/api/v1/app-conversations/{cid}/file?{httpx.QueryParams({'file_path': PLAN})}"
        ).json()
        == "# The plan\n"
    )
    absent = api.get(
        f"/api/v1/app-conversations/{cid}/file?"
        f"{httpx.QueryParams({'file_path': '/workspace/project/none.md'})}"
    )
    assert absent.status_code == 200 and absent.json() == ""

    # updateConversationPublicFlag, updateConversationRepository (set, then removed).
    r = api.patch(f"/api/v1/app-conversations/{cid}", json={"public": True})
    assert r.status_code == 200 and r.json()["public"] is True, r.text
    r = api.patch(
        f"/api/v1/app-conversations/{cid}",
        json={
            "selected_repository": "acme/demo",
            "selected_branch": "main",
            "git_provider": "github",
        },
    )
    assert r.status_code == 200, r.text
    assert (
        r.json()["selected_repository"],
        r.json()["selected_branch"],
        r.json()["git_provider"],
    ) == ("acme/demo", "main", "github")
    r = api.patch(f"/api/v1/app-conversations/{cid}", json={"selected_repository": None})
    assert r.status_code == 200 and r.json()["selected_repository"] is None, r.text

    # getSkills and getHooks: the shapes the frontend lists.
    skills = api.get(f"/api/v1/app-conversations/{cid}/skills")
    assert skills.status_code == 200 and isinstance(skills.json()["skills"], list), skills.text
    hooks = api.get(f"/api/v1/app-conversations/{cid}/hooks")
    assert hooks.status_code == 200, hooks.text
    assert all({"event_type", "matchers"} <= set(h) for h in hooks.json()["hooks"])

    # searchEventsV1 and downloadConversation.
    # The status above is the agent server's own; the events come by its webhook, a moment
    # later: the stored ones are waited for, as the frontend's next poll would see them.
    def actions() -> list[str]:
        items = api.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100})
        return [e["tool_name"] for e in items.json()["items"] if e["kind"] == "ActionEvent"]

    wait_for(lambda: actions() == ["terminal", "finish"], 30, what="the run's stored actions")
    download = api.get(f"/api/v1/app-conversations/{cid}/download")
    assert download.status_code == 200, download.text
    with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
        assert b"PLAN.md" in archive.read("events.jsonl")

    # The sandbox service: batchGetSandboxes, getIdleStatus, pause and resume (body {}).
    sandboxes = api.get(f"/api/v1/sandboxes?id={sid}").json()
    assert sandboxes[0]["status"] == "RUNNING" and sandboxes[0]["created_by_user_id"]
    idle = api.get(f"/api/v1/sandboxes/{sid}/idle-status")
    assert idle.status_code == 200, idle.text
    assert {
        "idle_seconds",
        "timeout_seconds",
        "warning_seconds",
        "is_warning",
        "remaining_seconds",
    } <= set(idle.json())
    assert api.post(f"/api/v1/sandboxes/{sid}/pause", json={}).json()["success"] is True
    assert api.post(f"/api/v1/sandboxes/{sid}/resume", json={}).json()["success"] is True
    wait_for(
        lambda: api.get(f"/api/v1/sandboxes?id={sid}").json()[0]["status"] == "RUNNING",
        60,
        what="the sandbox to run again",
    )


def test_the_api_skill_clients_calls(plane: ControlPlane, llm: ScriptedLLM, key: str) -> None:
    account = plane.new_user("skill-user")
    api = plane.client(account)
    configure_llm(api, llm.base_url(key))
    llm.script(
        key,
        call("terminal", command="echo delegated", security_risk="LOW"),
        call("finish", message="done"),
    )

    # users_me() first: it validates the key (no LLM key without expose_secrets).
    me = api.get("/api/v1/users/me")
    assert me.status_code == 200 and me.json()["llm_model"] == "openai/test-model", me.text
    assert "sk-test-key" not in me.text

    # The SKILL.md's start: an initial message with neither role nor run; the agent starts.
    r = api.post(
        "/api/v1/app-conversations",
        json={
            "initial_message": {
                "content": [{"type": "text", "text": "Investigate the flaky tests."}]
            },
            "title": "Delegated task",
        },
    )
    assert r.is_success, r.text
    ready = wait_for(
        lambda: (t := get_start_task(api, r.json()["id"])) and t["status"] == "READY" and t,
        90,
        what="the start task",
    )
    cid, sid = ready["app_conversation_id"], ready["sandbox_id"]
    wait_for(
        lambda: (
            api.get(f"/api/v1/app-conversations?ids={cid}").json()[0]["execution_status"]
            == "finished"
        ),
        90,
        what="the run",
    )
    assert api.get("/api/v1/app-conversations/count").json() == 1
    running = [
        c
        for c in api.get("/api/v1/app-conversations/search", params={"limit": 50}).json()["items"]
        if c.get("execution_status") == "running"
    ]
    assert running == []
    assert [
        s["id"] for s in api.get("/api/v1/sandboxes/search", params={"limit": 10}).json()["items"]
    ] == [sid]

    # Counting events: the app server's count, and the trajectory's event_*.json files. The
    # run's end can be seen a moment before the webhook has brought its last events, so all
    # three are read again until they agree (an event stored between two reads is a retry).
    def agreeing() -> tuple[zipfile.ZipFile, list[str], list[dict[str, Any]], int] | None:
        download = api.get(f"/api/v1/app-conversations/{cid}/download")
        archive = zipfile.ZipFile(io.BytesIO(download.content))
        files = sorted(n for n in archive.namelist() if n.startswith("event_"))
        count = api.get(f"/api/v1/conversation/{cid}/events/count").json()
        stored = api.get(f"/api/v1/conversation/{cid}/events/search", params={"limit": 100}).json()[
            "items"
        ]
        same = len(files) == len(stored) == count
        return (archive, files, stored, count) if same else None

    archive, files, stored, count = wait_for(agreeing, 30, what="every event stored")
    with archive:
        assert files == [f"event_{i:06d}_{e['id']}.json" for i, e in enumerate(stored)]
        assert [json.loads(archive.read(n)) for n in files] == stored
        assert json.loads(archive.read("meta.json"))["id"] == cid
    assert count > 0
