"""Secrets (SPEC 2.5, 5 rules 4 and 5): names only ever shown, values masked everywhere.

This module's server pushes every event to a real webhook receiver, so one conversation can be
checked where a client, a control plane and an operator would look: event search, websocket
frames, webhook bodies, the LLM requests, every file under the state directory and the log.
"""

from __future__ import annotations

import asyncio
import base64
import json
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from websockets.asyncio.client import connect

import tools
from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import ScriptedLLM, call, error, free_port, text
from tests.support.receiver import Receiver
from tests.support.server import KEY, ServerProcess
from tests.support.threaded import ThreadedServer
from tests.support.wait import wait_for

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

MASK = "<secret-hidden>"
HOOK_KEY = "secrets-webhook-key"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"the secrets module's webhook key").decode()
#: Files that hold secret values by design (mode 0600); no other file may hold one.
VALUE_FILES = ("settings.json", "meta.json")
#: Hooks read their stdin first (see test_hooks.test_a_hook_that_ignores_its_input_is_run_...).
READ = "cat > /dev/null; "


def new_secret(tag: str) -> str:
    return f"{tag}{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    rec = Receiver(api_key=HOOK_KEY, secret=WEBHOOK_SECRET).start()
    yield rec
    rec.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[ServerProcess]:
    env = {
        "AGENT_SERVER_WEBHOOK_URL": receiver.base_url,
        "AGENT_SERVER_WEBHOOK_API_KEY": HOOK_KEY,
        "AGENT_SERVER_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "AGENT_SERVER_WEBHOOK_BATCH_MS": "20",
    }
    proc = ServerProcess(tmp_path_factory.mktemp("secrets") / "state", env=env).start()
    yield proc
    proc.stop()


def hooks(event_type: str, command: str, matcher: str = "*") -> dict[str, Any]:
    return {event_type: [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]}


def hook_stdout(client: httpx.Client, cid: str) -> str:
    return events(client, cid, "HookExecutionEvent")[-1]["stdout"]


def socket_frames(server: ServerProcess, cid: str, count: int) -> list[str]:
    """The first `count` frames of a websocket replaying the conversation from the start."""

    async def read() -> list[str]:
        url = server.url.replace("http://", "ws://") + f"/sockets/events/{cid}?resend_all=true"
        async with connect(url, additional_headers={"X-Session-API-Key": KEY}) as ws:
            return [str(await asyncio.wait_for(ws.recv(), 10)) for _ in range(count)]

    return asyncio.run(read())


def conversation_dir(server: ServerProcess, cid: str) -> Path:
    return server.state_dir / "conversations" / uuid.UUID(cid).hex


def files_holding(root: Path, value: str) -> list[Path]:
    """Every file under `root` whose bytes contain `value`, less a write under way (an
    atomic write's temporary file, which becomes one of the others when it lands)."""
    return [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".tmp") and _holds(p, value.encode())
    ]


def _holds(path: Path, value: bytes) -> bool:
    try:
        return value in path.read_bytes()
    except FileNotFoundError:  # renamed into place meanwhile
        return False


# -- names only ------------------------------------------------------------------------------


