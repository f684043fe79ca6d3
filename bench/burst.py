"""A burst of starts from one user (prints JSON).

    .venv/bin/python bench/burst.py [--starts 100] [--strategy NO_GROUPING] [--template on|off]

One control plane on SQLite (the default store), the process provider (forked from the sandbox
template when root with bubblewrap, as by default), one user: `--starts` start tasks POSTed at
once, each with a first message the scripted LLM answers with `finish`. For each task, from its
POST to its READY (or ERROR) as seen by a poller of the batch read every 50 ms; how many ended
each way and why; how many sandboxes they made. NO_GROUPING makes one sandbox per start (the
host's caps permitting: the memory floor, the per-user bound); ADD_TO_ANY puts them into the
sandboxes that are RUNNING (none when the burst comes, so most are new sandboxes too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.control_plane.support import ControlPlane, configure_llm, make_config  # noqa: E402
from tests.support.llm import ScriptedLLM, call  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

BODY = {"initial_message": {"content": [{"type": "text", "text": "hi"}], "run": True}}


async def burst(url: str, key: str, n: int) -> dict[str, Any]:
    async with httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
        limits=httpx.Limits(max_connections=n),
    ) as client:
        posted: dict[str, float] = {}

        async def one() -> None:
            began = time.monotonic()
            answer = await client.post("/api/v1/app-conversations", json=BODY)
            answer.raise_for_status()
            posted[answer.json()["id"]] = began

        began = time.monotonic()
        await asyncio.gather(*(one() for _ in range(n)))
        all_posted = time.monotonic() - began
        ended: dict[str, tuple[float, dict[str, Any]]] = {}
        running: dict[str, float] = {}  # each sandbox, when first seen RUNNING (from the burst)
        ids = list(posted)
        while len(ended) < n and time.monotonic() - began < 600:
            page = (await client.get("/api/v1/sandboxes/search", params={"limit": 100})).json()[
                "items"
            ]
            for sandbox in page:
                if sandbox["status"] == "RUNNING":
                    running.setdefault(sandbox["id"], time.monotonic() - began)
            for offset in range(0, n, 100):
                chunk = [i for i in ids[offset : offset + 100] if i not in ended]
                if not chunk:
                    continue
                found = (
                    await client.get("/api/v1/app-conversations/start-tasks", params={"ids": chunk})
                ).json()
                now = time.monotonic()
                for task in found:
                    if task and task["status"] in ("READY", "ERROR"):
                        ended[task["id"]] = (now - posted[task["id"]], task)
            await asyncio.sleep(0.05)
    seconds = sorted(s for s, _ in ended.values())
    up = sorted(running.values())
    statuses = Counter(t["status"] for _, t in ended.values())
    errors = Counter(
        str(t.get("detail"))[:120] for _, t in ended.values() if t["status"] == "ERROR"
    )
    return {
        "starts": n,
        "all_posted_s": round(all_posted, 2),
        "ready": statuses["READY"],
        "error": statuses["ERROR"],
        "unfinished": n - len(ended),
        "errors": dict(errors),
        "sandboxes": len({t["sandbox_id"] for _, t in ended.values() if t["sandbox_id"]}),
        "post_to_end_s": {
            "p50": round(statistics.median(seconds), 2),
            "p95": round(seconds[max(0, int(len(seconds) * 0.95) - 1)], 2),
            "max": round(seconds[-1], 2),
        }
        if seconds
        else None,
        "burst_to_sandbox_running_s": {
            "first": round(up[0], 2),
            "p50": round(statistics.median(up), 2),
            "max": round(up[-1], 2),
        }
        if up
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--strategy", default="NO_GROUPING")
    parser.add_argument("--template", choices=["on", "off"], default="on")
    args = parser.parse_args()
    llm = ScriptedLLM().start()
    results: dict[str, Any] = {
        "load_before": round(os.getloadavg()[0], 1),
        "strategy": args.strategy,
        "template": args.template,
    }
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(
            Path(tmp),
            max_sandboxes_per_user=args.starts + 10,
            sandbox_template=args.template == "on",
        )
        plane = ControlPlane(config).start()
        try:
            if args.template == "on":
                wait_for(
                    (Path(tmp) / "template" / "template.sock").exists,
                    120,
                    what="the sandbox template",
                )
            key = plane.new_user("burst")
            client = plane.client(key)
            configure_llm(client, llm.base_url("burst"))
            client.patch("/api/v1/settings", json={"grouping_strategy": args.strategy})
            for _ in range(args.starts):
                llm.script("burst", call("finish", message="done"))
            results.update(asyncio.run(burst(plane.url, key, args.starts)))
            results["load_after"] = round(os.getloadavg()[0], 1)
            print(json.dumps(results, indent=1), flush=True)
        finally:
            plane.stop(timeout=600)  # every sandbox of the burst stopped before the files go
            llm.stop()


if __name__ == "__main__":
    main()
