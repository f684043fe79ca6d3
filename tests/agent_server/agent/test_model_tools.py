"""switch_llm, vision_inspect, consult_advisor and sleeptime_compute through the agent loop
(in-process, ScriptedModel), and the routes that switch a conversation's LLM or rotate its key.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from agent_server.agent.model import Scripted, ScriptedModel
from tests.support.inprocess import app_client
from tests.support.scripted_client import (
    create,
    events,
    finish,
    observations,
    text_of,
    tool_call,
    wait_status,
)
from tests.support.wait import wait_for

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PROFILES = {
    "strong": {"model": "scripted/strong", "api_key": "sk-strong-key-1111"},
    "eyes": {"model": "scripted/eyes", "api_key": "sk-eyes-key-2222", "vision": True},
    "advisor": {"model": "scripted/advisor", "api_key": "sk-advisor-key-3333"},
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def save_profiles(client: Any) -> None:
    r = client.patch("/api/settings", json={"llm_profiles": PROFILES})
    assert r.status_code == 200, r.text
    shown = r.json()["llm_profiles"]
    assert {p["api_key"] for p in shown.values()} == {"**********"}


def test_switch_llm_takes_effect_from_the_next_request(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("switch_llm", profile_name="strong", reason="harder step ahead"),
            tool_call("switch_llm", profile_name="nope", reason="typo"),
            tool_call("switch_llm", reason="no name"),
            finish(),
        ]
    )
    with app_client(tmp_path, model) as client:
        save_profiles(client)
        conv = create(client, workspace, ["switch_llm"])
        assert wait_status(client, conv["id"]) == "finished"
        assert [c.model for c in model.configs] == ["scripted/main"] + ["scripted/strong"] * 3
        obs = observations(client, conv["id"])
        assert obs[0]["observation"]["kind"] == "SwitchLLMObservation"
        assert obs[0]["observation"]["active_model"] == "scripted/strong"
        assert obs[1]["observation"]["is_error"]
        assert "'nope' was not found" in text_of(obs[1]) and "strong (scripted/strong)" in text_of(
            obs[1]
        )
        assert obs[2]["kind"] == "AgentErrorEvent" and "profile_name" in text_of(obs[2])
        switches = [
            e
            for e in events(client, conv["id"], "ConversationStateUpdateEvent")
            if e["key"] == "llm"
        ]
        assert [s["value"]["profile_name"] for s in switches] == ["strong"]
        assert switches[0]["value"]["source"] == "agent"
        assert "sk-strong" not in json.dumps(events(client, conv["id"]))
        info = client.get(f"/api/conversations/{conv['id']}").json()
        assert info["llm_profile"] == "strong"
        assert info["agent"]["llm"]["model"] == "scripted/strong"
        assert info["agent"]["llm"]["api_key"] == "**********"


def test_the_user_switches_and_rotates_by_route(tmp_path: Path, workspace: Path) -> None:
    state = tmp_path / "state"
    model = ScriptedModel()
    with app_client(tmp_path, model) as client:
        save_profiles(client)
        conv = create(client, workspace, [], message=None)
        base = f"/api/conversations/{conv['id']}"
        assert (
            client.post(base + "/switch_profile", json={"profile_name": "nope"}).status_code == 404
        )
        assert client.post(base + "/switch_profile", json={}).status_code == 422
        r = client.post(base + "/switch_profile", json={"profile_name": "advisor"})
        assert r.status_code == 200, r.text
        # While a profile is in force its key is rotated in the settings, for everyone.
        assert client.post(base + "/llm_key", json={"api_key": "sk-new"}).status_code == 409
        r = client.patch(
            "/api/settings", json={"llm_profiles": {"advisor": {"api_key": "sk-advisor-rotated"}}}
        )
        assert r.status_code == 200, r.text
        client.post(
            base + "/events", json={"content": [{"type": "text", "text": "hi"}], "run": True}
        )
        wait_status(client, conv["id"], "finished")
        assert model.configs[-1].api_key is not None
        assert model.configs[-1].api_key.get_secret_value() == "sk-advisor-rotated"

        r = client.post(
            base + "/switch_llm", json={"llm": {"model": "scripted/own", "api_key": "sk-own-old"}}
        )
        assert r.status_code == 200, r.text
        assert client.post(base + "/llm_key", json={"api_key": "sk-own-new"}).status_code == 200
        meta = json.loads(
            (state / "conversations" / conv["id"].replace("-", "") / "meta.json").read_text()
        )
        assert meta["agent"]["llm"]["api_key"] == "sk-own-new" and meta["llm_profile"] is None
        updates = [
            e["value"]
            for e in events(client, conv["id"], "ConversationStateUpdateEvent")
            if e["key"] == "llm"
        ]
        assert [(u["model"], u["source"]) for u in updates] == [
            ("scripted/advisor", "user"),
            ("scripted/own", "user"),
            ("scripted/own", "user"),
        ]
        assert "sk-own" not in json.dumps(events(client, conv["id"]))


def test_vision_inspect_asks_a_vision_profile(tmp_path: Path, workspace: Path) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    (workspace / "notes.txt").write_text("not an image")
    model = ScriptedModel(
        [
            tool_call("vision_inspect", question="What colour is it?", path="shot.png"),
            Scripted(content="A single red pixel."),  # the vision profile's answer
            tool_call("vision_inspect", question="?", path="notes.txt"),
            tool_call("vision_inspect", question="?", path="../outside.png"),
            tool_call("vision_inspect", question="?", screenshot=True),
            tool_call("vision_inspect", question="What is in my picture?", image_index=0),
            Scripted(content="A cat."),
            finish(),
        ]
    )
    with app_client(tmp_path, model) as client:
        save_profiles(client)
        r = client.post(
            "/api/conversations",
            json={
                "agent": {
                    "llm": {"model": "scripted/main", "vision": False},
                    "tools": [{"name": "vision_inspect"}],
                },
                "workspace": {"working_dir": str(workspace)},
                "initial_message": {
                    "run": True,
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image", "image_urls": ["data:image/png;base64,AAAA"]},
                    ],
                },
            },
        )
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        assert wait_status(client, cid) == "finished"
        obs = observations(client, cid)
        first = obs[0]["observation"]
        assert (
            first["kind"] == "VisionInspectObservation" and first["answer"] == "A single red pixel."
        )
        assert first["profile_name"] == "eyes" and first["model"] == "scripted/eyes"
        asked = model.requests[1][1]["content"]
        assert asked[1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert model.configs[1].model == "scripted/eyes"
        assert "not a PNG, JPEG" in text_of(obs[1])
        assert "outside" in text_of(obs[2])
        assert "no screenshot" in text_of(obs[3])
        assert all(o["kind"] == "AgentErrorEvent" for o in obs[1:4])
        assert obs[4]["observation"]["answer"] == "A cat."
        last_eyes = max(i for i, c in enumerate(model.configs) if c.model == "scripted/eyes")
        assert (
            model.requests[last_eyes][1]["content"][1]["image_url"]["url"]
            == "data:image/png;base64,AAAA"
        )
        # Unused extras are left out of the stored action (the public shape forbids them).
        actions = events(client, cid, "ActionEvent")
        assert (
            "screenshot" not in actions[0]["action"] and actions[0]["action"]["path"] == "shot.png"
        )
        assert "path" not in actions[4]["action"]


def test_consult_advisor_reads_a_masked_transcript(tmp_path: Path, workspace: Path) -> None:
    secret = "hunter2-very-secret"
    model = ScriptedModel(
        [
            tool_call("consult_advisor", question="Is my plan sound?"),
            Scripted(content="Write the tests first."),  # the advisor
            finish(),
        ]
    )
    with app_client(tmp_path, model) as client:
        save_profiles(client)
        conv = create(
            client,
            workspace,
            ["consult_advisor"],
            secrets={"PASSWORD": secret},
            message=f"deploy with password {secret}",
        )
        assert wait_status(client, conv["id"]) == "finished"
        obs = observations(client, conv["id"])[0]
        assert obs["observation"]["kind"] == "ConsultAdvisorObservation"
        assert obs["observation"]["advice"] == "Write the tests first."
        assert obs["observation"]["model"] == "scripted/advisor"
        advisor_request = json.dumps(model.requests[1])
        assert model.configs[1].model == "scripted/advisor"
        assert "<secret-hidden>" in advisor_request and secret not in advisor_request
        assert "Is my plan sound?" in advisor_request

    model = ScriptedModel([tool_call("consult_advisor"), finish()])
    with app_client(tmp_path / "second", model) as client:  # no profile saved
        conv = create(
            client, workspace, [{"name": "consult_advisor", "params": {"profile": "oracle"}}]
        )
        assert wait_status(client, conv["id"]) == "finished"
        error = observations(client, conv["id"])[0]
        assert error["kind"] == "AgentErrorEvent" and "'oracle' is not saved" in text_of(error)


def test_sleeptime_writes_the_memory_file_when_idle(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("sleeptime_compute", focus="the build commands"),
            tool_call("sleeptime_compute"),  # already scheduled
            tool_call("sleeptime_compute", focus="x" * 3000),  # bad: too long
            finish("all done"),
            Scripted(content="# Memory\n- build with `make`"),  # the reflection, once idle
        ]
    )
    with app_client(tmp_path, model) as client:
        conv = create(
            client,
            workspace,
            [{"name": "sleeptime_compute", "params": {"memory_path": "docs/MEMORY.md"}}],
        )
        assert wait_status(client, conv["id"]) == "finished"
        memory = workspace / "docs" / "MEMORY.md"
        wait_for(memory.exists, what="the memory file")
        assert memory.read_text() == "# Memory\n- build with `make`\n"
        obs = observations(client, conv["id"])
        assert obs[0]["observation"]["kind"] == "SleeptimeComputeObservation"
        assert "docs/MEMORY.md" in obs[0]["observation"]["message"]
        assert "already scheduled" in text_of(obs[1])
        assert obs[2]["kind"] == "AgentErrorEvent" and "focus" in text_of(obs[2])
        reflection = json.dumps(model.requests[-1])
        assert "the build commands" in reflection and "sleeptime_compute" in reflection
        done = wait_for(
            lambda: [
                e
                for e in events(client, conv["id"], "ConversationStateUpdateEvent")
                if e["key"] == "sleeptime_compute"
            ],
            what="the event",
        )
        assert done[0]["value"]["status"] == "done"

        r = client.post(
            "/api/conversations",
            json={
                "agent": {
                    "llm": {"model": "m"},
                    "tools": [{"name": "sleeptime_compute", "params": {"memory_path": "../x"}}],
                },
                "workspace": {"working_dir": str(workspace)},
            },
        )
        assert r.status_code == 422 and "memory_path" in r.text


def test_every_tool_is_listed_and_prompted(tmp_path: Path, workspace: Path) -> None:
    names = [
        "task",
        "delegate",
        "workflow",
        "switch_llm",
        "vision_inspect",
        "consult_advisor",
        "sleeptime_compute",
    ]
    with app_client(tmp_path, ScriptedModel()) as client:
        conv = create(client, workspace, names, message=None)
        prompt = events(client, conv["id"], "SystemPromptEvent")[0]
        assert sorted(t["title"] for t in prompt["tools"]) == sorted([*names, "finish", "think"])
        usable = client.get("/server_info").json()["usable_tools"]
        assert set(names) <= set(usable)
        r = client.post(
            "/api/conversations",
            json={
                "agent": {
                    "llm": {"model": "m"},
                    "tools": [{"name": "TaskToolSet"}, {"name": "inspect_image_with_vision"}],
                },
                "workspace": {"working_dir": str(workspace)},
            },
        )
        assert r.status_code == 201, r.text


async def test_vision_reads_the_last_browser_screenshot(tmp_path: Path) -> None:
    from events.tools.models import VisionInspectAction
    from tools.base import ToolContext
    from tools.conversation import Answer, ProfileInfo
    from tools.models.vision_inspect import VisionInspectTool

    class Eyes:
        asked: list[Any] = []

        def profiles(self) -> list[ProfileInfo]:
            return [ProfileInfo("text", "m1", vision=False), ProfileInfo("eyes", "m2", vision=True)]

        async def supports_vision(self, name: str) -> bool:
            return name == "eyes"

        async def ask(self, name: str | None, messages: list[dict[str, Any]]) -> Answer:
            self.asked.append((name, messages))
            return Answer("a login form", "m2")

    shots = tmp_path / "state" / "browser"
    shots.mkdir(parents=True)
    (shots / "screenshot-1.png").write_bytes(b"not png")
    (shots / "screenshot-2.png").write_bytes(PNG)
    import os

    os.utime(shots / "screenshot-1.png", (1, 1))
    eyes = Eyes()
    ctx = ToolContext("c", working_dir=tmp_path, state_dir=tmp_path / "state", models=eyes)  # type: ignore[arg-type]
    tool = VisionInspectTool(ctx, {})
    obs = await tool.run(VisionInspectAction(question="what page?", screenshot=True))
    assert obs.text == "a login form" and eyes.asked[0][0] == "eyes"
    url = eyes.asked[0][1][1]["content"][1]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(PNG).decode()
