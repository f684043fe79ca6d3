"""What starting a command costs an event loop: uvloop's spawn against asyncio's (prints JSON).

    .venv/bin/python bench/spawn.py [--spawns 30]

Each row starts `true` `--spawns` times, one after another, and times `create_subprocess_exec`
alone (the loop is blocked while it runs; the command's own run is not counted), first in this
process as it is (small), then after importing litellm (about 170 MiB resident, as a control
plane or an agent server holds it). uvloop starts a command with a fork() of the whole process;
asyncio's loop through `subprocess`, whose vfork() does not copy it. The control plane runs on
asyncio's loop for this reason (`control_plane.app.Server`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop


async def spawns(count: int) -> list[float]:
    taken = []
    for _ in range(count):
        began = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            "true", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        taken.append(time.perf_counter() - began)
        await process.communicate()
    return taken


def row(
    run: Callable[[Coroutine[Any, Any, list[float]]], list[float]], count: int
) -> dict[str, Any]:
    taken = sorted(run(spawns(count)))
    return {
        "median_ms": round(1000 * statistics.median(taken), 2),
        "p95_ms": round(1000 * taken[int(0.95 * (len(taken) - 1))], 2),
    }


def resident_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=30)
    count = parser.parse_args().spawns
    figures: dict[str, Any] = {"load_1m": os.getloadavg()[0]}
    for size in ("small", "with litellm"):
        if size == "with litellm":
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm  # noqa: F401
        figures[size] = {
            "resident_mib": resident_mib(),
            "uvloop": row(uvloop.run, count),
            "asyncio": row(asyncio.run, count),
        }
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
