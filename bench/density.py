"""Sandboxes per host: memory per sandbox, start to READY, and the first model call (prints JSON).

    .venv/bin/python bench/density.py [--sandboxes 10] [--steps 20] [--provider process] \
        [--template on|off] [--warm-pool N]

Everything goes through a real control plane (in this process) and real sandboxes. Starts are
made one after another, each into a new sandbox (NO_GROUPING), each with an initial message
that runs at once against the scripted LLM:

- start_to_ready_s: the start request to its start task's READY (median, p95, each); with
  `--warm-pool N`, each start claims a parked sandbox (the bench waits for the pool to be full
  again before each; `warm_pool_hits` counts the claims);
- start_to_first_request_s: the start request to the scripted LLM receiving the sandbox's first
  completion request (the sandbox's boot, litellm's import and the first step's own work);
- pss_idle_mib: each sandbox's unique memory once all are up and idle, summed over its
  processes from /proc/<pid>/smaps_rollup (PSS: shared pages divided among their sharers,
  so N sandboxes that share a page pay 1/N of it each); rss_idle_mib the same as RSS;
- pss_after_steps_mib: the same after one conversation of each sandbox ran `--steps` steps
  (the think tool, so the figure is the server's own, not a tool's);
- hibernate_s, hibernated_pss_mib, hibernated_resume_to_running_s and
  hibernated_resume_to_first_request_s: each sandbox then paused into hibernation, what its
  processes hold meanwhile, its resume to RUNNING and to its conversation's next model call.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane.providers.process.environment import ready_marker  # noqa: E402
from core import namespaces, processes  # noqa: E402
from tests.control_plane.support import (  # noqa: E402
    OPERATOR,
    ControlPlane,
    configure_llm,
    make_config,
    warm_pool,
)
from tests.support.llm import Reply, ScriptedLLM, call, text  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (by parent links in /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def sandbox_tree(pid: int) -> list[int]:
    """A sandbox's processes: those below its first, and those in its pid namespace (a server
    forked from the template has neither bubblewrap nor the control plane for a parent)."""
    found = set(tree(pid))
    ours = namespaces.namespace(os.getpid())
    for below in list(found):
        if (inside := namespaces.namespace(below)) not in (None, ours):
            found |= set(namespaces.members(inside))
    return sorted(found)


def memory_kib(pids: list[int]) -> dict[str, int]:
    """Pss, Rss and the private part (Uss: what the sandbox alone holds, which N more
    sandboxes cost N times) summed over `pids` (kB, as smaps_rollup says)."""
    totals = {"Pss": 0, "Rss": 0, "Private_Clean": 0, "Private_Dirty": 0}
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, rest = line.partition(":")
            if name in totals:
                totals[name] += int(rest.split()[0])
    return totals


def sandbox_pids(plane: ControlPlane) -> dict[str, int]:
    """Each sandbox's first process: bubblewrap's for an isolated one (its pid 1, the holder
    and the server are below it; the ready file has the server's pid in its own namespace
    only), the server's otherwise."""
    found = {}
    for ready in sorted((plane.config.state_dir / "sandboxes").glob("*/ready.json")):
        leaders = [p.pid for p in processes.with_argument(str(ready)) if p.pid == p.pgid]
        found[ready.parent.name] = (
            leaders[0] if leaders else int(json.loads(ready.read_text())["pid"])
        )
    return found


def summary(values: list[float], digits: int = 3) -> dict[str, Any]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {
        "median": round(statistics.median(ordered), digits),
        "p95": round(p95, digits),
        "each": [round(v, digits) for v in values],
    }


def thinker(steps: int):  # type: ignore[no-untyped-def]
    counts: dict[str, int] = {}

    def respond(key: str, body: dict[str, Any]) -> Reply:
        n = counts[key] = counts.get(key, 0) + 1
        return text("done") if n > steps else call("think", thought=f"step {n}")

    return respond