def test_names_only_are_ever_returned(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    token, password, replaced, added = (new_secret(t) for t in ("tok", "pw", "rep", "add"))
    conv = create(
        client,
        llm,
        key,
        tmp_path,
        secrets={"API_TOKEN": token, "DB_PASSWORD": {"kind": "StaticSecret", "value": password}},
    )
    cid = conv["id"]
    assert conv["secret_names"] == ["API_TOKEN", "DB_PASSWORD"]
    assert "secrets" not in conv
    r = client.post(
        f"/api/conversations/{cid}/secrets",
        json={"secrets": {"API_TOKEN": replaced, "NEW_ONE": added}},
    )
    assert r.status_code == 200, r.text

    answers = [
        client.get(f"/api/conversations/{cid}"),
        client.get("/api/conversations/search"),
        client.get("/api/conversations", params={"ids": [cid]}),
        client.get(f"/api/conversations/{cid}/events/search"),
    ]
    assert answers[0].json()["secret_names"] == ["API_TOKEN", "DB_PASSWORD", "NEW_ONE"]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert not any(v in answer.text for v in (token, password, replaced, added))


@pytest.mark.parametrize(
    "secrets",
    [
        {"bad-name": "a-long-enough-value-1234"},
        {"1STARTS_WITH_DIGIT": "a-long-enough-value-1234"},
        {"SHORT": "abc"},
        {"NOT_A_STRING": 12345},
    ],
)
def test_invalid_secrets_are_422_and_never_echoed(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, secrets: dict[str, Any]
) -> None:
    conv = create(client, llm, key, tmp_path)
    for r in (
        client.post(f"/api/conversations/{conv['id']}/secrets", json={"secrets": secrets}),
        client.post(
            "/api/conversations",
            json={
                "agent": {"llm": {"model": "openai/x", "base_url": llm.base_url(key)}},
                "workspace": {"working_dir": str(tmp_path)},
                "secrets": secrets,
            },
        ),
    ):
        assert r.status_code == 422, r.text
        assert "a-long-enough-value-1234" not in r.text
    assert client.get(f"/api/conversations/{conv['id']}").json()["secret_names"] == []


class SecretHost:
    """A peer serving one secret value at GET /secrets/{name} to the right session key (the
    control plane's sandbox-scoped secrets, as a LookupSecret names them)."""

    def __init__(self, values: dict[str, str], key: str) -> None:
        async def secret(request: Request) -> PlainTextResponse:
            if request.headers.get("x-session-api-key") != key:
                return PlainTextResponse("no", 401)
            name = request.path_params["name"]
            return PlainTextResponse(values[name]) if name in values else PlainTextResponse("", 404)

        port = free_port()
        self.url = f"http://127.0.0.1:{port}/secrets"
        self._server = ThreadedServer(
            Starlette(routes=[Route("/secrets/{name}", secret)]), port, "secret-host"
        )
        self._server.start()

    def stop(self) -> None:
        self._server.stop()


def test_a_lookup_secret_is_fetched_once_and_kept_as_its_value(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    value, session = new_secret("look"), new_secret("session-key")
    host = SecretHost({"GITHUB_TOKEN": value}, session)
    try:

        def lookup(name: str, key: str = session) -> dict[str, Any]:
            return {
                "kind": "LookupSecret",
                "url": f"{host.url}/{name}",
                "headers": {"X-Session-API-Key": key},
            }

        conv = create(client, llm, key, tmp_path)
        cid = conv["id"]
        for bad in (
            lookup("MISSING"),
            lookup("GITHUB_TOKEN", "wrong-key"),
            {"kind": "LookupSecret", "url": "file:///etc/passwd"},
        ):
            r = client.post(
                f"/api/conversations/{cid}/secrets", json={"secrets": {"GITHUB_TOKEN": bad}}
            )
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"][:3] == ["body", "secrets", "GITHUB_TOKEN"]
            assert session not in r.text
        assert client.get(f"/api/conversations/{cid}").json()["secret_names"] == []
        r = client.post(
            f"/api/conversations/{cid}/secrets",
            json={"secrets": {"GITHUB_TOKEN": lookup("GITHUB_TOKEN")}},
        )
        assert r.status_code == 200, r.text
    finally:
        host.stop()
    # The host is gone: the value was fetched when given, and the session key kept nowhere.
    assert client.get(f"/api/conversations/{cid}").json()["secret_names"] == ["GITHUB_TOKEN"]
    assert files_holding(server.state_dir, value) == [conversation_dir(server, cid) / "meta.json"]
    assert files_holding(server.state_dir, session) == []


# -- which value is in force -----------------------------------------------------------------


def test_settings_secrets_apply_and_the_conversation_value_wins(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    stored_shared, stored_only, own = (new_secret(t) for t in ("stored", "only", "own"))
    r = client.patch(
        "/api/settings",
        json={"secrets": {"SHARED_TOKEN": stored_shared, "SETTINGS_ONLY": stored_only}},
    )
    assert r.status_code == 200, r.text
    shown = client.get("/api/settings").text
    assert stored_shared not in r.text + shown and stored_only not in r.text + shown
    settings_file = server.state_dir / "settings.json"
    assert stat.S_IMODE(settings_file.stat().st_mode) == 0o600
    assert stored_shared in settings_file.read_text()  # stored, by design, and only there

    # A hook sees the secrets in force in its environment, as the agent's tools do.
    command = (
        READ + 'printf "%s %s" "$SHARED_TOKEN" "$SETTINGS_ONLY" > env.txt; '
        'echo "using $SHARED_TOKEN and $SETTINGS_ONLY"'
    )
    mine = create(
        client,
        llm,
        key,
        tmp_path / "mine",
        secrets={"SHARED_TOKEN": own},
        hook_config=hooks("UserPromptSubmit", command),
    )["id"]
    theirs = create(
        client, llm, key, tmp_path / "theirs", hook_config=hooks("UserPromptSubmit", command)
    )["id"]
    assert client.get(f"/api/conversations/{mine}").json()["secret_names"] == ["SHARED_TOKEN"]

    def seen(cid: str, workspace: Path) -> tuple[str, str]:
        send(client, cid, "hello", run=False)
        return (workspace / "env.txt").read_text(), hook_stdout(client, cid)

    assert seen(mine, tmp_path / "mine") == (f"{own} {stored_only}", f"using {MASK} and {MASK}\n")
    assert seen(theirs, tmp_path / "theirs") == (
        f"{stored_shared} {stored_only}",
        f"using {MASK} and {MASK}\n",
    )

    # Replaced on the conversation, then in the settings: the new values apply (and are masked).
    newer, newer_stored = new_secret("newer"), new_secret("newstored")
    client.post(f"/api/conversations/{mine}/secrets", json={"secrets": {"SHARED_TOKEN": newer}})
    assert seen(mine, tmp_path / "mine") == (f"{newer} {stored_only}", f"using {MASK} and {MASK}\n")
    client.patch("/api/settings", json={"secrets": {"SETTINGS_ONLY": newer_stored}})
    assert seen(mine, tmp_path / "mine") == (
        f"{newer} {newer_stored}",
        f"using {MASK} and {MASK}\n",
    )
    assert seen(theirs, tmp_path / "theirs") == (
        f"{stored_shared} {newer_stored}",
        f"using {MASK} and {MASK}\n",
    )


# -- masked wherever an event goes -----------------------------------------------------------


def test_a_secret_never_reaches_events_the_model_or_the_disk(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    server: ServerProcess,
    receiver: Receiver,
) -> None:
    value = new_secret("pw")
    vault = tmp_path / "vault.txt"
    vault.write_text(f"password={value}\n")
    config = {
        **hooks("SessionStart", READ + 'echo "token=$MY_SECRET"; echo "warn $MY_SECRET" >&2'),
        **hooks(
            "PostToolUse",
            READ + """printf '{"additionalContext": "checked with %s"}' "$MY_SECRET" """,
            matcher="file_editor",
        ),
    }
    llm.script(
        key,
        call("file_editor", command="view", path=str(vault)),  # a tool's output
        call("think", f"I can see {value} now", thought=f"remember {value}"),  # the model's text
        call("file_editor", command="view", path=str(tmp_path / value / "x")),  # an error detail
        text(f"Done. The password was {value}."),  # the model's reply
        error(401, f"invalid api key {value}"),  # an LLM error
    )
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="check the vault",
        run=True,
        secrets={"MY_SECRET": value},
        hook_config=config,
    )["id"]
    assert wait_status(client, cid) == "finished"
    send(client, cid, f"the other one is {value} too")  # a person pasting it
    assert wait_status(client, cid, "error") == "error"

    stored = events(client, cid)
    found = json.dumps(stored)
    assert value not in found
    # Each way in was masked where it landed (so the model could still follow along).
    start_hook = next(
        e
        for e in stored
        if e["kind"] == "HookExecutionEvent" and e["hook_event_type"] == "SessionStart"
    )
    assert start_hook["stdout"] == f"token={MASK}\n" and start_hook["stderr"] == f"warn {MASK}\n"
    view, *_ = events(client, cid, "ObservationEvent")
    assert f"password={MASK}" in view["observation"]["content"][0]["text"]
    assert view["extended_content"][0]["text"] == f"checked with {MASK}"
    think = next(e for e in stored if e["kind"] == "ActionEvent" and e["tool_name"] == "think")
    assert think["thought"][0]["text"] == f"I can see {MASK} now"
    assert think["action"]["thought"] == f"remember {MASK}"
    assert MASK in think["tool_call"]["arguments"]
    bad_call = [
        e for e in stored if e["kind"] == "ActionEvent" and e["tool_name"] == "file_editor"
    ][1]
    bad_result = next(
        e
        for e in stored
        if e["kind"] != "ActionEvent" and e.get("tool_call_id") == bad_call["tool_call_id"]
    )
    assert "does not exist" in json.dumps(bad_result) and MASK in json.dumps(bad_result)
    reply = events(client, cid, "MessageEvent", source__eq="agent")[0]
    assert reply["llm_message"]["content"][0]["text"] == f"Done. The password was {MASK}."
    pasted = events(client, cid, "MessageEvent", source__eq="user")[-1]
    assert pasted["llm_message"]["content"][0]["text"] == f"the other one is {MASK} too"
    failure = events(client, cid, "ConversationErrorEvent")[-1]
    assert MASK in failure["detail"]

    # The model was only ever shown the mask.
    requests = llm.requests_for(key)
    assert len(requests) == 5
    assert all(value not in json.dumps(r) for r in requests)
    assert f"password={MASK}" in json.dumps(requests[1]["messages"][-1])
    assert MASK in json.dumps(requests[4]["messages"])

    # Websocket frames and webhook bodies carry the stored (masked) events.
    frames = socket_frames(server, cid, len(stored))
    assert len(frames) == len(stored) and all(value not in f for f in frames)
    wanted = {e["id"] for e in stored}
    wait_for(lambda: wanted <= set(receiver.ids(cid)), timeout=20, what="webhook delivery")
    bodies = [b.body for b in receiver.batches if b.conversation_id == cid]
    assert bodies and all(value.encode() not in b for b in bodies)

    # On disk: only the conversation's metadata holds the value (mode 0600), never the log.
    conv_dir = conversation_dir(server, cid)
    assert (conv_dir / "events.jsonl").stat().st_size > 0
    assert value.encode() not in (conv_dir / "events.jsonl").read_bytes()
    assert files_holding(server.state_dir, value) == [conv_dir / "meta.json"]
    for path in server.state_dir.rglob("*"):
        if path.is_file() and path.name in VALUE_FILES:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # Nor does the server's own log.
    assert value not in server.log_path.read_text(errors="replace")


def test_a_secret_added_later_is_masked_from_then_on(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    value = new_secret("late")
    command = READ + 'echo "late=$LATE_SECRET"'
    cid = create(client, llm, key, tmp_path, hook_config=hooks("UserPromptSubmit", command))["id"]
    client.post(f"/api/conversations/{cid}/secrets", json={"secrets": {"LATE_SECRET": value}})
    send(client, cid, f"here: {value}", run=False)
    assert hook_stdout(client, cid) == f"late={MASK}\n"
    assert value not in json.dumps(events(client, cid))
    assert files_holding(server.state_dir, value) == [conversation_dir(server, cid) / "meta.json"]


def test_a_hook_never_sees_the_servers_own_credentials(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    cid = create(client, llm, key, tmp_path, hook_config=hooks("UserPromptSubmit", READ + "env"))[
        "id"
    ]
    send(client, cid, "hello", run=False)
    output = hook_stdout(client, cid)
    assert "PATH=" in output  # the hook did print its environment
    assert KEY not in output and HOOK_KEY not in output
    assert "SESSION_API_KEY" not in output


def test_the_servers_own_keys_printed_by_an_agent_reach_no_event(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    server: ServerProcess,
    receiver: Receiver,
) -> None:
    """Children never get the server's keys, but an agent may still come by one (a file left
    in the workspace, a prompt that quotes it). Printed in a tool's output and in its reply,
    plainly and in base64, they reach neither the log, nor a socket, nor the webhook."""
    own = (KEY, HOOK_KEY, WEBHOOK_SECRET)
    left = tmp_path / "left-behind.txt"
    left.write_text("\n".join(own) + "\n")
    llm.script(
        key,
        call("terminal", command=f"cat {left}; base64 -w0 {left}; echo; rev {left}"),
        text("Here they are: " + " ".join(own)),
    )
    cid = create(
        client, llm, key, tmp_path, tools=["terminal"], message="print the keys", run=True
    )["id"]
    assert wait_status(client, cid) == "finished"

    stored = events(client, cid)
    output = json.dumps(events(client, cid, "ObservationEvent")[0]["observation"])
    assert KEY[::-1] in output  # the command really printed them (reversed: not caught)
    assert output.count(MASK) >= 3
    reply = events(client, cid, "MessageEvent", source__eq="agent")[-1]
    assert reply["llm_message"]["content"][0]["text"] == "Here they are: " + " ".join([MASK] * 3)
    frames = socket_frames(server, cid, len(stored))
    wanted = {e["id"] for e in stored}
    wait_for(lambda: wanted <= set(receiver.ids(cid)), timeout=20, what="webhook delivery")
    bodies = [b.body.decode() for b in receiver.batches if b.conversation_id == cid]
    shown = [json.dumps(stored), *frames, *bodies]
    for value in own:
        assert all(value not in text for text in shown), value
        assert all(value not in json.dumps(r) for r in llm.requests_for(key)[1:])
        assert value not in (conversation_dir(server, cid) / "events.jsonl").read_text()


def test_the_llm_keys_an_agent_comes_by_reach_no_event(
    client: httpx.Client,
    llm: ScriptedLLM,
    key: str,
    tmp_path: Path,
    server: ServerProcess,
    receiver: Receiver,
) -> None:
    """A prompt-injected agent reads its own model's key (and a profile's, in the settings)
    where the server keeps them and prints them, plainly and in base64: masked as secrets are,
    in the log, the sockets and the webhook, though no one stored them as secrets."""
    own, profile = new_secret("sk-own-"), new_secret("sk-profile-")
    r = client.patch(
        "/api/settings",
        json={"llm_profiles": {"spare": {"model": "openai/spare", "api_key": profile}}},
    )
    assert r.status_code == 200, r.text
    # The command holds neither key: it puts them together, as code that found them would.
    show = (
        "python3 -c \"import base64; k=['sk-own-'+'{0}', 'sk-profile-'+'{1}']; "
        'print(*k); print(*(base64.b64encode(v.encode()).decode() for v in k))"'
    )
    llm.script(key, call("terminal", command=show.format(own[7:], profile[11:])), text("Done."))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["terminal"],
        message="print the keys",
        run=True,
        llm_extra={"api_key": own},
    )["id"]
    assert wait_status(client, cid) == "finished"
    stored = events(client, cid)
    output = json.dumps(events(client, cid, "ObservationEvent")[0]["observation"])
    assert output.count(MASK) == 4, output
    frames = socket_frames(server, cid, len(stored))
    wanted = {e["id"] for e in stored}
    wait_for(lambda: wanted <= set(receiver.ids(cid)), timeout=20, what="webhook delivery")
    bodies = [b.body.decode() for b in receiver.batches if b.conversation_id == cid]
    for value in (own, profile):
        encoded = base64.b64encode(value.encode()).decode()
        for shown in (
            json.dumps(stored),
            *frames,
            *bodies,
            (conversation_dir(server, cid) / "events.jsonl").read_text(),
        ):
            assert value not in shown and encoded not in shown


def test_a_secret_with_a_quote_is_masked_inside_json_text(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    value = 'pa"ss-' + uuid.uuid4().hex
    llm.script(key, call("think", thought=f"remember {value}"), call("finish", message="ok"))
    cid = create(client, llm, key, tmp_path, message="go", run=True, secrets={"QUOTED": value})[
        "id"
    ]
    assert wait_status(client, cid) == "finished"
    think = next(a for a in events(client, cid, "ActionEvent") if a["tool_name"] == "think")
    assert think["action"]["thought"] == f"remember {MASK}"  # the parsed copy is masked
    assert value not in json.loads(think["tool_call"]["arguments"])["thought"]
    replayed = next(m for m in llm.requests_for(key)[1]["messages"] if m.get("tool_calls"))
    arguments = json.loads(replayed["tool_calls"][0]["function"]["arguments"])
    assert value not in arguments["thought"]


# -- the terminal ----------------------------------------------------------------------------


needs_terminal = pytest.mark.skipif(
    "terminal" not in tools.TOOL_SETS, reason="the terminal tool is not registered"
)


@needs_terminal
def test_the_terminal_has_secrets_in_its_environment_and_masks_them(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    value = new_secret("term")
    command = 'echo "secret is $MY_SECRET"; echo "$MY_SECRET" | rev'
    llm.script(key, call("terminal", command=command), call("finish", message="done"))
    cid = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["terminal"],
        message="go",
        run=True,
        secrets={"MY_SECRET": value},
    )["id"]
    assert wait_status(client, cid) == "finished"
    observation = events(client, cid, "ObservationEvent")[0]
    output = json.dumps(observation["observation"])
    assert f"secret is {MASK}" in output
    assert value[::-1] in output  # it really was in the environment (reversed, unmasked)
    assert value not in json.dumps(events(client, cid))
    assert all(value not in json.dumps(r) for r in llm.requests_for(key))
    assert files_holding(server.state_dir, value) == [conversation_dir(server, cid) / "meta.json"]


@needs_terminal
def test_git_authorship_comes_from_settings_or_safe_defaults(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    commit = (
        "git -c commit.gpgsign=false commit -q --allow-empty -m one && "
        "git log -1 --format='author=%an <%ae> committer=%cn <%ce>'"
    )

    def author(name: str) -> str:
        """Who a commit made by the agent in a fresh repository is by."""
        repo = tmp_path / name
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        k = f"{key}-{name}"
        llm.script(k, call("terminal", command=commit), call("finish", message="done"))
        # A push credential among the secrets sets no authorship (SPEC 5 rule 5).
        cid = create(
            client,
            llm,
            k,
            repo,
            tools=["terminal"],
            message="commit",
            run=True,
            secrets={"GITHUB_TOKEN": new_secret("ghp")},
        )["id"]
        assert wait_status(client, cid) == "finished"
        output = events(client, cid, "ObservationEvent")[0]["observation"]["content"][0]["text"]
        assert "author=" in output, output  # the commit worked
        return output[output.index("author=") :].splitlines()[0]

    r = client.patch("/api/settings", json={"git_user_name": None, "git_user_email": None})
    assert r.status_code == 200, r.text
    default = author("defaults")
    assert "author= <" not in default and "<>" not in default  # a name and an e-mail were set
    name, email = default.split(" committer=")[0].removeprefix("author=").split(" <")
    assert name and "@" in email

    r = client.patch(
        "/api/settings", json={"git_user_name": "Ada Lovelace", "git_user_email": "ada@example.com"}
    )
    assert r.status_code == 200, r.text
    assert author("settings") == (
        "author=Ada Lovelace <ada@example.com> committer=Ada Lovelace <ada@example.com>"
    )


@needs_terminal
def test_a_long_output_saved_on_disk_is_masked_for_secrets_added_later(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, server: ServerProcess
) -> None:
    value = new_secret("added")
    big = tmp_path / "big.log"
    big.write_text(f"token: {value}\n" + "filler line\n" * 5000)  # past what a call shows
    llm.script(key, call("terminal", command="echo started"), call("finish", message="ok"))
    cid = create(client, llm, key, tmp_path, tools=["terminal"], message="go", run=True)["id"]
    assert wait_status(client, cid) == "finished"
    r = client.post(f"/api/conversations/{cid}/secrets", json={"secrets": {"ADDED": value}})
    assert r.status_code == 200, r.text

    llm.script(key, call("terminal", command=f"cat {big}"), call("finish", message="ok"))
    send(client, cid, "show the log")
    assert wait_status(client, cid, "finished") == "finished"
    observation = events(client, cid, "ObservationEvent")[-2]["observation"]
    assert observation.get("full_output_save_dir")  # the whole output went to a file
    assert value not in json.dumps(events(client, cid))
    assert files_holding(server.state_dir, value) == [conversation_dir(server, cid) / "meta.json"]
