"""Event log figures (prints JSON): durable append rate, reopen time, search latency by size.

    .venv/bin/python bench/event_log.py [--sequential 2000] [--sizes 1000,10000,100000]

Appends are durable (fdatasync) when they return, so their rate is mostly the disk's sync rate;
concurrent appends share a sync (group commit). Logs are built from realistic conversation
events: a SystemPromptEvent first, then user messages, think/finish actions with their
observations, agent messages and state updates. Big logs are built in large batches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_server.log import EventLog, Query  # noqa: E402
from events import (  # noqa: E402
    ActionEvent,
    ConversationStateUpdateEvent,
    Event,
    Message,
    MessageEvent,
    MessageToolCall,
    ObservationEvent,
    SystemPromptEvent,
    TextContent,
)
from tools.always import (  # noqa: E402
    FinishAction,
    FinishObservation,
    FinishTool,
    ThinkAction,
    ThinkObservation,
    ThinkTool,
)

WORDS = (
    "the agent reads the repository layout then edits the module adds a test runs the suite "
    "and reports what changed so that the user can review the diff before merging it"
).split()


def prose(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def system_prompt() -> SystemPromptEvent:
    return SystemPromptEvent(
        system_prompt=TextContent(text="You are a careful coding agent. " * 40, cache_prompt=True),
        tools=[ThinkTool.definition(), FinishTool.definition()],
        dynamic_context=TextContent(text="Working directory: /workspace/project"),
    )


def step(rng: random.Random, n: int) -> list[Event]:
    """One model step: sometimes a user message, an action and its observation, a reply."""
    events: list[Event] = []
    if n % 5 == 0:
        events.append(
            MessageEvent(
                source="user",
                llm_message=Message(role="user", content=[TextContent(text=prose(rng, 5, 60))]),
            )
        )
    call_id = f"call_{n}"
    finish = n % 50 == 49
    thought = prose(rng, 10, 200)
    action = FinishAction(message=prose(rng, 5, 40)) if finish else ThinkAction(thought=thought)
    events.append(
        ActionEvent(
            thought=[TextContent(text=prose(rng, 5, 30))],
            reasoning_content=prose(rng, 0, 80) or None,
            action=action,
            tool_name="finish" if finish else "think",
            tool_call_id=call_id,
            tool_call=MessageToolCall(
                id=call_id,
                name="finish" if finish else "think",
                arguments=json.dumps(action.model_dump(exclude={"kind"})),
                origin="completion",
            ),
            llm_response_id=f"chatcmpl-{n}",
            summary=prose(rng, 5, 10),
        )
    )
    observation = FinishObservation if finish else ThinkObservation
    events.append(
        ObservationEvent(
            tool_name="finish" if finish else "think",
            tool_call_id=call_id,
            observation=observation(content=[TextContent(text="Your thought has been logged.")]),
            action_id=f"action_{n}",
        )
    )
    if n % 7 == 0:
        events.append(
            MessageEvent(
                source="agent",
                llm_message=Message(
                    role="assistant", content=[TextContent(text=prose(rng, 5, 80))]
                ),
                llm_response_id=f"chatcmpl-{n}",
            )
        )
    if n % 11 == 0:
        events.append(ConversationStateUpdateEvent(key="execution_status", value="running"))
    return events


class Source:
    """An endless, reproducible stream of conversation events."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.buffer: list[Event] = []

    def take(self, count: int) -> list[Event]:
        while len(self.buffer) < count:
            self.buffer.extend(step(self.rng, self.n))
            self.n += 1
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out


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
