"""What completion logs, token ids and a critic cost per step (prints JSON).

    .venv/bin/python bench/llm_events.py [--steps 200] [--rounds 3]

Two figures. `build_ms`: the time to make one LLMCompletionLogEvent in-process (the request's
messages and tools, the response, masked with a secret set, encoded and bounded), for a request
of a conversation `steps` steps long: the exact added work, free of the noise of a shared
machine. `server_ms_per_step`: as in bench/agent_loop.py, the time from the scripted LLM's
answer to the next request it gets, over conversations of `steps` think steps, the settings
taken in turn in each round (nothing on; `log_completions`; `return_token_ids`; both), with the
size of the events each conversation stored (as JSON characters). A critic judges only finishes and
messages, so it adds its own time to the last step alone (not measured here).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_server.agent.llm import Completion  # noqa: E402
from agent_server.agent.llm_log import LoggedModel  # noqa: E402
from agent_server.agent.model import ScriptedModel  # noqa: E402
from agent_server.agent.spec import LLMConfig  # noqa: E402
from agent_server.agent.usage import TokenUsage  # noqa: E402
from core.masking import Masker  # noqa: E402
from tests.support.api import events, wait_status  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call, text  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402

SETTINGS: dict[str, dict[str, Any]] = {
    "off": {},
    "log_completions": {"log_completions": True},
    "return_token_ids": {"return_token_ids": True},
    "both": {"log_completions": True, "return_token_ids": True},
}


def responder(steps: int):  # type: ignore[no-untyped-def]
    counts: dict[str, int] = {}

    def respond(key: str, body: dict[str, Any]) -> Reply:
        n = counts[key] = counts.get(key, 0) + 1
        if n > steps:
            return text("done")
        return call("think", thought=f"step {n}: " + "a thought of some length " * 8)

    return respond


def run(
    client: Any, llm: ScriptedLLM, key: str, workspace: Path, steps: int, extra: dict[str, Any]
) -> tuple[list[float], int]:
    body = {
        "agent": {
            "llm": {
                "model": "openai/test-model",
                "base_url": llm.base_url(key),
                "api_key": "sk-bench",
                **extra,
            },
            "condenser": {"enabled": False},
        },
        "workspace": {"working_dir": str(workspace)},
        "max_iterations": steps + 5,
        "stuck_detection": False,
        "secrets": {"BENCH_SECRET": "bench-secret-value"},
        "initial_message": {"content": [{"text": "think"}], "run": True},
    }
    r = client.post("/api/conversations", json=body)
    r.raise_for_status()
    cid = r.json()["id"]
    wait_status(client, cid, timeout=600)
    t = llm.timings[key]
    stored = len(json.dumps(events(client, cid)))
    return [(t[i + 1][0] - t[i][1]) * 1000 for i in range(len(t) - 1)], stored


class _Sink:
    """What LoggedModel needs of a sink to build an event (nothing is appended here)."""

    def __init__(self) -> None:
        self.masker = Masker({"BENCH_SECRET": "bench-secret-value"})


def build_ms(steps: int, repeat: int = 20) -> float:
    """Median time to build one completion log of a request `steps` think steps long."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s" * 20_000},
        {"role": "user", "content": "think"},
    ]
    for n in range(steps):
        args = json.dumps({"thought": f"step {n}: " + "a thought of some length " * 8})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "think", "arguments": args},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"c{n}",
                "name": "think",
                "content": "Your thought has been logged.",
            }
        )
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"t{i}",
                "description": "d" * 2000,
                "parameters": {"type": "object"},
            },
        }
        for i in range(10)
    ]
    reply = Completion(
        response_id="r",
        content="done",
        tool_calls=[],
        reasoning_content=None,
        thinking_blocks=[],
        usage=TokenUsage(prompt_tokens=1),
        cost=0.0,
        latency=0.0,
    )
    logged = LoggedModel(ScriptedModel(), _Sink())  # type: ignore[arg-type]
    config = LLMConfig.model_validate(
        {"model": "openai/test-model", "api_key": "sk-bench", "log_completions": True}
    )
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        logged._log(config, messages, tools, time.time(), reply=reply)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, Any] = {
        "steps": args.steps,
        "rounds": args.rounds,
        "build_ms": {n: build_ms(n) for n in (10, 100, args.steps, 1000)},
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench-llm-events-"))
    llm = ScriptedLLM().start()
    server = ServerProcess(tmp / "state").start()
    per_step: dict[str, list[float]] = {name: [] for name in SETTINGS}
    stored: dict[str, int] = {}
    with server.client(timeout=120) as client:
        llm.responder = responder(3)
        run(client, llm, "warm", tmp / "ws", 3, {})  # litellm's import, the first calls
        llm.responder = responder(args.steps)
        for round_ in range(args.rounds):
            for name, extra in SETTINGS.items():
                steps, stored[name] = run(
                    client, llm, f"{name}-{round_}", tmp / "ws", args.steps, extra
                )
                per_step[name].extend(steps)
    server.stop()
    llm.stop()
    out["server_ms_per_step_median"] = {
        name: round(statistics.median(v), 2) for name, v in per_step.items()
    }
    out["event_json_chars_per_conversation"] = stored
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
