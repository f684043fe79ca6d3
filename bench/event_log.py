"""Event log figures (prints JSON): durable append rate, reopen time, search latency by size.

    .venv/bin/python bench/event_log.py [--sequential 2000] [--sizes 1000,10000,100000]

Appends are durable (fdatasync) when they return, so their rate is mostly the disk's sync rate;
concurrent appends share a sync (group commit). Logs are built from realistic conversation
events (tests/support/conversation_events.py). Big logs are built in large batches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_server.log import EventLog, Query  # noqa: E402
from tests.support.conversation_events import Source, system_prompt  # noqa: E402


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 4),
        "p99_ms": round(p99 * 1000, 4),
    }


async def append_rates(directory: Path, sequential: int, groups: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    source = Source(2)

    log = EventLog.open(directory / "sequential.jsonl")
    await log.append(system_prompt())
    latencies = []
    events = source.take(sequential)
    start = time.perf_counter()
    for event in events:
        t = time.perf_counter()
        await log.append(event)
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    log.close()
    out["sequential_single"] = {
        "events": sequential,
        "events_per_s": round(sequential / elapsed),
        **quantiles(latencies),
    }

    for size in groups:
        log = EventLog.open(directory / f"gathered-{size}.jsonl")
        total = max(size * 20, sequential * 2)
        rounds = total // size
        start = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(*(log.append(e) for e in source.take(size)))
        elapsed = time.perf_counter() - start
        log.close()
        out[f"gathered_{size}_single_appends"] = {
            "events": rounds * size,
            "events_per_s": round(rounds * size / elapsed),
        }

    # Several writers each awaiting their own appends (conversation loop, hooks, state).
    writers, each = 8, max(50, sequential // 8)
    log = EventLog.open(directory / "writers.jsonl")

    async def writer() -> None:
        for event in source.take(each):
            await log.append(event)

    start = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    elapsed = time.perf_counter() - start
    log.close()
    out[f"{writers}_concurrent_writers"] = {
        "events": writers * each,
        "events_per_s": round(writers * each / elapsed),
    }
    return out


def time_searches(log: EventLog, repeats: int) -> dict[str, Any]:
    queries = {
        "kind=ActionEvent limit=100": (Query(kind="ActionEvent"), 100),
        "kind=SystemPromptEvent limit=1": (Query(kind="SystemPromptEvent"), 1),
        "descending limit=100": (Query(descending=True), 100),
    }
    out: dict[str, Any] = {}
    for name, (query, limit) in queries.items():
        lines, _ = log.search(query, limit)
        assert lines, name
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            log.search(query, limit)
            samples.append(time.perf_counter() - t)
        out[name] = quantiles(samples)
    # A page deep in the log (page_id from the middle), as a client paging back would ask.
    middle = log.id_at(len(log) // 2)
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        log.search(Query(descending=True), 100, middle)
        samples.append(time.perf_counter() - t)
    out["descending limit=100 from the middle"] = quantiles(samples)
    return out


async def searches_and_reopen(directory: Path, sizes: list[int], repeats: int) -> dict[str, Any]:
    path = directory / "big.jsonl"
    log = EventLog.open(path)
    await log.append(system_prompt())
    source = Source(3)
    out: dict[str, Any] = {"search": {}}
    build_start = time.perf_counter()
    for size in sorted(sizes):
        while len(log) < size:
            await log.append(*source.take(min(2000, size - len(log))))
        out["search"][str(size)] = time_searches(log, repeats)
    out["build_seconds"] = round(time.perf_counter() - build_start, 2)
    log.close()

    largest = max(sizes)
    timings = []
    for _ in range(3):
        t = time.perf_counter()
        reopened = EventLog.open(path)
        timings.append(time.perf_counter() - t)
        assert len(reopened) == largest
        reopened.close()
    out["reopen"] = {
        "events": largest,
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "seconds_median_of_3": round(statistics.median(timings), 3),
    }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--groups", default="10,100")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=500)
    parser.add_argument("--dir", type=Path, default=None, help="where the logs go (default: tmp)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        result: dict[str, Any] = {"python": sys.version.split()[0]}
        result["append"] = await append_rates(
            directory, args.sequential, [int(g) for g in args.groups.split(",")]
        )
        result.update(
            await searches_and_reopen(
                directory, [int(s) for s in args.sizes.split(",")], args.repeats
            )
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
