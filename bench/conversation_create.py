"""POST /api/conversations against a real agent server: server-side and client time.

    .venv/bin/python bench/conversation_create.py [--n 50] [--warmup 5] [--burners 0]
        [--no-message] [--skills] [--against DIR]

Starts `python -m agent_server` from this tree on a loopback port with its own state
directory, then creates `--n` conversations one after another (after `--warmup` uncounted
ones), each as a pooled start's create request has it (control_plane.create_request): its own
id, an agent whose LLM is 127.0.0.1:9 (never contacted: nothing runs) with the SDK's default
tools, a workspace, a secret, a title and an initial message that does not run. `--no-message`
leaves the message out; `--skills` puts an AGENTS.md and one skill in the workspace.

Prints one JSON object: the median and p95 of the server's own time (its access log line, from
the request's arrival to its answer) and of the client's (httpx, request to response), in ms,
with the 1-minute load before and after. `--burners K` runs K CPU-bound processes
(`while 1: pass`) meanwhile, to see what thread hops cost on a busy host.

`--against DIR` starts a second server from the tree DIR (a copy of the project as it was:
`python -m agent_server` run there) and sends the requests to the two in turn, so both see the
same load (on a shared machine the load moves more between runs than a change does); each
gets its own figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from tests.support.server import ServerProcess  # noqa: E402

TOOLS = ["terminal", "file_editor", "task_tracker"]
ACCESS = re.compile(r"POST /api/conversations (\d{3}) ([0-9.]+)ms")


class Server:
    """`python -m agent_server` run in the tree `tree`, with its own state directory."""

    def __init__(self, tree: Path, state_dir: Path, workspace: Path) -> None:
        self.tree = tree
        self.process = ServerProcess(
            state_dir, env={"AGENT_SERVER_WORKING_DIR": str(workspace)}, tree=tree
        ).start(timeout=60)
        self.log_path = self.process.log_path
        self.http = self.process.client()
        self.client_ms: list[float] = []

    def create(self, data: dict[str, Any], counted: bool) -> None:
        started = time.perf_counter()
        r = self.http.post("/api/conversations", json=data)
        elapsed = (time.perf_counter() - started) * 1000
        if r.status_code != 201:
            raise SystemExit(f"create answered {r.status_code}: {r.text[:500]}")
        if counted:
            self.client_ms.append(elapsed)

    def stop(self) -> None:
        self.http.close()
        self.process.stop()

    def server_ms(self, skip: int) -> list[float]:
        lines = ACCESS.findall(self.log_path.read_text(errors="replace"))
        return [float(ms) for status, ms in lines if status == "201"][skip:]


def body(working_dir: str, message: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "conversation_id": str(uuid.uuid4()),
        "agent": {
            "llm": {
                "model": "openai/bench-model",
                "base_url": "http://127.0.0.1:9/v1",
                "api_key": "sk-bench-never-used",
            },
            "tools": [{"name": t} for t in TOOLS],
        },
        "workspace": {"working_dir": working_dir},
        "secrets": {"GITHUB_TOKEN": "ghp_bench_secret_value_0123456789"},
        "title": "bench conversation",
    }
    if message:
        out["initial_message"] = {
            "content": [{"type": "text", "text": "Say hello."}],
            "run": False,
        }
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "p95": round(percentile(values, 0.95), 2),
        "min": round(min(values), 2),
    }


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--burners", type=int, default=0)
    parser.add_argument("--no-message", action="store_true")
    parser.add_argument("--skills", action="store_true")
    parser.add_argument("--against", type=Path, help="a second tree to compare with")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-create-") as tmp:
        root = Path(tmp)
        workspace = root / "workspace"
        workspace.mkdir()
        if args.skills:
            (workspace / "AGENTS.md").write_text("Be brief.\n")
            skill = workspace / ".agents" / "skills" / "hello"
            skill.mkdir(parents=True)
            (skill / "SKILL.md").write_text(
                "---\nname: hello\ndescription: Says hello.\ntriggers: [hello]\n---\nSay hi.\n"
            )
        trees = {"this": ROOT}
        if args.against is not None:
            trees["against"] = args.against.resolve()
        load_before = load1()
        servers: dict[str, Server] = {}
        burners: list[subprocess.Popen[bytes]] = []
        try:
            for name, tree in trees.items():
                servers[name] = Server(tree, root / f"state-{name}", workspace)
            for _ in range(args.burners):
                burners.append(subprocess.Popen([sys.executable, "-c", "while 1: pass"]))
            for i in range(args.warmup + args.n):
                for server in servers.values():
                    server.create(body(str(workspace), not args.no_message), i >= args.warmup)
                    time.sleep(0.01)
            load_after = load1()
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
            for server in servers.values():
                server.stop()
        print(
            json.dumps(
                {
                    "n": args.n,
                    "burners": args.burners,
                    "initial_message": not args.no_message,
                    "skills": args.skills,
                    "cpus": os.cpu_count(),
                    "load1_before": load_before,
                    "load1_after": load_after,
                    **{
                        name: {
                            "tree": str(server.tree),
                            "server_ms": summary(server.server_ms(args.warmup)),
                            "client_ms": summary(server.client_ms),
                        }
                        for name, server in servers.items()
                    },
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
