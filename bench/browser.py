"""Cost of the browser tool set: first call (Chromium start included), a warm navigate +
get_content, and memory with one and with five conversations each holding a context.

    .venv/bin/python bench/browser.py [--repeat 10]

Prints one JSON object. Memory is read from /proc: RSS summed over this Python process, the
Playwright driver and every Chromium process (its main process and process group), plus the
same sum as PSS, which counts shared pages once and so is the fairer total.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tools.base import Tool, ToolContext
from tools.browser import TOOL_SET, BrowserManager

PAGE = (
    "<!doctype html><title>Bench</title><h1>Bench page</h1>"
    + "".join(f"<p>Paragraph {i} with <a href='/p{i}'>a link</a>.</p>" for i in range(100))
).encode()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


def _proc_kib(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def memory(manager: BrowserManager) -> dict[str, float]:
    """MiB of RSS and PSS: ours, the driver's, Chromium's."""
    browser = manager.process_ids()
    driver = [_ppid(manager.pid)] if manager.pid else []
    groups: dict[str, list[int]] = {"server": [os.getpid()], "driver": driver, "chromium": browser}
    out: dict[str, float] = {}
    for name, pids in groups.items():
        out[f"{name}_rss_mib"] = sum(_proc_kib(p, "status", "VmRSS") for p in pids) / 1024
    every = [p for pids in groups.values() for p in pids]
    out["total_rss_mib"] = sum(_proc_kib(p, "status", "VmRSS") for p in every) / 1024
    out["total_pss_mib"] = sum(_proc_kib(p, "smaps_rollup", "Pss") for p in every) / 1024
    out["chromium_processes"] = len(browser)
    return {k: round(v, 1) for k, v in out.items()}


def conversation(manager: BrowserManager, root: Path, name: str) -> dict[str, Tool]:
    ctx = ToolContext(
        conversation_id=name,
        working_dir=root / name,
        state_dir=root / name / "s",
        browser=lambda: manager,
    )
    return {t.name: t for t in TOOL_SET.make(ctx, {})}


async def call(tools: dict[str, Tool], name: str, **arguments: Any) -> str:
    tool = tools[name]
    observation = await tool.run(tool.parse(arguments))
    if observation.is_error:
        raise RuntimeError(observation.text)
    return observation.text


async def main(repeat: int) -> dict[str, Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    manager = BrowserManager()
    conversations: list[dict[str, Tool]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            first = conversation(manager, root, "c0")
            conversations.append(first)
            start = time.perf_counter()
            await call(first, "browser_navigate", url=url)
            first_call = time.perf_counter() - start

            warm = []
            for _ in range(repeat):
                start = time.perf_counter()
                await call(first, "browser_navigate", url=url)
                await call(first, "browser_get_content", extract_links=True)
                warm.append(time.perf_counter() - start)
            one = memory(manager)

            start = time.perf_counter()
            second = conversation(manager, root, "c1")
            conversations.append(second)
            await call(second, "browser_navigate", url=url)
            first_call_shared = time.perf_counter() - start
            for i in range(2, 5):
                conversations.append(conversation(manager, root, f"c{i}"))
                await call(conversations[-1], "browser_navigate", url=url)
            five = memory(manager)
    finally:
        for tools in conversations:
            for tool in tools.values():
                await tool.close()
        await manager.close()
        server.shutdown()
        server.server_close()
    return {
        "first_call_s": round(first_call, 3),
        "first_call_browser_already_running_s": round(first_call_shared, 3),
        "warm_navigate_get_content_s": {
            "median": round(statistics.median(warm), 4),
            "min": round(min(warm), 4),
            "max": round(max(warm), 4),
            "runs": repeat,
        },
        "memory_one_conversation": one,
        "memory_five_conversations": five,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="warm navigate+content runs")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.repeat)), indent=2))
