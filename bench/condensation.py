"""A long run with condensation on (prints JSON): server work per step early and late, and the
largest request the LLM got.

    .venv/bin/python bench/condensation.py [--steps 1000] [--max-tokens 8000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_server.agent.condenser import estimate_tokens  # noqa: E402
from tests.support.api import wait_status  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call, text  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402


def responder(steps: int):  # type: ignore[no-untyped-def]
    count = {"n": 0}

    def respond(key: str, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):  # a summary request
            return text(f"Summary: {count['n']} steps of echo so far, all fine.")
        count["n"] += 1
        if count["n"] > steps:
            return text("done")
        return call("terminal", command=f"echo step {count['n']} " + "x" * 100)

    return respond


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=8000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-condense-"))
    llm = ScriptedLLM().start()
    llm.responder = responder(args.steps)
    server = ServerProcess(tmp / "state").start()
    with server.client(timeout=120) as client:
        body = {
            "agent": {
                "llm": {
                    "model": "openai/test-model",
                    "base_url": llm.base_url("long"),
                    "api_key": "sk-bench",
                },
                "tools": [{"name": "terminal"}],
                "condenser": {"max_tokens": args.max_tokens},
            },
            "workspace": {"working_dir": str(tmp / "ws")},
            "stuck_detection": False,
            "max_iterations": args.steps + 10,
            "initial_message": {"content": [{"text": "echo a lot"}], "run": True},
        }
        cid = client.post("/api/conversations", json=body).json()["id"]
        status = wait_status(client, cid, timeout=1800)
        condensations = client.get(
            f"/api/conversations/{cid}/events/count", params={"kind__eq": "Condensation"}
        ).json()
    requests = llm.requests_for("long")
    timings = llm.timings["long"]
    agent = [i for i, r in enumerate(requests) if r.get("tools")]
    # Work per step: from the answer to one agent request to the arrival of the next request.
    steps = [
        (timings[i + 1][0] - timings[i][1]) * 1000
        for i in range(len(timings) - 1)
        if i in set(agent) and i + 1 in set(agent)
    ]
    sizes = [len(json.dumps(r)) for r in requests]
    print(
        json.dumps(
            {
                "status": status,
                "agent_requests": len(agent),
                "summary_requests": len(requests) - len(agent),
                "condensations": condensations,
                "server_ms_per_step_first10_median": round(statistics.median(steps[:10]), 2),
                "server_ms_per_step_last10_median": round(statistics.median(steps[-10:]), 2),
                "server_ms_per_step_median": round(statistics.median(steps), 2),
                "largest_request_bytes": max(sizes),
                "largest_request_est_tokens": max(
                    estimate_tokens(r["messages"], r.get("tools")) for r in requests
                ),
                "token_limit": args.max_tokens,
            },
            indent=2,
        )
    )
    server.stop()
    llm.stop()


if __name__ == "__main__":
    main()
