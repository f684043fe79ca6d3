"""A sandbox's first conversation: memory, create-to-first-LLM-request, reply-to-ActionEvent.

    .venv/bin/python bench/first_request.py [--runs 3] [--steps 20] [--at-once-runs 5]
        [--bytecode-as-is]

Prints one JSON object. First the row of a server started by itself (`make run`, the
OpenHands SDK's case), `at_once`: per run, a fresh server is spawned, /health polled every
2 ms over a raw socket, and as soon as it answers a conversation with the SDK's default tools
(terminal, file_editor, task_tracker) is created whose initial message runs at once:

- spawn_to_health_s, create_to_first_request_s and their sum spawn_to_first_request_s (the
  LLM receiving the first completion request), and the server's CPU seconds (user + system)
  at /health and at that first request: on a busy machine the CPU figure says more about the
  server than the wall-clock one (the 1-minute load is printed beside them).

The project's bytecode is brought up to date first, as for bench/startup.py (which says why).

Then the other rows: each run starts a fresh server (`python -m agent_server`), lets it be
up for a second, then creates one conversation whose initial message runs at once against
the scripted LLM (tests/support/llm.py):

- create_to_first_request_s: from sending the create request to the LLM receiving the first
  completion request (litellm's import included when it was not done before); _warm_s: the
  same for the second conversation;
- rss_mib: the server's resident memory idle (after that second), and once the conversation
  has run `--steps` steps (the think tool, so the figure is the server's, not a tool's);
- reply_to_action_ms: from the LLM finishing its answer to the ActionEvent's timestamp, per
  step (median), against the usual scripted LLM (uvicorn: TCP_NODELAY, one write) and against
  one that answers the way Python's http.server does (headers and body in two writes, Nagle
  on, keep-alive), where a client that delays its ACK stalls about 40 ms per reply.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from bench.startup import compile_project, spawn_server  # noqa: E402
from tests.support.api import events, wait_status  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call, free_port, text  # noqa: E402
from tests.support.proc import cpu_seconds  # noqa: E402
from tests.support.server import KEY, ServerProcess  # noqa: E402

#: The OpenHands SDK's default agent's tools (its browser left out).
SDK_TOOLS = ["terminal", "file_editor", "task_tracker"]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def thinker(steps: int):  # type: ignore[no-untyped-def]
    counts: dict[str, int] = {}

    def respond(key: str, body: dict[str, Any]) -> Reply:
        n = counts[key] = counts.get(key, 0) + 1
        return text("done") if n > steps else call("think", thought=f"step {n}")

    return respond


def health_status(port: int) -> int | None:
    """GET /health over a raw socket (no client library's cost), or None if nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            head = s.recv(64)
    except OSError:
        return None
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def at_once_run(tmp: Path, llm: ScriptedLLM, run: int) -> dict[str, Any]:
    """Spawn, /health, then at once a conversation with the SDK's tools: its first request."""
    port = free_port()
    env = {
        **os.environ,
        "SESSION_API_KEY": KEY,
        "AGENT_SERVER_PORT": str(port),
        "AGENT_SERVER_STATE_DIR": str(tmp / f"once{run}"),
        "AGENT_SERVER_LOG_LEVEL": "warning",
    }
    key = f"once{run}"
    payload = body(llm, key, tmp / "ws", 1, SDK_TOOLS)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-Session-API-Key": KEY})
    started = time.monotonic()
    proc = spawn_server(env)
    try:
        while health_status(port) != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            if time.monotonic() - started > 60:
                raise RuntimeError("no /health after 60 s")
            time.sleep(0.002)
        healthy = time.monotonic()
        cpu_health = cpu_seconds(proc.pid)
        r = client.post("/api/conversations", json=payload)
        r.raise_for_status()
        while not llm.timings[key] and time.monotonic() < healthy + 60:
            time.sleep(0.001)
        cpu_first = cpu_seconds(proc.pid)
        first = llm.timings[key][0][0]
        wait_status(client, r.json()["id"], timeout=60)
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
    return {
        "spawn_to_health_s": round(healthy - started, 3),
        "create_to_first_request_s": round(first - healthy, 3),
        "spawn_to_first_request_s": round(first - started, 3),
        "cpu_s_at_health": round(cpu_health, 2),
        "cpu_s_at_first_request": round(cpu_first, 2),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def body(
    llm: ScriptedLLM, key: str, workspace: Path, steps: int, tools: list[str] | None = None
) -> dict[str, Any]:
    return {
        "agent": {
            "llm": {
                "model": "openai/test-model",
                "base_url": llm.base_url(key),
                "api_key": "sk-bench",
                "num_retries": 0,
            },
            "condenser": {"enabled": False},
            **({"tools": [{"name": name} for name in tools]} if tools is not None else {}),
        },
        "workspace": {"working_dir": str(workspace)},
        "max_iterations": steps + 5,
        "stuck_detection": False,
        "initial_message": {"content": [{"text": "think"}], "run": True},
    }


def reply_to_action_ms(client: httpx.Client, llm: ScriptedLLM, key: str, cid: str) -> float:
    actions = events(client, cid, "ActionEvent")
    stamps = [datetime.fromisoformat(e["timestamp"]).timestamp() for e in actions]
    answered = llm.answered[key][: len(stamps)]
    return round(statistics.median((a - r) * 1000 for a, r in zip(stamps, answered)), 1)


def one_run(
    tmp: Path, normal: ScriptedLLM, raw: ScriptedLLM, steps: int, run: int
) -> dict[str, Any]:
    server = ServerProcess(tmp / f"state{run}").start()
    pid = server.proc.pid  # type: ignore[union-attr]
    time.sleep(1.0)  # up for a second, as a sandbox is before its first conversation
    out: dict[str, Any] = {"rss_idle_mib": rss_mib(pid)}
    with server.client(timeout=120) as client:
        key = f"first{run}"
        started = time.monotonic()
        r = client.post("/api/conversations", json=body(normal, key, tmp / "ws", steps))
        r.raise_for_status()
        cid = r.json()["id"]
        deadline = time.monotonic() + 60
        while not normal.timings[key] and time.monotonic() < deadline:
            time.sleep(0.001)
        out["create_to_first_request_s"] = round(normal.timings[key][0][0] - started, 3)
        wait_status(client, cid, timeout=120)
        out["rss_after_run_mib"] = rss_mib(pid)
        out["reply_to_action_ms_nodelay_llm"] = reply_to_action_ms(client, normal, key, cid)
        key = f"raw{run}"
        started = time.monotonic()
        r = client.post("/api/conversations", json=body(raw, key, tmp / "ws", steps))
        cid = r.json()["id"]
        while not raw.timings[key] and time.monotonic() < started + 60:
            time.sleep(0.001)
        out["create_to_first_request_warm_s"] = round(raw.timings[key][0][0] - started, 3)
        wait_status(client, cid, timeout=120)
        out["reply_to_action_ms_http_server_llm"] = reply_to_action_ms(client, raw, key, cid)
        out["rss_after_two_runs_mib"] = rss_mib(pid)
    server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--at-once-runs", type=int, default=5, help="0: skip that row")
    parser.add_argument("--bytecode-as-is", action="store_true", help="no compile_project first")
    args = parser.parse_args()
    if not args.bytecode_as_is:
        compile_project()
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-"))
    normal = ScriptedLLM().start()
    raw = ScriptedLLM().start_raw()
    normal.responder = raw.responder = thinker(args.steps)
    out: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "bytecode": "as is" if args.bytecode_as_is else "up to date",
    }
    if args.at_once_runs:
        once = [at_once_run(tmp, normal, i) for i in range(args.at_once_runs)]
        out["at_once"] = {
            "median": {name: statistics.median(r[name] for r in once) for name in once[0]},
            "runs": once,
        }
    runs = [one_run(tmp, normal, raw, args.steps, i) for i in range(args.runs)]
    normal.stop()
    raw.stop()
    if runs:
        out["median"] = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
        out["runs"] = runs
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
