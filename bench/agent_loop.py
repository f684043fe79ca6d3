"""Agent loop figures (prints JSON): server work per step, terminal round trip, many at once.

    .venv/bin/python bench/agent_loop.py [--steps 500] [--conversations 50] [--each 20]
    .venv/bin/python bench/agent_loop.py --tracing compare [--steps 300] [--rounds 3]

Server work per step is the time from the scripted LLM's answer to the next request it gets:
everything the server does in between (events, fsync, the tool, litellm's request building).

`--tracing` runs the server with tracing `off` (the no-op provider; the default), `on` (no
exporter: spans with ids only, nothing recorded) or `otlp` (exported to a local OTLP/HTTP receiver
that decodes them, tests/support/otlp.py); `compare` measures one long conversation in each mode,
in turn, `--rounds` times, and prints the medians side by side. While a measured conversation
runs nothing polls the server (the end is seen at the scripted LLM, in this process): a client's
polls are work per second, not per step, and a mode whose steps ran slower for any reason got
more of them, each with a span, in its CPU per step (issue 30.9: that made "on" look 6-7 %
dearer than it is).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.api import wait_status  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call, text  # noqa: E402
from tests.support.otlp import OTLPReceiver  # noqa: E402
from tests.support.proc import cpu_seconds  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

MODES = ("off", "on", "otlp")


def memory_kib(pid: int) -> dict[str, int]:
    """RSS and PSS (shared pages split between sharers) of a process and its descendants."""
    total = {"rss": 0, "pss": 0, "processes": 0}
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    total["rss"] += int(line.split()[1])
                elif line.startswith("Pss:"):
                    total["pss"] += int(line.split()[1])
            total["processes"] += 1
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def echo_responder(steps: int):  # type: ignore[no-untyped-def]
    counts: dict[str, int] = {}

    def respond(key: str, body: dict[str, Any]) -> Reply:
        n = counts[key] = counts.get(key, 0) + 1
        if n > steps:
            return text("done")
        return call("terminal", command=f"echo step {n}")

    return respond


def create(client: Any, llm: ScriptedLLM, key: str, workspace: Path, iterations: int) -> str:
    body = {
        "agent": {
            "llm": {
                "model": "openai/test-model",
                "base_url": llm.base_url(key),
                "api_key": "sk-bench",
            },
            "tools": [{"name": "terminal"}],
            "condenser": {"enabled": False},
        },
        "workspace": {"working_dir": str(workspace)},
        "max_iterations": iterations,
        "stuck_detection": False,
        "initial_message": {"content": [{"text": "echo"}], "run": True},
    }
    r = client.post("/api/conversations", json=body)
    r.raise_for_status()
    return r.json()["id"]


def per_step_ms(llm: ScriptedLLM, key: str) -> list[float]:
    t = llm.timings[key]
    return [(t[i + 1][0] - t[i][1]) * 1000 for i in range(len(t) - 1)]


def tracing_env(mode: str, receiver: OTLPReceiver | None) -> dict[str, str]:
    if mode == "otlp":
        assert receiver is not None
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url}
    return {"AGENT_SERVER_TRACING": mode}


def telemetry_us_per_step(mode: str, receiver_url: str | None, n: int = 500) -> float:
    """The spans and counters of one step (step, chat, execute_tool) in this process, without
    the noise of a whole server: the CPU a step's tracing adds, in every thread. The clock is
    process CPU time up to the end of `shutdown()`, so the batch exporter's thread (encoding
    and sending the spans) is counted too; n stays under what the exporter's queue holds
    (2048 spans), so no span is dropped and every one is paid for. The receiver is another
    process (`receiver_process`), so decoding the spans is not counted as the server's work."""
    import asyncio

    from agent_server.telemetry import Telemetry

    endpoint = receiver_url + "/v1/traces" if mode == "otlp" and receiver_url else None
    telemetry = Telemetry.build(tracing=mode != "off", endpoint=endpoint)
    agent = telemetry.agent(lambda text: text)

    async def steps() -> None:
        for i in range(n):
            with agent.step():
                with telemetry.llm_call("openai/test-model") as record:
                    record.input_tokens, record.output_tokens = 100, 10
                with agent.tool_call("terminal", f"call-{i}") as call:
                    call.outcome = "ok"

    started = time.process_time()
    asyncio.run(steps())
    telemetry.shutdown()  # flushes: the last batches are encoded and sent before the clock stops
    return (time.process_time() - started) / n * 1e6


