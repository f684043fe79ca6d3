"""The cost of isolating process sandboxes (prints JSON): for each of bubblewrap and no
isolation, a start request to READY on a new sandbox (one after another), then the memory of
each of those sandboxes while all of them run idle (RSS and PSS summed over its processes,
from /proc/<pid>/smaps_rollup; PSS shares the pages of one interpreter among them).

    .venv/bin/python bench/isolation.py [--sandboxes 10] [--launcher-only]

Everything is real: a control plane, agent-server sandboxes, the scripted LLM. Run as root,
isolated sandboxes also run each as a uid of its own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane.config import Config  # noqa: E402
from control_plane.providers.process import cgroups  # noqa: E402
from control_plane.providers.process.isolation import Command, choose  # noqa: E402
from control_plane.providers.process.spawn import spawn, wait  # noqa: E402
from control_plane.sandboxes.provider import DEFAULT_LIMITS  # noqa: E402
from tests.control_plane.support import (  # noqa: E402
    ControlPlane,
    configure_llm,
    launcher_pid,
    make_config,
    wait_for,
)
from tests.support.llm import ScriptedLLM  # noqa: E402


def figures(samples: list[float], scale: float = 1.0, digits: int = 1) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": round(statistics.median(ordered) * scale, digits),
        "p90": round(ordered[math.ceil(0.9 * len(ordered)) - 1] * scale, digits),
        "max": round(ordered[-1] * scale, digits),
    }


def memory_kib(pid: int) -> dict[str, int]:
    """Rss and Pss of one process (kiB); zeros for one that just ended."""
    found = {"Rss": 0, "Pss": 0}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in found:
                found[name] = int(rest.split()[0])
    except OSError:
        pass
    return found


def tree(leader: int) -> list[int]:
    found, parents = [leader], {leader}
    while more := [p for p in _all() if procfs_parent(p) in parents and p not in found]:
        found += more
        parents.update(more)
    return found


def _all() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def procfs_parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def measure(root: Path, llm: ScriptedLLM, isolation: str, n: int) -> dict[str, Any]:
    config = make_config(root, sandbox_isolation=isolation, shared_host=True)
    plane = ControlPlane(config).start()
    try:
        client = plane.client(plane.new_user("bench"))
        configure_llm(
            client, llm.base_url("idle"), tools=["terminal"], grouping_strategy="NO_GROUPING"
        )
        ready, sids = [], []
        for _ in range(n):
            began = time.monotonic()
            task_id = client.post("/api/v1/app-conversations", json={}).json()["id"]

            def done(task_id: str = task_id) -> dict[str, Any] | None:
                task: dict[str, Any] = client.get(
                    "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
                ).json()[0]
                return task if task["status"] in ("READY", "ERROR") else None

            task = wait_for(done, 120, interval=0.01)
            if task["status"] != "READY":
                raise RuntimeError(task["detail"])
            ready.append(time.monotonic() - began)
            sids.append(task["sandbox_id"])
        time.sleep(2)  # idle: what a sandbox holds between runs (a bench may wait for time)
        per_sandbox: list[dict[str, int]] = []
        server_rss: list[int] = []
        for sid in sids:
            leader = launcher_pid(config.state_dir / "sandboxes" / sid)
            assert leader is not None
            total = {"Rss": 0, "Pss": 0, "processes": 0}
            for pid in tree(leader):
                used = memory_kib(pid)
                total["Rss"] += used["Rss"]
                total["Pss"] += used["Pss"]
                total["processes"] += 1
                if (
                    Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                    == sys.executable.encode()
                ):
                    server_rss.append(used["Rss"])
            per_sandbox.append(total)
        specs = client.get("/api/v1/sandbox-specs/search").json()["items"][0]["description"]
        return {
            "sandbox": specs,
            "sandboxes": n,
            "start_to_ready_s": figures(ready, digits=2),
            "rss_per_sandbox_mib": figures([float(s["Rss"]) for s in per_sandbox], 1 / 1024),
            "pss_per_sandbox_mib": figures([float(s["Pss"]) for s in per_sandbox], 1 / 1024),
            "agent_server_rss_mib": figures([float(r) for r in server_rss], 1 / 1024),
            "processes_per_sandbox": figures([float(s["processes"]) for s in per_sandbox]),
            "uid_per_sandbox": len(
                {(config.state_dir / "sandboxes" / s).stat().st_uid for s in sids}
            )
            == n,
        }
    finally:
        plane.stop()


def launcher(runs: int = 30) -> dict[str, Any]:
    """`true` run directly, through bubblewrap as a sandbox runs, and (as root) that in a
    cgroup of its own made for it (ms): the fixed cost of making the namespaces and the
    limits, apart from the agent server's own start; and the group's removal after."""
    isolation = choose("bubblewrap", hidden=[], uids=Config().sandbox_uids)
    assert isolation is not None
    groups = cgroups.find()
    times: dict[str, list[float]] = {"direct": [], "bubblewrap": []}
    if isinstance(groups, cgroups.Cgroups):
        times["bubblewrap_in_cgroup"] = []
    removals: list[float] = []  # a group goes once its last process is reaped
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sandbox"
        (root / "workspace").mkdir(parents=True)
        uid = isolation.own(root)
        for i in range(runs):
            for how in times:
                began = time.monotonic()
                command = (
                    Command(["/bin/true"], {})
                    if how == "direct"
                    else isolation.command(root, ["/bin/true"], uid, {})
                )
                name, argv = f"bench-{os.getpid()}-{i}", command.argv
                if how == "bubblewrap_in_cgroup" and isinstance(groups, cgroups.Cgroups):
                    argv = cgroups.enter(groups.create(name, DEFAULT_LIMITS), argv)
                pid = spawn(argv, {"PATH": os.defpath}, output=2, files=command.files)
                wait(pid, 30)
                times[how].append(time.monotonic() - began)
                if how == "bubblewrap_in_cgroup" and isinstance(groups, cgroups.Cgroups):
                    began = time.monotonic()
                    groups.remove(name)
                    removals.append(time.monotonic() - began)
    return {
        **{how: figures(samples, 1000) for how, samples in times.items()},
        **({"cgroup_removal": figures(removals, 1000)} if removals else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxes", type=int, default=10)
    parser.add_argument(
        "--launcher-only",
        action="store_true",
        help="only the fixed cost of bubblewrap and the cgroup",
    )
    args = parser.parse_args()
    if args.launcher_only:
        print(json.dumps({"load_average": os.getloadavg(), "launcher_ms": launcher(100)}))
        return
    llm = ScriptedLLM().start()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # Alternated, so a machine's changing load falls on both.
            for i, isolation in enumerate(("off", "bubblewrap", "off", "bubblewrap")):
                figured = measure(Path(tmp) / f"cp{i}", llm, isolation, args.sandboxes)
                results.setdefault(isolation, []).append(figured)
    finally:
        llm.stop()
    print(
        json.dumps(
            {"load_average": os.getloadavg(), "launcher_ms": launcher(), **results}, indent=2
        )
    )


if __name__ == "__main__":
    main()
