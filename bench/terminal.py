"""Speed and size of the terminal tool, printed as JSON.

    .venv/bin/python bench/terminal.py

round_trip_ms: `echo hi` sent and its observation back (median and p99 of 200 calls); the aim
is a median under 5 ms. idle_shell_rss_kib: the resident memory of one idle bash.
python_kib_per_shell: what the server's heap grows by per open shell. output_mb_per_s: how
fast 50 MB of output is read, cleaned and saved.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from events.tools.terminal import TerminalAction
from tools.base import ToolContext
from tools.terminal import TerminalTool

CALLS = 200
SHELLS = 10
OUTPUT_BYTES = 50_000_000


def tool_in(root: Path, name: str) -> TerminalTool:
    work = root / name
    work.mkdir()
    ctx = ToolContext(conversation_id=name, working_dir=work, state_dir=root / f"{name}-state")
    return TerminalTool(ctx)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError("VmRSS")


async def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tool = tool_in(root, "bench")
        start = time.perf_counter()
        first = await tool.run(TerminalAction(command="echo $$"))
        start_ms = (time.perf_counter() - start) * 1000
        shell_pid = int(first.text.splitlines()[0])

        times = []
        for _ in range(CALLS):
            t0 = time.perf_counter()
            obs = await tool.run(TerminalAction(command="echo hi"))
            times.append((time.perf_counter() - t0) * 1000)
            assert obs.text.startswith("hi"), obs.text
        times.sort()

        await asyncio.sleep(0.5)
        idle_rss = rss_kib(shell_pid)

        t0 = time.perf_counter()
        await tool.run(TerminalAction(command=f"yes | head -c {OUTPUT_BYTES}", timeout=120))
        output_mb_per_s = OUTPUT_BYTES / 1e6 / (time.perf_counter() - t0)
        await tool.close()

        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        tools = [tool_in(root, f"shell{i}") for i in range(SHELLS)]
        for t in tools:
            await t.run(TerminalAction(command="true"))
        per_shell = (tracemalloc.get_traced_memory()[0] - before) / SHELLS / 1024
        tracemalloc.stop()
        for t in tools:
            await t.close()

    return {
        "calls": CALLS,
        "round_trip_ms": {
            "median": round(statistics.median(times), 3),
            "p99": round(times[int(len(times) * 0.99) - 1], 3),
        },
        "first_call_with_shell_start_ms": round(start_ms, 1),
        "idle_shell_rss_kib": idle_rss,
        "python_kib_per_shell": round(per_shell, 1),
        "output_mb_per_s": round(output_mb_per_s, 1),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
