"""Skills from the workspace: AGENTS.md always on, SKILL.md files listed, invoked, triggered."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest

from agent_server.agent.skills import MAX_FILE_BYTES, front_matter, load, parse
from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import ScriptedLLM, call, text

DEPLOY = """---
name: deploy
description: How to ship a release to production   # shown in the prompt
triggers: [deploy, "ship it"]
---
# Deploying
Run ./release.sh --prod, then watch the dashboard.
"""

MIGRATIONS = """---
name: "database-migrations"
description: >
  Writing and running
  schema migrations
triggers:
  - migration
  - alembic
---
Use `alembic revision --autogenerate`, then review the generated script.
"""


def workspace(root: Path) -> Path:
    (root / "AGENTS.md").write_text("# Rules\nAlways run `make check` before you finish.\n")
    for folder, body in (
        ("deploy", DEPLOY),
        ("db", MIGRATIONS),
        ("notes", "Plain notes with no front matter.\nSecond line.\n"),
    ):
        (root / ".agents" / "skills" / folder).mkdir(parents=True)
        (root / ".agents" / "skills" / folder / "SKILL.md").write_text(body)
    return root


@pytest.mark.e2e
def test_skills_are_listed_invoked_and_triggered(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    workspace(tmp_path)
    llm.script(
        key,
        call("invoke_skill", _args=json.dumps({"name": "database-migrations"})),
        call("invoke_skill", _args=json.dumps({"name": "nope"})),
        text("read it"),
    )
    conv = create(client, llm, key, tmp_path, message="hello", run=True)
    cid = conv["id"]
    assert wait_status(client, cid) == "finished"

    prompt = events(client, cid, "SystemPromptEvent")[0]
    assert "invoke_skill" in {t["title"] for t in prompt["tools"]}
    context = prompt["dynamic_context"]["text"]
    assert "Always run `make check` before you finish." in context
    assert "- deploy: How to ship a release to production (triggers: deploy, ship it)" in context
    assert "- database-migrations: Writing and running schema migrations" in context
    assert "- notes: Plain notes with no front matter." in context
    assert "release.sh" not in context  # bodies are loaded on demand
    system = llm.requests_for(key)[0]["messages"][0]["content"]
    assert "make check" in json.dumps(system) and "database-migrations" in json.dumps(system)

    action = events(client, cid, "ActionEvent")[0]["action"]
    assert action == {"kind": "InvokeSkillAction", "name": "database-migrations"}
    observation = events(client, cid, "ObservationEvent")[0]["observation"]
    assert observation["kind"] == "InvokeSkillObservation"
    assert observation["skill_name"] == "database-migrations"
    assert observation["content"][0]["text"].startswith("Use `alembic revision --autogenerate`")
    error = events(client, cid, "AgentErrorEvent")[0]["error"]
    assert "No skill named 'nope'" in error and "deploy" in error

    # A trigger in a user message activates its skill, once.
    llm.script(key, text("deployed"), text("again"))
    send(client, cid, "Please DEPLOY the app")
    assert wait_status(client, cid) == "finished"
    send(client, cid, "deploy once more")
    assert wait_status(client, cid) == "finished"
    messages = events(client, cid, "MessageEvent", source__eq="user")
    assert [m["activated_skills"] for m in messages] == [[], ["deploy"], []]
    assert "./release.sh --prod" in messages[1]["extended_content"][0]["text"]
    model_saw = llm.requests_for(key)[3]["messages"][-1]
    assert model_saw["role"] == "user" and "./release.sh --prod" in json.dumps(model_saw)

    listed = client.get(f"/api/conversations/{cid}/skills").json()["skills"]
    assert [(s["name"], s["source"], s["always_on"]) for s in listed] == [
        ("AGENTS.md", "AGENTS.md", True),
        ("database-migrations", ".agents/skills/db/SKILL.md", False),
        ("deploy", ".agents/skills/deploy/SKILL.md", False),
        ("notes", ".agents/skills/notes/SKILL.md", False),
    ]
    assert listed[2]["triggers"] == ["deploy", "ship it"]
    assert listed[1]["description"] == "Writing and running schema migrations"


@pytest.mark.e2e
def test_a_workspace_without_skills(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    conv = create(client, llm, key, tmp_path)
    prompt = events(client, conv["id"], "SystemPromptEvent")[0]
    assert "invoke_skill" not in {t["title"] for t in prompt["tools"]}
    assert "<skills>" not in prompt["dynamic_context"]["text"]
    assert client.get(f"/api/conversations/{conv['id']}/skills").json() == {"skills": []}
    assert client.get(f"/api/conversations/{uuid.uuid4()}/skills").status_code == 404


@pytest.mark.e2e
def test_the_openhands_skills_loader_reads_a_project_of_this_workspace(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    """POST /api/skills, as the Cloud workspace's load_skills_from_agent_server sends it."""
    (tmp_path / "project").mkdir()
    project = workspace(tmp_path / "project")
    create(client, llm, key, project)  # the project is a working directory of this server
    ask = {
        "load_public": False,
        "load_user": True,
        "load_project": True,
        "load_org": True,
        "project_dir": str(project),
        "sandbox_config": None,
    }
    r = client.post("/api/skills", json=ask)
    assert r.status_code == 200, r.text
    found = {s["name"]: s for s in r.json()["skills"]}
    assert list(found) == ["AGENTS.md", "database-migrations", "deploy", "notes"]
    assert r.json()["sources"] == {"project": 4}
    assert found["AGENTS.md"]["type"] == "repo" and "make check" in found["AGENTS.md"]["content"]
    assert found["deploy"]["type"] == "knowledge" and found["deploy"]["triggers"] == [
        "deploy",
        "ship it",
    ]
    assert found["notes"]["type"] == "agentskills" and found["notes"]["is_agentskills_format"]

    assert client.post("/api/skills", json={**ask, "project_dir": "/etc"}).status_code == 403
    assert (
        client.post("/api/skills", json={**ask, "project_dir": str(project / "nope")}).status_code
        == 404
    )
    assert (
        client.post(
            "/api/skills", json={**ask, "project_dir": str(project / "AGENTS.md")}
        ).status_code
        == 404
    )  # a file: no such directory (as documented)
    assert client.post("/api/skills", json={**ask, "load_project": False}).json() == {
        "skills": [],
        "sources": {},
    }
    assert client.post("/api/skills", json={"project_dir": 5}).status_code == 422


