"""The bridge's parts without a service: configuration, the translation of events, the
event-stream reader, the editor's MCP servers and prompt content, masking, reconnecting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from acp.schema import (
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    EnvVariable,
    HttpHeader,
    HttpMcpServer,
    ImageContentBlock,
    McpServerStdio,
    ResourceContentBlock,
    SseMcpServer,
    TextContentBlock,
    TextResourceContents,
)

from bridge import config, content, mcp
from bridge.controlplane import frames
from bridge.editor import Editor
from bridge.errors import Unreachable
from bridge.reconnect import Reconnect
from bridge.schema import Event, parse_event
from bridge.texts import consume
from bridge.updates import Translator, WriteBack
from core.retry import Clock

KEY = "a-key-nobody-may-see-17"


# -- configuration -------------------------------------------------------------------------


def test_configuration_comes_from_the_environment_and_flags() -> None:
    got = config.load([], {"AGENT_SERVER_URL": "http://127.0.0.1:8000", "SESSION_API_KEY": KEY})
    assert (got.target, got.url, got.approval) == (
        "agent-server",
        "http://127.0.0.1:8000",
        "always-ask",
    )
    assert KEY not in repr(got) and got.key.get_secret_value() == KEY
    # A flag chooses the target even when the other's variable is set.
    got = config.load(
        ["--control-plane", "https://cp.example", "--approval", "llm-approve"],
        {"AGENT_SERVER_URL": "http://x", "CONTROL_PLANE_API_KEY": KEY},
    )
    assert (got.target, got.approval) == ("control-plane", "llm-approve")


@pytest.mark.parametrize(
    "argv, env, said",
    [
        ([], {}, "nothing to connect to"),
        ([], {"AGENT_SERVER_URL": "http://a", "CONTROL_PLANE_URL": "http://b"}, "both"),
        ([], {"AGENT_SERVER_URL": "http://a"}, "set SESSION_API_KEY"),
        ([], {"CONTROL_PLANE_URL": "http://a"}, "set CONTROL_PLANE_API_KEY"),
        ([], {"AGENT_SERVER_URL": "ftp://a", "SESSION_API_KEY": KEY}, "url"),
        (
            ["--working-dir", "/w"],
            {"CONTROL_PLANE_URL": "http://a", "CONTROL_PLANE_API_KEY": KEY},
            "are for an agent server",
        ),
        (
            ["--working-dir", "relative"],
            {"AGENT_SERVER_URL": "http://a", "SESSION_API_KEY": KEY},
            "absolute path",
        ),
        (
            ["--agent-file", "/nonexistent/agent.json"],
            {"AGENT_SERVER_URL": "http://a", "SESSION_API_KEY": KEY},
            "cannot read the agent file",
        ),
    ],
)
def test_a_configuration_that_cannot_work_is_refused_without_showing_the_key(
    argv: list[str], env: dict[str, str], said: str
) -> None:
    with pytest.raises(config.ConfigError) as refused:
        config.load(argv, env)
    assert said in str(refused.value) and KEY not in str(refused.value)


# -- events -> updates ---------------------------------------------------------------------


def action(call_id: str, action: dict[str, Any], response: str = "r1", thought: str = "") -> Event:
    name = {"TerminalAction": "terminal", "FileEditorAction": "file_editor"}.get(
        action["kind"], "tool"
    )
    return parse_event(
        {
            "source": "agent",
            "kind": "ActionEvent",
            "tool_name": name,
            "tool_call_id": call_id,
            "thought": [{"type": "text", "text": thought}] if thought else [],
            "action": action,
            "llm_response_id": response,
            "tool_call": {"id": call_id, "name": name, "arguments": "{}", "origin": "completion"},
        }
    )


def observation(call_id: str, observation: dict[str, Any]) -> Event:
    return parse_event(
        {
            "source": "environment",
            "kind": "ObservationEvent",
            "tool_name": "file_editor",
            "tool_call_id": call_id,
            "observation": observation,
            "action_id": "a",
        }
    )


def edited(call_id: str, path: str, new: str, old: str | None = None) -> Event:
    return observation(
        call_id,
        {
            "kind": "FileEditorObservation",
            "command": "create",
            "path": path,
            "old_content": old,
            "new_content": new,
        },
    )


def status(value: str) -> Event:
    return parse_event(
        {
            "source": "environment",
            "kind": "ConversationStateUpdateEvent",
            "key": "execution_status",
            "value": value,
        }
    )


def test_sandbox_paths_are_shown_under_the_editors_directory() -> None:
    t = Translator("/home/me/project", "/sandbox/work", write_back=True)
    assert t.editor_path("/sandbox/work/src/a.py") == "/home/me/project/src/a.py"
    assert t.editor_path("src/a.py") == "/home/me/project/src/a.py"
    assert t.editor_path("/sandbox/work/../other/a.py") == "/sandbox/other/a.py"
    assert t.editor_path("/etc/passwd") == "/etc/passwd"
    assert Translator("/p", None, True).editor_path("/sandbox/a.py") == "/sandbox/a.py"


def test_changed_files_are_written_back_only_when_the_sandbox_works_elsewhere() -> None:
    t = Translator("/home/me/project", "/sandbox/work", write_back=True)
    t.translate(
        action(
            "c1",
            {
                "kind": "FileEditorAction",
                "command": "create",
                "path": "/sandbox/work/a.py",
                "file_text": "x = 1\n",
            },
        )
    )
    updates, writes = t.translate(edited("c1", "/sandbox/work/a.py", "x = 1\n"))
    assert writes == [WriteBack("/home/me/project/a.py", "x = 1\n")]
    diff = updates[-1].content[0]  # type: ignore[union-attr, index]
    assert (diff.path, diff.old_text, diff.new_text) == ("/home/me/project/a.py", None, "x = 1\n")
    # A text the service masked would put the mask in the user's file: not written.
    assert t.translate(edited("c2", "/sandbox/work/b.py", "k = '<secret-hidden>'\n"))[1] == []
    # Outside the working directory: shown as the sandbox's path, never written.
    assert t.translate(edited("c3", "/tmp/c.py", "y\n"))[1] == []
    # A prompt-injected agent aims at a Git hook, or at a link out of the project: refused.
    assert t.translate(edited("c6", "/sandbox/work/.git/hooks/pre-commit", "rm -rf ~\n"))[1] == []
    assert t.translate(edited("c7", "/sandbox/work/sub/.git/config", "[core]\n"))[1] == []
    # The same directory on both sides (a server beside the editor): nothing to write.
    same = Translator("/home/me/project", "/home/me/project", write_back=True)
    assert same.translate(edited("c4", "/home/me/project/a.py", "z\n"))[1] == []
    # An editor that does not offer fs/write_text_file: nothing to write.
    assert Translator("/p", "/s", write_back=False).translate(edited("c5", "/s/a", "z\n"))[1] == []


def test_a_file_is_not_written_back_through_a_link_out_of_the_project(tmp_path: Path) -> None:
    work, outside = tmp_path / "project", tmp_path / "home"
    work.mkdir()
    outside.mkdir()
    (work / "link").symlink_to(outside, target_is_directory=True)
    t = Translator(str(work), "/sandbox/work", write_back=True)
    assert t.translate(edited("c1", "/sandbox/work/link/.bashrc", "evil\n"))[1] == []
    assert t.translate(edited("c2", "/sandbox/work/ok.txt", "fine\n"))[1] == [
        WriteBack(str(work / "ok.txt"), "fine\n")
    ]


def test_streamed_text_is_not_sent_twice_and_lost_pieces_are_made_good() -> None:
    assert consume("Hello world", "") == ("Hello world", "")
    assert consume("Hello world", "Hello world") == ("", "")
    assert consume("Hello world", "Hello") == (" world", "")
    assert consume("Hello world", "Helworld") == ("\n\nHello world", "")
    assert consume("", "Hello") == ("", "Hello")  # a call without text: the stream stays
    t = Translator("/p", "/p", write_back=False)
    delta = parse_event({"source": "agent", "kind": "StreamingDeltaEvent", "content": "I will "})
    [chunk] = t.translate(delta)[0]
    assert chunk.content.text == "I will "  # type: ignore[union-attr]
    first = action("c1", {"kind": "TerminalAction", "command": "ls"}, "r1", "I will look.")
    assert sent_text(t, first) == ["look."]
    # The second action of the same response carries no text of its own to send.
    second = action("c2", {"kind": "TerminalAction", "command": "pwd"}, "r1", "I will look.")
    assert [u.session_update for u in t.translate(second)[0]] == ["tool_call"]


def test_text_streamed_ahead_of_the_stored_events_is_sent_once() -> None:
    """The control plane relays the text as it streams, and the events as its webhook brings
    them: the next answer's text may come before the last answer's events."""
    t = Translator("/p", "/p", write_back=False)
    for piece in ("First.", "Second."):
        t.translate(
            parse_event({"source": "agent", "kind": "StreamingDeltaEvent", "content": piece})
        )
    assert (
        sent_text(t, action("c1", {"kind": "TerminalAction", "command": "a"}, "r1", "First.")) == []
    )
    assert sent_text(t, action("c2", {"kind": "TerminalAction", "command": "b"}, "r2")) == []
    assert (
        sent_text(t, action("c3", {"kind": "TerminalAction", "command": "c"}, "r3", "Second."))
        == []
    )
    assert sent_text(
        t, action("c4", {"kind": "TerminalAction", "command": "d"}, "r4", "Third, not streamed.")
    ) == ["Third, not streamed."]


def sent_text(t: Translator, event: Event) -> list[str]:
    return [
        u.content.text
        for u in t.translate(event)[0]  # type: ignore[union-attr]
        if u.session_update == "agent_message_chunk"
    ]


def test_a_run_that_rests_ends_the_calls_it_left_without_a_result() -> None:
    t = Translator("/p", "/p", write_back=False, asking=False)
    start = t.translate(action("c1", {"kind": "TerminalAction", "command": "sleep 100"}))[0]
    assert start[0].status == "in_progress"  # type: ignore[union-attr]
    assert [c.tool_call_id for c in t.pending()] == ["c1"]
    assert t.translate(status("waiting_for_confirmation"))[0] == []
    [ended] = t.translate(status("paused"))[0]
    assert (ended.tool_call_id, ended.status) == ("c1", "failed")  # type: ignore[union-attr]
    assert t.pending() == []


def test_an_external_acp_agents_tool_calls_pass_through_in_their_own_shape() -> None:
    t = Translator("/p", "/p", write_back=False)
    call = {
        "source": "agent",
        "kind": "ACPToolCallEvent",
        "tool_call_id": "x",
        "title": "Edit a",
        "tool_kind": "edit",
        "status": "pending",
    }
    [start] = t.translate(parse_event(call))[0]
    assert (start.session_update, start.kind, start.status) == ("tool_call", "edit", "pending")
    done = {
        **call,
        "status": "completed",
        "content": [{"type": "diff", "path": "/p/a", "newText": "n", "oldText": "o"}],
    }
    [update] = t.translate(parse_event(done))[0]
    assert update.session_update == "tool_call_update" and update.status == "completed"
    assert update.content[0].new_text == "n"  # type: ignore[index, union-attr]


# -- the control plane's event stream ------------------------------------------------------


async def test_server_sent_events_are_read_frame_by_frame() -> None:
    body = (
        b'retry: 2000\n\n: keep-alive\n\nid: e1\ndata: {"a": 1}\n\n'
        b'event: delta\ndata: {"b":\ndata: 2}\n\nevent: gone\ndata: {}\n\n'
    )
    response = httpx.Response(200, stream=httpx.ByteStream(body))
    got = [frame async for frame in frames(response)]
    assert got == [
        ("message", "e1", '{"a": 1}'),
        ("delta", None, '{"b":\n2}'),
        ("gone", None, "{}"),
    ]


# -- what the editor sends -----------------------------------------------------------------


def test_the_editors_mcp_servers_keep_their_credentials_as_secrets() -> None:
    servers = mcp.convert(
        [
            McpServerStdio(
                name="my tools",
                command="run",
                args=["-v"],
                env=[
                    EnvVariable(name="API_KEY", value="sk-123456"),
                    EnvVariable(name="PATH", value="/usr/bin:/bin"),
                    EnvVariable(name="GITHUB_TOKEN", value="abc"),
                ],
            ),  # too short to be a secret
            HttpMcpServer(
                type="http",
                name="my tools",
                url="https://mcp.example/mcp",
                headers=[HttpHeader(name="Authorization", value="Bearer t0k3n")],
            ),
            SseMcpServer(type="sse", name="old", url="https://sse.example", headers=[]),
        ]
    )
    assert servers.servers == {
        "my_tools": {
            "command": "run",
            "args": ["-v"],
            "env": {
                "API_KEY": "${MCP_MY_TOOLS_API_KEY}",
                "PATH": "/usr/bin:/bin",
                "GITHUB_TOKEN": "abc",
            },
        },
        "my_tools_2": {
            "url": "https://mcp.example/mcp",
            "headers": {"Authorization": "${MCP_MY_TOOLS_2_HEADER_AUTHORIZATION}"},
        },
    }
    assert servers.secrets == {
        "MCP_MY_TOOLS_API_KEY": "sk-123456",
        "MCP_MY_TOOLS_2_HEADER_AUTHORIZATION": "Bearer t0k3n",
    }


def test_prompt_blocks_become_message_content() -> None:
    blocks: list[content.Block] = [
        TextContentBlock(type="text", text="look at"),
        EmbeddedResourceContentBlock(
            type="resource", resource=TextResourceContents(uri="file:///p/a.py", text="x = 1")
        ),
        EmbeddedResourceContentBlock(
            type="resource", resource=BlobResourceContents(uri="file:///p/a.bin", blob="AAAA")
        ),
        ResourceContentBlock(type="resource_link", name="b.py", uri="file:///p/b.py"),
        ImageContentBlock(type="image", data="iVBO", mime_type="image/png"),
    ]
    with_images = content.convert(blocks, images=True)
    assert with_images[1]["text"] == '<file uri="file:///p/a.py">\nx = 1\n</file>'
    assert "not sent" in with_images[2]["text"]
    assert with_images[3]["text"] == "[b.py](file:///p/b.py)"
    assert with_images[4] == {"type": "image", "image_urls": ["data:image/png;base64,iVBO"]}
    assert content.convert(blocks, images=False)[4]["type"] == "text"
    assert content.convert([blocks[4]], images=True)[-1]["type"] == "text"  # never image-only
    assert content.convert([], images=True) == [{"type": "text", "text": "(empty message)"}]


def test_what_reaches_the_editor_is_masked() -> None:
    editor = Editor(conn=None, secrets={"key": KEY})  # type: ignore[arg-type]
    update = TextContentBlock(type="text", text=f"key={KEY} b64={json.dumps(KEY)}")
    assert KEY not in editor.mask(update).text
    error = editor.error(Unreachable(f"lost {KEY}"))
    assert KEY not in str(error) and "<secret-hidden>" in str(error)


async def test_a_stream_is_given_up_after_the_reconnect_window() -> None:
    class Moved(Clock):
        def __init__(self) -> None:
            self.now = 0.0

        def monotonic(self) -> float:
            return self.now

        async def sleep(self, seconds: float) -> None:
            self.now += seconds

    clock = Moved()
    reconnect = Reconnect(10.0, clock)
    lost = Unreachable("cannot reach the agent server at http://h:1")
    for _ in range(3):
        await reconnect.wait(lost)
    reconnect.connected()  # a working stream starts a new window
    start = clock.now
    with pytest.raises(Unreachable) as gave_up:
        while True:
            await reconnect.wait(lost)
    assert clock.now - start == pytest.approx(10.0)
    assert str(gave_up.value).endswith("gave up after 10 s of trying again")


def test_the_bridge_reads_the_event_schema_in_one_module_and_nothing_of_the_servers() -> None:
    """A client of the interfaces: the schema (`events`, its tool payloads included) in
    schema.py only, and nothing of either server."""
    import ast

    import bridge

    found: dict[str, set[str]] = {}
    for path in Path(bridge.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top in ("agent_server", "control_plane", "events"):
                    found.setdefault(path.name, set()).add(top)
    assert found == {"schema.py": {"events"}}
