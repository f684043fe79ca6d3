"""Delivery figures (prints JSON): websocket fan-out latency and webhook catch-up rate.

    .venv/bin/python bench/delivery.py [--subscribers 50] [--steps 200] [--backlog 100000]

Fan-out: `subscribers` websockets watch one conversation while it runs `steps` think steps
against the scripted LLM; the server's CPU seconds meanwhile are printed, and latency is each
stored event's timestamp (taken when it is appended, before its fsync) to its receipt by each
client (one machine, one clock). The LLM runs in its own process so that it does not share the
clients' interpreter.

Catch-up: a conversation's log is filled with `backlog` events while the server is down; the
server then starts with a webhook aimed at a local receiver, and the rate is events received
per second, from the first request to the last event (and from the server's start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from agent_server.log import EventLog  # noqa: E402
from events import Message, MessageEvent, TextContent  # noqa: E402
from tests.conftest import agent_spec  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call  # noqa: E402
from tests.support.proc import cpu_seconds  # noqa: E402
from tests.support.receiver import Receiver  # noqa: E402
from tests.support.server import KEY, ServerProcess  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

# -- the scripted LLM in its own process -----------------------------------------------------------


def _serve_llm(port: int, ready: Any) -> None:
    llm = ScriptedLLM()
    llm.port = port

    def respond(key: str, body: dict[str, Any]) -> Reply:
        # The key ends with the number of think steps wanted: "<name>-<steps>".
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if done >= int(key.rsplit("-", 1)[1]):
            return call("finish", message="done")
        return Reply(text=f"step {done}", tool_calls=[("think", {"thought": f"thinking {done}"})])

    llm.responder = respond
    llm.start()
    ready.set()
    while True:
        time.sleep(3600)


def start_llm() -> tuple[multiprocessing.Process, ScriptedLLM]:
    probe = ScriptedLLM()  # only for its free port and base_url
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_serve_llm, args=(probe.port, ready), daemon=True)
    proc.start()
    if not ready.wait(30):
        raise RuntimeError("scripted LLM did not start")
    return proc, probe


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- websocket fan-out -----------------------------------------------------------------------------


async def fan_out(
    server: ServerProcess,
    llm: ScriptedLLM,
    subscribers: int,
    steps: int,
    workspace: Path,
    compression: str | None,
) -> dict[str, Any]:
    assert server.proc is not None
    pid = server.proc.pid  # its CPU time says more than its wall time on a shared machine
    async with httpx.AsyncClient(
        base_url=server.url, headers={"X-Session-API-Key": KEY}, timeout=60
    ) as http:
        r = await http.post(
            "/api/conversations",
            json={
                "agent": agent_spec(llm, f"fan{subscribers}{compression}-{steps}"),
                "workspace": {"working_dir": str(workspace)},
                "max_iterations": steps + 10,
            },
        )
        cid = r.json()["id"]
        latencies: list[float] = []
        counts = [0] * subscribers

        async def watch(i: int) -> None:
            async with connect(
                f"ws://127.0.0.1:{server.port}/sockets/events/{cid}",
                additional_headers={"X-Session-API-Key": KEY},
                max_size=None,
                proxy=None,
                compression=compression,
            ) as ws:
                ready.release()
                async for frame in ws:
                    now = time.time()
                    event = json.loads(frame)
                    if (
                        event.get("kind") == "StreamingDeltaEvent"
                        or event.get("key") == "full_state"
                    ):
                        continue  # transient frames: not stored events
                    sent = datetime.fromisoformat(event["timestamp"]).timestamp()
                    latencies.append((now - sent) * 1000)
                    counts[i] += 1
                    if event.get("key") == "execution_status" and event.get("value") != "running":
                        break

        ready = asyncio.Semaphore(0)
        tasks = [asyncio.create_task(watch(i)) for i in range(subscribers)]
        for _ in range(subscribers):
            await ready.acquire()
        started, cpu = time.monotonic(), cpu_seconds(pid)
        await http.post(
            f"/api/conversations/{cid}/events",
            json={"role": "user", "content": [{"type": "text", "text": "go"}], "run": True},
        )
        await asyncio.wait_for(asyncio.gather(*tasks), 600)
        elapsed, cpu = time.monotonic() - started, cpu_seconds(pid) - cpu
        stored = (await http.get(f"/api/conversations/{cid}/events/count")).json()
    return {
        "compression": compression or "none",
        "subscribers": subscribers,
        "steps": steps,
        "events_per_subscriber": min(counts),
        "stored_events": stored,
        "run_seconds": round(elapsed, 2),
        "server_cpu_seconds": round(cpu, 2),
        "latency_ms_median": round(statistics.median(latencies), 2),
        "latency_ms_p90": round(percentile(latencies, 0.90), 2),
        "latency_ms_p99": round(percentile(latencies, 0.99), 2),
        "latency_ms_max": round(max(latencies), 2),
    }


# -- webhook catch-up ------------------------------------------------------------------------------


async def fill(log_path: Path, n: int) -> int:
    log = await asyncio.to_thread(EventLog.open, log_path)
    text = "a user message of a realistic length, " * 8
    for start in range(0, n, 2000):
        await log.append(
            *[
                MessageEvent(
                    source="user",
                    llm_message=Message(
                        role="user", content=[TextContent(text=f"{start + i}: {text}")]
                    ),
                )
                for i in range(min(2000, n - start))
            ]
        )
    size = log_path.stat().st_size
    log.close()
    return size


def catch_up(
    state: Path, llm: ScriptedLLM, backlog: int, validate: bool, batch: int | None
) -> dict[str, Any]:
    server = ServerProcess(state).start()
    with server.client() as c:
        r = c.post(
            "/api/conversations",
            json={
                "agent": agent_spec(llm, "hook-0"),
                "workspace": {"working_dir": str(state.parent)},
            },
        )
        cid = r.json()["id"]
        base = c.get(f"/api/conversations/{cid}/events/count").json()
    server.stop()
    directory = next(
        p for p in (state / "conversations").iterdir() if p.name == cid.replace("-", "")
    )
    size = asyncio.run(fill(directory / "events.jsonl", backlog))
    total = base + backlog

    receiver = Receiver(api_key="bench-hook", validate=validate).start()
    env = {
        "AGENT_SERVER_WEBHOOK_URL": receiver.base_url,
        "AGENT_SERVER_WEBHOOK_API_KEY": "bench-hook",
        "AGENT_SERVER_LOG_LEVEL": "warning",
    }
    if batch:
        env["AGENT_SERVER_WEBHOOK_BATCH_EVENTS"] = str(batch)
    hooked = ServerProcess(state, env=env)
    started = time.monotonic()
    hooked.start()
    try:
        wait_for(
            lambda: receiver.count() >= total,
            timeout=600,
            interval=0.01,
            what="the whole backlog at the receiver",
        )
        finished = time.monotonic()
    finally:
        hooked.stop()
        receiver.stop()
    first = min(a.at for a in receiver.attempts)
    last = max(a.at for a in receiver.attempts)
    ids = receiver.ids(cid)
    assert len(ids) == len(set(ids)) == total, "every event exactly once"
    return {
        "receiver_validates": validate,
        "batch_events": batch or 100,
        "backlog_events": backlog,
        "log_mb": round(size / 1e6, 1),
        "requests": len(receiver.attempts),
        "events_per_second": round(total / (last - first)) if last > first else None,
        "events_per_second_from_start": round(total / (finished - started)),
        "seconds_from_start": round(finished - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backlog", type=int, default=100_000)
    args = parser.parse_args()
    llm_proc, llm = start_llm()
    results: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            server = ServerProcess(
                Path(tmp) / "state", env={"AGENT_SERVER_LOG_LEVEL": "warning"}
            ).start()
            try:
                # Warm-up: the server's first LLM call imports most of litellm.
                asyncio.run(fan_out(server, llm, 1, 2, Path(tmp), None))
                results["fan_out"] = [
                    asyncio.run(fan_out(server, llm, args.subscribers, args.steps, Path(tmp), c))
                    for c in ("deflate", None)
                ]
            finally:
                server.stop()
        results["webhook_catch_up"] = []
        for validate, batch in ((False, None), (True, None), (False, 1000)):
            with tempfile.TemporaryDirectory() as tmp:
                results["webhook_catch_up"].append(
                    catch_up(Path(tmp) / "state", llm, args.backlog, validate, batch)
                )
    finally:
        llm_proc.kill()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
