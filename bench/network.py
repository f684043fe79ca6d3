"""What the network boundary costs (issue 36): a start with and without a namespace of its own,
and one LLM call through the control plane's gateway against straight to the model (prints
JSON).

    .venv/bin/python bench/network.py [--starts 10] [--calls 50] [--template on|off]

- start_to_ready_s: a start request (a new sandbox, NO_GROUPING, a message run at once) to its
  start task's READY, through a real control plane in this process, with the boundary
  (`isolated`: a namespace, a veth pair and nftables rules per sandbox) and without (`host`),
  in alternating rounds; median and p95;
- llm_call_s: from inside one sandbox (its /api/bash runs a Python client there), `--calls`
  chat completions to the scripted model on the test internet, straight (the sandbox's `open`
  policy lets it: the model is a public address) and through the gateway (the sandbox's token;
  the control plane puts the user's key in and forwards), alternating; median and p95 of each,
  and their difference: what the gateway adds to a call.
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

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.control_plane.support import (  # noqa: E402
    ControlPlane,
    configure_llm,
    make_config,
    template_socket,
)
from tests.support.llm import ScriptedLLM, text  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

#: Run in the sandbox: N alternating calls, each way; prints the seconds of each as JSON.
CLIENT = r"""
import json, sys, time, urllib.request
direct, gateway, token, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
body = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
def once(base, key):
    request = urllib.request.Request(base + "/chat/completions", data=body, method="POST",
        headers={"content-type": "application/json", "authorization": "Bearer " + key})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
    return time.perf_counter() - began
out = {"direct": [], "gateway": []}
for _ in range(n):
    out["direct"].append(once(direct, "sk-direct"))
    out["gateway"].append(once(gateway, token))
print(json.dumps(out))
"""


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "p95": round(p95(values), 4),
        "n": len(values),
    }


def starts(plane: ControlPlane, llm: ScriptedLLM, count: int, key: str) -> list[float]:
    client = plane.client(plane.new_user(f"bench-{key}"))
    configure_llm(client, llm.base_url(key), tools=["terminal"])
    took = []
    for _ in range(count):
        llm.script(key, text("ok"))
        began = time.monotonic()
        r = client.post(
            "/api/v1/app-conversations",
            json={
                "initial_message": {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi"}],
                    "run": True,
                }
            },
        )
        task_id = r.json()["id"]

        def ready(task_id: str = task_id) -> bool:
            task = client.get(
                "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
            ).json()[0]
            assert task["status"] != "ERROR", task
            return bool(task["status"] == "READY")

        wait_for(ready, 120, interval=0.005, what="READY")
        took.append(time.monotonic() - began)
    return took


def gateway_calls(plane: ControlPlane, llm: ScriptedLLM, calls: int) -> dict[str, Any]:
    key = plane.new_user("bench-gateway")
    client = plane.client(key)
    configure_llm(client, llm.base_url("gw"), tools=["terminal"])
    llm.responder = lambda _key, _body: text("ok")
    sandbox = client.post("/api/v1/sandboxes", json={}).json()

    def running() -> dict[str, Any] | None:
        found: dict[str, Any] = client.get(
            "/api/v1/sandboxes", params={"id": sandbox["id"]}
        ).json()[0]
        return found if found["status"] == "RUNNING" else None

    record = wait_for(running, 120, what="the sandbox")
    session = record["session_api_key"]
    me = client.get(
        "/api/v1/users/me",
        params={"expose_secrets": "true"},
        headers={"X-Session-API-Key": session},
    ).json()
    command = (
        f"python3 - {llm.base_url('gw')} {me['llm_base_url']} {me['llm_api_key']} "
        f"{calls} <<'EOF'\n{CLIENT}\nEOF"
    )
    answer = httpx.post(
        record["exposed_urls"][0]["url"] + "/api/bash/execute_bash_command",
        headers={"X-Session-API-Key": session},
        json={"command": command, "timeout": 600},
        timeout=700,
    ).json()
    timings = json.loads(answer["stdout"].strip().splitlines()[-1])
    direct, through = summary(timings["direct"]), summary(timings["gateway"])
    return {
        "direct": direct,
        "gateway": through,
        "gateway_adds_median_s": round(through["median"] - direct["median"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--template", choices=("on", "off"), default="on")
    args = parser.parse_args()
    llm = ScriptedLLM().start_on_internet()
    results: dict[str, Any] = {"load_before": os.getloadavg()[0], "template": args.template}
    planes = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for network in ("isolated", "host"):
                planes[network] = ControlPlane(
                    make_config(
                        Path(tmp) / network,
                        sandbox_network=network,
                        sandbox_template=args.template == "on",
                        max_sandboxes=1000,
                        max_sandboxes_per_user=1000,
                    )
                ).start()
            if args.template == "on":  # the template loads for seconds: its starts, not that
                for plane in planes.values():
                    wait_for(template_socket(plane).exists, 120, what="the template")
            took: dict[str, list[float]] = {"isolated": [], "host": []}
            rounds = 2
            for index in range(rounds):
                for network in ("isolated", "host") if index % 2 == 0 else ("host", "isolated"):
                    took[network] += starts(
                        planes[network], llm, args.starts // rounds or 1, f"{network}-{index}"
                    )
            results["start_to_ready_s"] = {k: summary(v) for k, v in took.items()}
            results["llm_call_s"] = gateway_calls(planes["isolated"], llm, args.calls)
            for plane in planes.values():  # its sandboxes go with it (their files in `tmp`)
                plane.stop()
    finally:
        llm.stop()
    results["load_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
