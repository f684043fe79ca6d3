"""How long a process sandbox's stop takes on a host with many processes (prints JSON).

    .venv/bin/python bench/stop.py [--sandboxes 8] [--extra 3000] [--isolation bubblewrap]
        [--proc] [--pause [--rounds 3]]

`--sandboxes` idle sandboxes started through the process provider as a root control plane
runs them (bubblewrap, a cgroup per sandbox; no template, network namespace or disk, which a
stop does not touch; `--isolation gvisor` takes one sandbox only: without a network namespace
each, two runsc sandboxes clash on their control socket), after `--extra` `sleep` processes
were started on the host (killed at the end): then each sandbox stopped in turn
(`Stopper.stop`, what a delete or a hibernation runs first: SIGTERM, the grace period, the
kill, the launcher reaped) and timed, and then destroyed (its files archived, its cgroups
removed). `--proc` stops them as a host without a cgroup v2 group per sandbox does (the
sandbox's processes found in /proc): the figure before. Also one read of /proc (every
process's stat), which that way reads several times a stop, and how many of the launchers'
descendants are outside their sandbox's cgroup v2 group (which the stop kills whole).

`--pause` times a plain pause and resume instead (`Signals.pause`, SIGSTOP to everything of
the sandbox and the wait until it is all stopped; `Signals.resume`, SIGCONT), `--rounds` of
each per sandbox, which are then destroyed untimed; `--proc` finds the sandbox's processes in
/proc there too (its pid namespace: found once a pause, its members read on each look).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane.config import Config  # noqa: E402
from control_plane.providers.process import cgroups, gvisor  # noqa: E402
from control_plane.providers.process.isolation import Isolation, choose  # noqa: E402
from control_plane.providers.process.leader import Leader  # noqa: E402
from control_plane.providers.process.provider import ProcessProvider  # noqa: E402
from control_plane.providers.process.settings import ProcessSettings  # noqa: E402
from control_plane.sandboxes.provider import Handle, Launch  # noqa: E402
from core import processes  # noqa: E402


def figures(samples: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "min_ms": round(ms[0], 1),
        "max_ms": round(ms[-1], 1),
    }


def outside_leaf(launch: Launch, handle: Handle) -> int:
    """How many of the launcher's descendants (by /proc's parents) are not in the sandbox's
    cgroup v2 group, which a stop kills whole: none, or the stop misses them."""
    leader = Leader.of(handle).pid
    leaf = cgroups.leaf_of(leader, launch.sandbox_id)
    if leaf is None:
        return -1
    found, parents = {leader}, {p.pid: p.ppid for p in processes.list_processes() if p.alive}
    while more := {p for p, pp in parents.items() if pp in found and p not in found}:
        found |= more
    return len(found - leaf.pids())


def crowd(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` idle processes on the host, as many sandboxes' would be."""
    return [
        subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]


async def measure(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    groups = cgroups.find()
    if isinstance(groups, str):
        raise SystemExit(f"no cgroups: {groups}")
    isolation: Isolation | None = None
    if args.isolation == "bubblewrap":
        isolation = choose("bubblewrap", hidden=[base], uids=Config().sandbox_uids)
    elif args.isolation == "gvisor":
        isolation = gvisor.choose(hidden=[base], uids=Config().sandbox_uids)
    provider = ProcessProvider(
        ProcessSettings(base / "archives", shared_host=True, stop_grace=args.grace),
        isolation=isolation,
        groups=groups,
    )
    (base / "sandboxes").mkdir()
    made: list[tuple[Launch, Handle]] = []
    try:
        for _ in range(args.sandboxes):
            sandbox_id = uuid.uuid4().hex
            launch = Launch(
                sandbox_id=sandbox_id,
                spec_id="process",
                root_dir=base / "sandboxes" / sandbox_id,
                session_api_key=uuid.uuid4().hex,
                webhook_url="http://127.0.0.1:9/",
            )
            try:
                made.append((launch, await provider.create(launch)))
            except BaseException:
                groups.remove(sandbox_id, wait=1)  # a failed start's are left for its next
                raise
        host = len(processes.list_processes())
        outside = [outside_leaf(launch, handle) for launch, handle in made]
        began = time.monotonic()
        processes.list_processes()
        scan = time.monotonic() - began
        times: list[float] = []
        pauses: list[float] = []
        resumes: list[float] = []
        with mock.patch.object(cgroups, "leaf_of", lambda *_: None) if args.proc else nullcontext():
            for launch, handle in made:
                for _ in range(args.rounds if args.pause else 0):
                    began = time.monotonic()
                    await provider.signals.pause(handle)
                    pauses.append(time.monotonic() - began)
                    began = time.monotonic()
                    await provider.signals.resume(handle)
                    resumes.append(time.monotonic() - began)
                    await provider.until_alive(handle, "not back", Leader.of(handle).running)
                if args.pause:
                    continue
                began = time.monotonic()
                await provider.stopper.stop(handle, launch.root_dir)
                times.append(time.monotonic() - began)
    finally:
        for launch, handle in made:
            await provider.destroy(launch.sandbox_id, handle, launch.root_dir)
        await provider.close()
    return {
        "way": "proc" if args.proc else "cgroup",
        "isolation": args.isolation,
        "host_processes": host,
        "descendants_outside_their_leaf": sum(outside),
        "proc_read_ms": round(scan * 1000, 1),
        **(
            {"pause": figures(pauses), "resume": figures(resumes)}
            if args.pause
            else {"stop": figures(times)}
        ),
        "load": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxes", type=int, default=8)
    parser.add_argument("--extra", type=int, default=3000)
    parser.add_argument(
        "--isolation", choices=["bubblewrap", "gvisor", "off"], default="bubblewrap"
    )
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--proc", action="store_true")
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: cgroups and bubblewrap's uids are root's")
    sleepers = crowd(args.extra)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-stop-") as tmp:
            result = asyncio.run(measure(args, Path(tmp)))
    finally:
        for sleeper in sleepers:
            sleeper.kill()
        for sleeper in sleepers:
            sleeper.wait()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
