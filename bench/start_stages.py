"""Where a process sandbox's start goes: each stage of a start task to READY (prints JSON).

    .venv/bin/python bench/start_stages.py [--starts 10] [--template on|off] [--warm-pool N]
        [--poll]

Starts are made one after another through a real control plane (in this process), each into a
new sandbox (NO_GROUPING), as `bench/density.py` makes them. The control plane's own steps are
timed by wrapping them (monotonic clock, this process); the server's are read from the ready
file's time (written once uvicorn listens). Each stage's figure is the median over the starts
of the time from the previous mark to its own; `total` is the start request to the client
seeing READY: by default the client starts with `stream-start`, which says each stage as
it is stored; `--poll` starts with a POST and polls the task every 5 ms instead (each poll
is a request the control plane serves meanwhile, in this process).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane import start_conversation, start_tasks  # noqa: E402
from control_plane.agent_client import AgentClient  # noqa: E402
from control_plane.providers.pool import Pooled  # noqa: E402
from control_plane.providers.process import provider as process  # noqa: E402
from control_plane.providers.process import template  # noqa: E402
from control_plane.providers.process.network import ProcessNetwork  # noqa: E402
from control_plane.providers.process.parking import ProcessParking  # noqa: E402
from control_plane.providers.process.start import Starter  # noqa: E402
from control_plane.sandboxes.starts import Starts  # noqa: E402
from control_plane.store import tasks  # noqa: E402
from tests.control_plane.support import (  # noqa: E402
    OPERATOR,
    ControlPlane,
    configure_llm,
    make_config,
    warm_pool,
)
from tests.support.llm import ScriptedLLM, call  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

#: (monotonic time, mark) of the start being made.
marks: list[tuple[float, str]] = []


def mark(name: str) -> None:
    marks.append((time.monotonic(), name))


def timed(owner: Any, name: str, label: str, *, begin: bool = True) -> None:
    """`owner.name` (a coroutine function) marks `label` when it returns (and when it begins)."""
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if begin:
            mark(f"{label} begins")
        result = await original(*args, **kwargs)
        mark(label)
        return result

    setattr(owner, name, wrapper)


def instrument() -> None:
    timed(tasks, "insert", "task row stored", begin=False)
    timed(start_tasks.StartTaskService, "_placed", "placed (sandbox row, conversation row)")
    timed(start_conversation.ConversationStarts, "_configure_git", "git configured")
    timed(process.ProcessProvider, "create", "provider.create")
    timed(Pooled, "create", "pooled create")
    timed(ProcessParking, "hand_over", "parked server handed its keys")
    timed(ProcessParking, "until_started", "provider: started")
    timed(Starter, "_made", "bubblewrap made the sandbox")
    timed(template.Template, "fork", "template forked the server")
    timed(Starter, "_wait_ready", "ready file seen")  # a spawned server
    if hasattr(Starter, "_said_ready"):  # a forked server's ready pipe
        timed(Starter, "_said_ready", "ready pipe read")
    timed(Starter, "_wait_alive", "/alive answered")
    timed(ProcessNetwork, "lift", "network lifted to the user's policy")
    timed(Starts, "_started", "RUNNING stored", begin=False)
    timed(Starts, "wait_running", "wait_running returned", begin=False)
    timed(AgentClient, "create_conversation", "conversation created")
    original_set = tasks.set_status

    async def set_status(db: Any, task_id: str, status: Any, *args: Any, **kwargs: Any) -> Any:
        stored = await original_set(db, task_id, status, *args, **kwargs)
        mark(f"stage {status.value} stored")
        return stored

    tasks.set_status = set_status


def run(args: argparse.Namespace) -> dict[str, Any]:
    instrument()
    llm = ScriptedLLM().start()
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(
            Path(tmp),
            max_sandboxes_per_user=args.starts + 5,
            sandbox_template=args.template == "on",
            warm_pool=args.warm_pool,
            operator_key=OPERATOR,
        )
        plane = ControlPlane(config).start()
        sock = Path(tmp) / "template" / "template.sock"
        starts: list[list[tuple[str, float]]] = []
        try:
            if args.template == "on":
                wait_for(sock.exists, 120, what="the sandbox template")
            client = plane.client(plane.new_user("stages"))
            configure_llm(client, llm.base_url("stages"), tools=["terminal"])
            client.patch("/api/v1/settings", json={"grouping_strategy": "NO_GROUPING"})
            for _ in range(args.starts):
                if args.warm_pool:  # each start finds the pool refilled since the last
                    wait_for(
                        lambda: warm_pool(plane.url)["parked"] == args.warm_pool,
                        120,
                        interval=0.01,
                    )
                llm.script("stages", call("finish", message="done"))
                marks.clear()
                began_wall, began = time.time(), time.monotonic()
                body = {
                    "initial_message": {
                        "role": "user",
                        "content": [{"type": "text", "text": "hello"}],
                        "run": True,
                    }
                }
                task = (follow if args.poll else stream)(client, body)
                mark("client saw READY")
                if task["status"] != "READY":
                    raise RuntimeError(task["detail"])
                ready = Path(tmp) / "sandboxes" / task["sandbox_id"] / process.READY_FILE
                with_server = [
                    *marks,
                    (began + ready.stat().st_mtime - began_wall, "server wrote its ready file"),
                ]
                starts.append([(name, t - began) for t, name in sorted(with_server)])
        finally:
            plane.stop()
            llm.stop()
    return {
        "template": args.template,
        "warm_pool": args.warm_pool,
        "starts": len(starts),
        **summarise(starts),
    }


def stream(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """The start made with `stream-start`: its task as the stream shows it when it ends (each
    element is on a line of its own)."""
    task: dict[str, Any] = {}
    with client.stream("POST", "/api/v1/app-conversations/stream-start", json=body) as r:
        r.raise_for_status()
        mark("start request answered")  # its head, sent with the task as stored
        for line in r.iter_lines():
            if not line.strip(" [],"):
                continue
            task = json.loads(line.strip(" [],"))
            if task["status"] in ("READY", "ERROR"):
                break
    return task


def follow(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """The start made with a POST, its task polled every 5 ms until it ends."""
    r = client.post("/api/v1/app-conversations", json=body)
    r.raise_for_status()
    mark("start request answered")
    task_id = r.json()["id"]

    def done() -> dict[str, Any] | None:
        task: dict[str, Any] = client.get(
            "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
        ).json()[0]
        return task if task["status"] in ("READY", "ERROR") else None

    found: dict[str, Any] = wait_for(done, 120, interval=0.005)
    return found


def summarise(starts: list[list[tuple[str, float]]]) -> dict[str, Any]:
    """Each mark's median time since the previous one (in the order of the first start), and
    since the start request."""
    order = [name for name, _ in starts[0]]
    stages: dict[str, dict[str, float]] = {}
    for i, name in enumerate(order):
        deltas, sinces = [], []
        for start in starts:
            found = dict(start)
            if name not in found:
                continue
            previous = dict(start).get(order[i - 1], 0.0) if i else 0.0
            deltas.append(found[name] - previous)
            sinces.append(found[name])
        stages[name] = {
            "ms": round(1000 * statistics.median(deltas), 1),
            "at_ms": round(1000 * statistics.median(sinces), 1),
        }
    totals = sorted(dict(start)["client saw READY"] for start in starts)
    p95 = totals[min(len(totals) - 1, int(round(0.95 * (len(totals) - 1))))]
    return {
        "stages": stages,
        "total_s": {"median": round(statistics.median(totals), 3), "p95": round(p95, 3)},
        "each_s": [round(dict(start)["client saw READY"], 3) for start in starts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--template", choices=["on", "off"], default="on")
    parser.add_argument("--warm-pool", type=int, default=0, help="process sandboxes kept parked")
    parser.add_argument(
        "--poll",
        action="store_true",
        help="start with POST /app-conversations and poll the task every 5 ms "
        "(default: stream-start, which says each stage as it is stored)",
    )
    print(json.dumps(run(parser.parse_args()), indent=1))


if __name__ == "__main__":
    main()
