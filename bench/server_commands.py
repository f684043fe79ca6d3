"""What a command costs the agent server once it holds litellm (prints JSON).

    .venv/bin/python bench/server_commands.py [--commands 40]

A server started by itself (`python -m agent_server`) creates one conversation against the
scripted LLM and runs its initial message, so litellm is imported and the server is as large
as a sandbox's (its resident memory is printed). Then `true` is run `--commands` times, one
after another, through the conversation's `bash/execute_bash_command` (the server starts it with
`run_process`, as its git, ripgrep, hook and critic commands are started), each timed from
the client. On uvloop each start was a fork() of the whole server; on asyncio's own loop it
is a vfork() (`bench/spawn.py` times that alone).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from tests.support.api import wait_status  # noqa: E402
from tests.support.llm import ScriptedLLM, text  # noqa: E402
from tests.support.server import KEY, ServerProcess  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=40)
    args = parser.parse_args()
    llm = ScriptedLLM().start()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp) / "state").start()
        try:
            assert server.proc is not None
            client = httpx.Client(base_url=server.url, headers={"X-Session-API-Key": KEY})
            llm.script("bench", text("done"))
            created = client.post(
                "/api/conversations",
                json={
                    "agent": {
                        "llm": {
                            "model": "openai/test",
                            "base_url": llm.base_url("bench"),
                            "api_key": "sk-bench",
                        },
                        "tools": [],
                    },
                    "workspace": {"working_dir": str(Path(tmp) / "ws")},
                    "initial_message": {"content": [{"type": "text", "text": "hi"}], "run": True},
                },
            )
            if created.status_code != 201:
                raise SystemExit(f"{created.status_code} {created.text}\n{server.output()[-3000:]}")
            cid = created.json()["id"]
            wait_status(client, cid, "finished", timeout=60)
            taken = []
            for _ in range(args.commands):
                began = time.perf_counter()
                r = client.post(
                    f"/api/conversations/{cid}/bash/execute_bash_command", json={"command": "true"}
                )
                taken.append(time.perf_counter() - began)
                r.raise_for_status()
            print(
                json.dumps(
                    {
                        "commands": args.commands,
                        "server_rss_mib": round(rss_mib(server.proc.pid), 1),
                        "median_ms": round(1000 * statistics.median(taken), 2),
                        "p95_ms": round(1000 * sorted(taken)[int(0.95 * len(taken)) - 1], 2),
                        "load_1m": os.getloadavg()[0],
                    },
                    indent=1,
                )
            )
        finally:
            server.stop()
            llm.stop()


if __name__ == "__main__":
    main()