def receiver_process() -> tuple[subprocess.Popen[str], str]:
    """An OTLP receiver in a process of its own; its base URL."""
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from tests.support.otlp import OTLPReceiver; r = OTLPReceiver().start();"
        "print(r.base_url, flush=True); time.sleep(3600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(Path(__file__).resolve().parent.parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def compare(args: argparse.Namespace) -> None:
    """Per-step server work with tracing off, on without an exporter, and exporting."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    llm = ScriptedLLM().start()
    receiver = OTLPReceiver().start()
    medians: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        # Interleaved, so a noisy neighbour hurts every mode alike, and in a turning order,
        # so none is always the first of a round (after the warm-up of another's).
        for mode in MODES[round_ % 3 :] + MODES[: round_ % 3]:
            server = ServerProcess(
                tmp / f"state-{mode}-{round_}", env=tracing_env(mode, receiver)
            ).start()
            with server.client(timeout=120) as client:
                llm.responder = echo_responder(2)
                wait_status(
                    client,
                    create(client, llm, f"warm-{mode}-{round_}", tmp / "ws", 10),
                    timeout=120,
                )
                key = f"long-{mode}-{round_}"
                llm.responder = echo_responder(args.steps)
                pid = server.proc.pid  # type: ignore[union-attr]
                before = cpu_seconds(pid)
                cid = create(client, llm, key, tmp / "ws", args.steps + 5)
                # The last answer ("done") was asked for: the run is ending. No poll meanwhile.
                wait_for(lambda key=key: len(llm.timings[key]) > args.steps, 600, interval=0.5)
                time.sleep(0.5)  # the exporter's last batch (its 500 ms schedule) is counted
                cpu[mode].append((cpu_seconds(pid) - before) / args.steps * 1000)
                wait_status(client, cid, timeout=600)
            server.stop()
            medians[mode].append(statistics.median(per_step_ms(llm, key)))
    out: dict[str, Any] = {
        "steps": args.steps,
        "rounds": args.rounds,
        "spans_received": len(receiver.received()),
    }
    outside, url = receiver_process()
    try:
        for mode in MODES:
            out[f"telemetry_cpu_us_per_step_in_process_{mode}"] = round(
                statistics.median(telemetry_us_per_step(mode, url) for _ in range(5)), 1
            )
    finally:
        outside.kill()
        outside.wait()
    for mode in MODES:
        out[f"server_ms_per_step_median_{mode}"] = round(statistics.median(medians[mode]), 3)
        out[f"rounds_{mode}"] = [round(m, 3) for m in medians[mode]]
        out[f"server_cpu_ms_per_step_{mode}"] = round(statistics.median(cpu[mode]), 3)
        out[f"cpu_rounds_{mode}"] = [round(c, 3) for c in cpu[mode]]
    for figure in ("server_ms_per_step_median", "server_cpu_ms_per_step"):
        base = out[f"{figure}_off"]
        for mode in ("on", "otlp"):
            out[f"{figure}_added_{mode}_percent"] = round(
                (out[f"{figure}_{mode}"] - base) / base * 100, 1
            )
    for mode in ("on", "otlp"):
        # Each round's modes ran minutes apart at most: their ratio drifts less with the
        # machine's load than medians over the whole run do. Median, and the spread.
        paired = sorted((c - o) / o * 100 for c, o in zip(cpu[mode], cpu["off"], strict=True))
        out[f"server_cpu_added_{mode}_percent_paired"] = {
            "median": round(statistics.median(paired), 1),
            "min": round(paired[0], 1),
            "max": round(paired[-1], 1),
        }
    receiver.stop()
    llm.stop()
    print(json.dumps(out, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--each", type=int, default=20)
    parser.add_argument("--tracing", choices=[*MODES, "compare"], default="off")
    parser.add_argument("--rounds", type=int, default=3, help="with --tracing compare")
    args = parser.parse_args()
    if args.tracing == "compare":
        compare(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    llm = ScriptedLLM().start()
    receiver = OTLPReceiver().start() if args.tracing == "otlp" else None
    server = ServerProcess(tmp / "state", env=tracing_env(args.tracing, receiver)).start()
    out: dict[str, Any] = {}
    with server.client(timeout=120) as client:
        # Warm up litellm's import and the first shell.
        llm.responder = echo_responder(2)
        cid = create(client, llm, "warm", tmp / "ws", 10)
        wait_status(client, cid, timeout=120)

        llm.responder = echo_responder(args.steps)
        cid = create(client, llm, "long", tmp / "ws", args.steps + 5)
        wait_status(client, cid, timeout=600)
        steps = per_step_ms(llm, "long")
        out["steps"] = len(steps)
        out["server_ms_per_step_first10_median"] = round(statistics.median(steps[:10]), 2)
        out["server_ms_per_step_last10_median"] = round(statistics.median(steps[-10:]), 2)
        out["server_ms_per_step_median"] = round(statistics.median(steps), 2)

        obs = client.get(
            f"/api/conversations/{cid}/events/search",
            params={"kind__eq": "ObservationEvent", "limit": 3},
        ).json()["items"]
        out["sample_observation"] = obs[0]["observation"]["content"][0]["text"][:60]

        llm.responder = echo_responder(args.each)
        before = memory_kib(server.proc.pid)  # type: ignore[union-attr]
        started = time.monotonic()
        ids = [
            create(client, llm, f"many-{i}", tmp / f"ws{i}", args.each + 5)
            for i in range(args.conversations)
        ]
        for cid in ids:
            wait_status(client, cid, timeout=600)
        elapsed = time.monotonic() - started
        total_steps = args.conversations * (args.each + 1)
        out["many_conversations"] = args.conversations
        out["many_steps_per_second"] = round(total_steps / elapsed, 1)
        after = memory_kib(server.proc.pid)  # type: ignore[union-attr]
        out["processes_after"] = after["processes"]
        out["server_and_shells_rss_mib"] = round(after["rss"] / 1024, 1)
        out["server_and_shells_pss_mib"] = round(after["pss"] / 1024, 1)
        n = args.conversations
        out["added_rss_per_conversation_mib"] = round((after["rss"] - before["rss"]) / 1024 / n, 2)
        out["added_pss_per_conversation_mib"] = round((after["pss"] - before["pss"]) / 1024 / n, 2)
    server.stop()
    llm.stop()
    if receiver is not None:
        out["spans_received"] = len(receiver.received())
        receiver.stop()
    out["tracing"] = args.tracing
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
