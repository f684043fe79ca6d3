"""A sandbox's first conversation: memory, create-to-first-LLM-request, reply-to-ActionEvent.

    .venv/bin/python bench/first_request.py [--runs 3] [--steps 20]

Prints one JSON object. Each run starts a fresh server (`python -m agent_server`), lets it be
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
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from tests.support.api import events, wait_status  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call, text  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402


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


def body(llm: ScriptedLLM, key: str, workspace: Path, steps: int) -> dict[str, Any]:
    return {
        "agent": {
            "llm": {
                "model": "openai/test-model",
                "base_url": llm.base_url(key),
                "api_key": "sk-bench",
                "num_retries": 0,
            },
            "condenser": {"enabled": False},
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
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-"))
    normal = ScriptedLLM().start()
    raw = ScriptedLLM().start_raw()
    normal.responder = raw.responder = thinker(args.steps)
    runs = [one_run(tmp, normal, raw, args.steps, i) for i in range(args.runs)]
    normal.stop()
    raw.stop()
    summary = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    print(json.dumps({"median": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