# -- reading skill files ------------------------------------------------------------------------


def test_front_matter_subset() -> None:
    meta, body = front_matter(MIGRATIONS)
    assert meta == {
        "name": "database-migrations",
        "description": "Writing and running schema migrations",
        "triggers": ["migration", "alembic"],
    }
    assert body.strip().startswith("Use `alembic")
    meta, _ = front_matter("---\ntriggers: ['a, b', \"c\"]\ndescription: |\n  one\n  two\n---\n")
    assert meta == {"triggers": ["a, b", "c"], "description": "one\ntwo"}
    assert front_matter("no front matter\n---\n") == ({}, "no front matter\n---\n")
    assert front_matter("---\nunterminated: yes\n") == ({}, "---\nunterminated: yes\n")


def test_parse_defaults_and_bounds(tmp_path: Path) -> None:
    skill = parse("# Title line\nbody", default_name="folder", source="x/SKILL.md")
    assert (skill.name, skill.description, skill.triggers) == ("folder", "Title line", ())
    skill = parse("---\ntriggers: solo\n---\nb", default_name="f", source="s")
    assert skill.triggers == ("solo",)

    (tmp_path / ".agents" / "skills" / "big").mkdir(parents=True)
    (tmp_path / ".agents" / "skills" / "big" / "SKILL.md").write_text("x" * (MAX_FILE_BYTES * 2))
    (tmp_path / ".agents" / "skills" / "empty").mkdir()  # no SKILL.md: not a skill
    [big] = load(tmp_path)
    assert len(big.body) < MAX_FILE_BYTES + 200 and big.body.endswith("KiB of SKILL.md are read]")
