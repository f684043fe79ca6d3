"""`make demo`: the whole service on this machine without an LLM key.

The control plane on 127.0.0.1:3000 (CONTROL_PLANE_PORT to change it) with its state in
./.control-plane-demo, a user `demo` whose settings point at the tests' scripted model
(tests/support/llm.py) on a loopback port, and that user's key printed to sign in with. The
scripted model does the same small task for any request: it looks around the workspace, writes
hello.py from your message, runs it and answers; it also titles conversations and answers the
settings' "Test connection". Set a real model in Settings to leave the demo.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from control_plane.__main__ import create_key
from control_plane.app import Server, build_app
from control_plane.config import from_env
from tests.support.llm import Reply, ScriptedLLM, call, text

STATE = Path(os.environ.get("CONTROL_PLANE_STATE_DIR", ".control-plane-demo"))
TITLE_ASK = "for a conversation that starts with"


def _said(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def demo_reply(_key: str, body: dict[str, Any]) -> Reply:
    """The scripted model's next answer, from the conversation so far: after your message, a
    look around, a file, a run of it, then the answer."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    if TITLE_ASK in json.dumps(messages):
        request = _said(messages[-1]).split("\n\n", 1)[-1].strip().splitlines() or ["a task"]
        return text(f"Demo: {' '.join(request[0].split()[:5])}")
    if not body.get("tools"):
        return text("OK")
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    asked = _said(messages[last_user]).strip() or "hello"
    done = [m for m in messages[last_user + 1 :] if m.get("role") == "tool"]
    if not done:
        return call("terminal", "Let me look at the workspace first.", command="pwd && ls -la")
    workdir = _said(done[0]).strip().splitlines()[0]
    if len(done) == 1:
        line = asked.splitlines()[0].replace("\\", "\\\\").replace('"', '\\"')[:80]
        return call(
            "file_editor",
            "I'll write a small script from your request.",
            command="create",
            path=f"{workdir}/hello.py",
            file_text=f'print("You asked: {line}")\n',
        )
    if len(done) == 2:
        return call(
            "file_editor",
            command="str_replace",
            path=f"{workdir}/hello.py",
            old_str='print("You asked',
            new_str='print("Hello from the demo model! You asked',
        )
    if len(done) == 3:
        return call("terminal", command="python3 hello.py")
    return call(
        "finish",
        message=(
            "I wrote hello.py and ran it (see the transcript and the workspace's files). "
            "This is the scripted demo model: set a real model and key in Settings to give the "
            "agent real work."
        ),
    )


def main() -> None:
    llm = ScriptedLLM()
    llm.responder = demo_reply
    llm.start()
    # Its sandboxes stop with it (a real control plane leaves them running across restarts).
    config = from_env(state_dir=STATE, stop_sandboxes_on_exit=True)
    key = asyncio.run(create_key(config, "demo"))
    server = Server(
        uvicorn.Config(
            build_app(config),
            host=config.host,
            port=config.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
    )

    # uvicorn hears signals only in the main thread, so the demo does: Ctrl+C, a SIGTERM (a
    # `kill`, a service manager) or a closed terminal ends the control plane, its sandboxes
    # with it; a second one does not wait for them. (Not a KeyboardInterrupt: one raised in
    # `thread.join()` marks the thread ended while it still runs, bpo-45274, and the process
    # would exit under the control plane before it has stopped anything.)
    def end(*_: Any) -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, end)
    thread = threading.Thread(target=server.run, name="control plane")
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.1)
    if not thread.is_alive():
        raise SystemExit("the control plane did not start (is the port taken? CONTROL_PLANE_PORT)")
    url = f"http://{config.host}:{config.port}"
    settings = {
        "llm_model": "openai/demo-model",
        "llm_base_url": llm.base_url("demo"),
        "llm_api_key": "demo-key-not-secret",
        "default_tools": ["terminal", "file_editor"],
    }
    httpx.patch(
        f"{url}/api/v1/settings", json=settings, headers={"Authorization": f"Bearer {key}"}
    ).raise_for_status()
    print(
        f"\nThe console: {url}/\nSign in with this key (user demo): {key}\n"
        "The model is the scripted demo model; Ctrl+C stops it all.\n",
        flush=True,
    )
    try:
        thread.join()
    finally:
        llm.stop()


if __name__ == "__main__":
    main()
