"""A burst of starts from one user (prints JSON).

    .venv/bin/python bench/burst.py [--starts 100] [--strategy NO_GROUPING] [--template on|off]
        [--warm-pool N] [--plane thread|own]

One control plane on SQLite (the default store), the process provider (forked from the sandbox
template when root with bubblewrap, as by default), one user: `--starts` start tasks POSTed at
once, each with a first message the scripted LLM answers with `finish`. For each task, from its
POST to its READY (or ERROR) as seen by a poller of the batch read every 50 ms; how many ended
each way and why; how many sandboxes they made. NO_GROUPING makes one sandbox per start (the
host's caps permitting: the memory floor, the per-user bound); ADD_TO_ANY puts them into the
sandboxes that are RUNNING (none when the burst comes, so most are new sandboxes too).

With `--warm-pool N` the control plane keeps N sandboxes parked, and the burst comes once the
pool is full and the machine quiet (its servers done rehearsing): up to N starts are claims.
`--plane own` runs the control plane as it is deployed, `python -m control_plane serve` in a
process of its own (`bench.capacity.Plane`); by default it is a thread of this process, as
the tests run it and as the figures before were measured, sharing the GIL with the bench's
client and scripted model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.capacity import Plane, subnet_for  # noqa: E402
from tests.control_plane.support import (  # noqa: E402
    OPERATOR,
    ControlPlane,
    configure_llm,
    make_config,
    warm_pool,
)
from tests.support.internet import Internet, forget_subnet  # noqa: E402
from tests.support.llm import ScriptedLLM, call  # noqa: E402
from tests.support.proc import cpu_seconds  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

BODY = {"initial_message": {"content": [{"type": "text", "text": "hi"}], "run": True}}


#: Clock ticks per second of /proc's CPU times.
TICKS = os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """The machine's busy CPU ticks (all but idle and iowait) and all ticks, since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def quiet() -> bool:
    """The machine's CPUs busy less than a tenth of half a second (a warm pool's servers done
    rehearsing)."""
    b0, t0 = machine_ticks()
    time.sleep(0.5)
    b1, t1 = machine_ticks()
    return (b1 - b0) < 0.1 * (t1 - t0)


