"""The control plane's memory under large webhook batches sent at once (issue 25.4): a real
control plane (`python -m control_plane`, SQLite) with one process sandbox and conversation;
its session key posts `--batches` batches of `--mib` MiB each, all at once. Prints JSON: the
control plane's RSS before, its peak (VmHWM), the answers by status (429s are the intake's
refusals; the agent server would send those again) and seconds.

    .venv/bin/python bench/webhook_memory.py [--batches 6] [--mib 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.control_plane.planes import PlaneProcess  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402


def memory(pid: int, field: str) -> int:
    """A VmRSS or VmHWM figure of `pid`, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    raise LookupError(field)


def batch(i: int, mib: int) -> bytes:
    """One batch of `mib` MiB: events whose text makes up the size."""
    text = "x" * (256 * 1024)
    events = [
        {
            "id": f"01K{i:05d}{n:018d}",
            "timestamp": "2026-01-01T00:00:00+00:00",
            "source": "user",
            "kind": "MessageEvent",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }
        for n in range(mib * 4)
    ]
    return json.dumps(events).encode()


async def post_all(url: str, session: str, bodies: list[bytes]) -> Counter[int]:
    async with httpx.AsyncClient(
        timeout=300, headers={"X-Session-API-Key": session, "Content-Type": "application/json"}
    ) as c:
        answers = await asyncio.gather(*(c.post(url, content=b) for b in bodies))
    return Counter(r.status_code for r in answers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--mib", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plane = PlaneProcess(Path(tmp) / "cp").start()
        try:
            assert plane.proc is not None
            client = httpx.Client(
                base_url=plane.url,
                timeout=60,
                headers={"Authorization": f"Bearer {plane.new_key('bench')}"},
            )
            client.patch("/api/v1/settings", json={"llm_model": "openai/none"}).raise_for_status()
            task_id = client.post("/api/v1/app-conversations", json={}).json()["id"]

            def ended() -> dict[str, Any]:
                found: dict[str, Any] = client.get(
                    "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
                ).json()[0]
                return found if found["status"] in ("READY", "ERROR") else {}

            task: dict[str, Any] = wait_for(ended, 120, what="the start")
            assert task["status"] == "READY", task
            sandbox = client.get("/api/v1/sandboxes", params={"id": task["sandbox_id"]}).json()[0]
            bodies = [batch(i, args.mib) for i in range(args.batches)]
            before = memory(plane.proc.pid, "VmRSS")
            started = time.monotonic()
            statuses = asyncio.run(
                post_all(
                    f"{plane.url}/api/v1/webhooks/events/{task['app_conversation_id']}",
                    sandbox["session_api_key"],
                    bodies,
                )
            )
            print(
                json.dumps(
                    {
                        "batches": args.batches,
                        "mib_each": args.mib,
                        "rss_before_mib": before,
                        "rss_peak_mib": memory(plane.proc.pid, "VmHWM"),
                        "answers": {str(k): v for k, v in sorted(statuses.items())},
                        "seconds": round(time.monotonic() - started, 1),
                    },
                    indent=2,
                )
            )
        finally:
            plane.stop()


if __name__ == "__main__":
    main()