def run(args: argparse.Namespace) -> dict[str, Any]:
    llm = ScriptedLLM().start()
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(
            Path(tmp),
            max_sandboxes_per_user=args.sandboxes + 5,
            sandbox_provider=args.provider,
            sandbox_template=args.template == "on",
            sandbox_hibernation="always",  # the hibernation rows pause each one
            warm_pool=args.warm_pool,
            operator_key=OPERATOR,
        )
        plane = ControlPlane(config).start()
        template = Path(tmp) / "template" / "template.sock"
        try:
            if args.template == "on" and args.provider == "process":
                wait_for(template.exists, 120, what="the sandbox template")
            key = plane.new_user("density")
            client = plane.client(key)
            configure_llm(client, llm.base_url("density"), tools=["terminal"])
            client.patch("/api/v1/settings", json={"grouping_strategy": "NO_GROUPING"})
            ready_s, first_s, conversations = [], [], []
            for _ in range(args.sandboxes):
                if args.warm_pool:  # a start in a row finds the pool refilled since the last
                    wait_for(
                        lambda: warm_pool(plane.url)["parked"] == args.warm_pool,
                        120,
                        interval=0.01,
                    )
                llm.script("density", call("finish", message="done"))
                seen = len(llm.timings["density"])
                began = time.monotonic()
                r = client.post(
                    "/api/v1/app-conversations",
                    json={
                        "initial_message": {
                            "role": "user",
                            "content": [{"type": "text", "text": "hello"}],
                            "run": True,
                        }
                    },
                )
                r.raise_for_status()
                task_id = r.json()["id"]

                def done(task_id: str = task_id) -> dict[str, Any] | None:
                    task: dict[str, Any] = client.get(
                        "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
                    ).json()[0]
                    return task if task["status"] in ("READY", "ERROR") else None

                task = wait_for(done, 120, interval=0.005)
                if task["status"] != "READY":
                    raise RuntimeError(task["detail"])
                ready_s.append(time.monotonic() - began)
                wait_for(lambda seen=seen: len(llm.timings["density"]) > seen, 60, interval=0.005)
                first_s.append(llm.timings["density"][seen][0] - began)
                conversations.append(task["app_conversation_id"])
            hits = warm_pool(plane.url)["hit"]
            pids = sandbox_pids(plane)
            time.sleep(args.settle)  # idle: background imports done, nothing running
            idle = [memory_kib(sandbox_tree(pid)) for pid in pids.values()]
            loaders = [
                p.pid for p in processes.with_argument(str(template)) if p.ppid == os.getpid()
            ]
            template_kib = memory_kib(loaders)

            for conversation_id in conversations:  # one at a time: the thinker counts per key
                llm.responder = thinker(args.steps)
                asked = len(llm.timings["density"])
                r = client.post(
                    f"/api/v1/app-conversations/{conversation_id}/send-message",
                    json={
                        "role": "user",
                        "content": [{"type": "text", "text": "think"}],
                        "run": True,
                    },
                )
                r.raise_for_status()
                wait_for(
                    lambda asked=asked, cid=conversation_id: (
                        len(llm.timings["density"]) > asked + args.steps
                        and client.get("/api/v1/app-conversations", params={"ids": cid})
                        .json()[0]["execution_status"]
                        .upper()
                        in ("FINISHED", "IDLE")
                    ),
                    300,
                    interval=0.05,
                )
            time.sleep(args.settle)
            busy = [memory_kib(sandbox_tree(pid)) for pid in pids.values()]
            hibernated = hibernation(plane, client, llm, conversations)
        finally:
            plane.stop()
            llm.stop()
    return {
        "provider": args.provider,
        "sandboxes": args.sandboxes,
        "warm_pool": args.warm_pool,
        "warm_pool_hits": hits,
        "start_to_ready_s": summary(ready_s),
        "start_to_first_request_s": summary(first_s),
        "pss_idle_mib": summary([m["Pss"] / 1024 for m in idle], 1),
        "rss_idle_mib": summary([m["Rss"] / 1024 for m in idle], 1),
        "uss_idle_mib": summary(
            [(m["Private_Clean"] + m["Private_Dirty"]) / 1024 for m in idle], 1
        ),
        "pss_idle_total_mib": round(sum(m["Pss"] for m in idle) / 1024, 1),
        "template": args.template,
        "template_pss_mib": round(template_kib["Pss"] / 1024, 1),
        f"pss_after_{args.steps}_steps_mib": summary([m["Pss"] / 1024 for m in busy], 1),
        f"uss_after_{args.steps}_steps_mib": summary(
            [(m["Private_Clean"] + m["Private_Dirty"]) / 1024 for m in busy], 1
        ),
        **hibernated,
    }


def hibernation(
    plane: ControlPlane, client: Any, llm: ScriptedLLM, conversations: list[str]
) -> dict[str, Any]:
    """Each sandbox paused into hibernation, then resumed: the pause's time, the memory its
    processes hold meanwhile (every process carrying its mark), the resume to RUNNING, and
    the resume to its conversation's next model call."""
    sandboxes = {
        cid: client.get("/api/v1/app-conversations", params={"ids": cid}).json()[0]["sandbox_id"]
        for cid in conversations
    }
    pause_s, resume_s, first_s, left = [], [], [], []
    for sid in sandboxes.values():
        began = time.monotonic()
        client.post(f"/api/v1/sandboxes/{sid}/pause", timeout=120).raise_for_status()
        pause_s.append(time.monotonic() - began)
    for sid in sandboxes.values():
        marker = ready_marker(plane.config.state_dir / "sandboxes" / sid)
        left.append(memory_kib(marked(marker))["Pss"] / 1024)
    for cid, sid in sandboxes.items():
        llm.responder = None
        llm.script("density", call("finish", message="again"))
        asked = len(llm.timings["density"])
        began = time.monotonic()
        client.post(f"/api/v1/sandboxes/{sid}/resume", timeout=120).raise_for_status()
        resume_s.append(time.monotonic() - began)
        client.post(
            f"/api/v1/app-conversations/{cid}/send-message",
            json={"role": "user", "content": [{"type": "text", "text": "again"}], "run": True},
        ).raise_for_status()
        wait_for(lambda asked=asked: len(llm.timings["density"]) > asked, 60, interval=0.005)
        first_s.append(llm.timings["density"][asked][0] - began)
    return {
        "hibernate_s": summary(pause_s),
        "hibernated_pss_mib": summary(left, 1),
        "hibernated_resume_to_running_s": summary(resume_s),
        "hibernated_resume_to_first_request_s": summary(first_s),
    }


def marked(marker: bytes) -> list[int]:
    """Every process whose environment carries `marker` (each of a sandbox's does)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--provider", default="process")
    parser.add_argument(
        "--warm-pool",
        type=int,
        default=0,
        help="sandboxes kept parked (each start waits until the pool is full again)",
    )
    parser.add_argument(
        "--template",
        choices=["on", "off"],
        default="on",
        help="process sandboxes forked from the template (root, bubblewrap)",
    )
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds sandboxes sit idle before memory is read"
    )
    print(json.dumps(run(parser.parse_args()), indent=1))


if __name__ == "__main__":
    main()