async def burst(url: str, key: str, n: int) -> dict[str, Any]:
    async with httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
        limits=httpx.Limits(max_connections=n),
    ) as client:
        posted: dict[str, float] = {}

        async def one() -> None:
            began = time.monotonic()
            answer = await client.post("/api/v1/app-conversations", json=BODY)
            answer.raise_for_status()
            posted[answer.json()["id"]] = began

        began = time.monotonic()
        await asyncio.gather(*(one() for _ in range(n)))
        all_posted = time.monotonic() - began
        ended: dict[str, tuple[float, dict[str, Any]]] = {}
        running: dict[str, float] = {}  # each sandbox, when first seen RUNNING (from the burst)
        ids = list(posted)
        while len(ended) < n and time.monotonic() - began < 600:
            page = (await client.get("/api/v1/sandboxes/search", params={"limit": 100})).json()[
                "items"
            ]
            for sandbox in page:
                if sandbox["status"] == "RUNNING":
                    running.setdefault(sandbox["id"], time.monotonic() - began)
            for offset in range(0, n, 100):
                chunk = [i for i in ids[offset : offset + 100] if i not in ended]
                if not chunk:
                    continue
                found = (
                    await client.get("/api/v1/app-conversations/start-tasks", params={"ids": chunk})
                ).json()
                now = time.monotonic()
                for task in found:
                    if task and task["status"] in ("READY", "ERROR"):
                        ended[task["id"]] = (now - posted[task["id"]], task)
            await asyncio.sleep(0.05)
    seconds = sorted(s for s, _ in ended.values())
    up = sorted(running.values())
    statuses = Counter(t["status"] for _, t in ended.values())
    errors = Counter(
        str(t.get("detail"))[:120] for _, t in ended.values() if t["status"] == "ERROR"
    )
    return {
        "starts": n,
        "all_posted_s": round(all_posted, 2),
        "ready": statuses["READY"],
        "error": statuses["ERROR"],
        "unfinished": n - len(ended),
        "errors": dict(errors),
        "sandboxes": len({t["sandbox_id"] for _, t in ended.values() if t["sandbox_id"]}),
        "post_to_end_s": {
            "p50": round(statistics.median(seconds), 2),
            "p95": round(seconds[max(0, int(len(seconds) * 0.95) - 1)], 2),
            "max": round(seconds[-1], 2),
        }
        if seconds
        else None,
        "burst_to_sandbox_running_s": {
            "first": round(up[0], 2),
            "p50": round(statistics.median(up), 2),
            "max": round(up[-1], 2),
        }
        if up
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--strategy", default="NO_GROUPING")
    parser.add_argument("--template", choices=["on", "off"], default="on")
    parser.add_argument("--warm-pool", type=int, default=0)
    parser.add_argument(
        "--plane",
        choices=["thread", "own"],
        default="thread",
        help="the control plane in a thread of this process (as the tests run it, and the "
        "figures before) or in a process of its own, as deployed",
    )
    args = parser.parse_args()
    llm = ScriptedLLM().start()
    results: dict[str, Any] = {
        "load_before": round(os.getloadavg()[0], 1),
        "strategy": args.strategy,
        "template": args.template,
        "warm_pool": args.warm_pool,
        "plane": args.plane,
    }
    with tempfile.TemporaryDirectory() as tmp:
        plane = own_process(Path(tmp), args) if args.plane == "own" else in_thread(Path(tmp), args)
        try:
            key = plane.new_key("burst")
            with httpx.Client(
                base_url=plane.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as client:
                configure_llm(client, llm.base_url("burst"))
                client.patch("/api/v1/settings", json={"grouping_strategy": args.strategy})
            if args.warm_pool:  # full, and its servers done rehearsing, before the burst
                wait_for(
                    lambda: warm_pool(plane.url)["parked"] == args.warm_pool,
                    600,
                    what="the warm pool full",
                )
                wait_for(quiet, 120, what="the machine quiet")
                print("burst: the pool is full and quiet", file=sys.stderr, flush=True)
            for _ in range(args.starts):
                llm.script("burst", call("finish", message="done"))
            machine, own = machine_ticks()[0], cpu_seconds(plane.pid)
            results.update(asyncio.run(burst(plane.url, key, args.starts)))
            # CPU seconds the burst took (to its last READY, with the runs it started): the
            # machine's, and the control plane's process (this whole bench's with --plane thread)
            results["cpu_s"] = {
                "machine": round((machine_ticks()[0] - machine) / TICKS, 1),
                "control_plane": round(cpu_seconds(plane.pid) - own, 1),
            }
            if args.warm_pool:
                results["warm_pool_hits"] = warm_pool(plane.url)["hit"]
            results["load_after"] = round(os.getloadavg()[0], 1)
            print(json.dumps(results, indent=1), flush=True)
        finally:
            plane.stop(timeout=600)  # every sandbox of the burst stopped before the files go
            if isinstance(plane, Plane):
                forget_subnet(plane.subnet)
            llm.stop()


class InThread:
    """The control plane in this process (a thread of its own), as the tests run it."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.url = plane.url
        self.pid = os.getpid()

    def new_key(self, user: str) -> str:
        return self.plane.new_user(user)

    def stop(self, timeout: float) -> None:
        self.plane.stop(timeout=timeout)


def in_thread(tmp: Path, args: argparse.Namespace) -> InThread:
    config = make_config(
        tmp,
        max_sandboxes_per_user=args.starts + args.warm_pool + 10,
        sandbox_template=args.template == "on",
        warm_pool=args.warm_pool,
        operator_key=OPERATOR,
    )
    plane = ControlPlane(config).start()
    if args.template == "on":
        wait_for((tmp / "template" / "template.sock").exists, 120, what="the sandbox template")
    return InThread(plane)


def own_process(tmp: Path, args: argparse.Namespace) -> Plane:
    """`python -m control_plane serve`, as it is deployed (its CPU and GIL its own, not shared
    with this bench's client and scripted model)."""
    if args.template == "off":
        raise SystemExit("--plane own runs the template, as by default")
    internet = Internet.shared()
    running = args.starts + args.warm_pool + 10
    plane = Plane(
        tmp / "state",
        subnet_for(internet, running),
        internet.dns,
        running,
        CONTROL_PLANE_WARM_POOL=str(args.warm_pool),
        CONTROL_PLANE_OPERATOR_KEY=OPERATOR,
    )
    plane.start()
    return plane


if __name__ == "__main__":
    main()
