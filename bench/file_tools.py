"""Speed of the workspace file tools and of a sub-agent round trip, printed as JSON.

    .venv/bin/python bench/file_tools.py

grep_100k_files_ms: grep over a generated tree of 100,000 small files (1,000 directories of
100), with ripgrep and with the Python fallback: a rare pattern (10 files match) and a common
one (every file matches, so the cap and the count of the rest do the work). glob_100k_files_ms:
`**/*.py` over the same tree. apply_patch_50_hunks_ms: one patch of 50 hunks across 20 files
of 400 lines, applied (and the files restored between runs); median of 5.
subagent_round_trip_ms: a real server (subprocess) and the scripted LLM server; a conversation
calls `task`, its child conversation finishes at once, the parent finishes: median of 10 of
the whole round trip, of starting the child (from the LLM's task call to the child's first
LLM request) and of returning (from the child's finish to the parent's next LLM request).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events.tools.apply_patch import ApplyPatchAction
from events.tools.base import Observation
from events.tools.search import GlobAction, GrepAction
from tools.apply_patch import ApplyPatchTool
from tools.base import ToolContext
from tools.search import GlobTool, GrepTool, walk

DIRS, PER_DIR = 1_000, 100
PATCH_FILES, HUNKS, FILE_LINES = 20, 50, 400


def make_tree(root: Path) -> None:
    for d in range(DIRS):
        directory = root / f"pkg{d:04}"
        directory.mkdir()
        for f in range(PER_DIR):
            n = d * PER_DIR + f
            rare = "needle_rare\n" if n % 10_000 == 0 else ""
            (directory / f"mod{f:03}.py").write_text(f"# module {n}\ncommon = {n}\n{rare}")


async def timed(
    fn: Callable[[], Awaitable[Observation]], runs: int = 3
) -> tuple[float, Observation]:
    times, last = [], None
    for _ in range(runs):
        start = time.perf_counter()
        last = await fn()
        times.append((time.perf_counter() - start) * 1000)
    assert last is not None and not last.is_error, last
    return round(statistics.median(times), 1), last


def make_patch_files(root: Path) -> tuple[str, dict[Path, str]]:
    originals: dict[Path, str] = {}
    sections: list[str] = []
    hunks_left = HUNKS
    for i in range(PATCH_FILES):
        path = root / f"src/file{i:02}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(f"value_{i}_{n} = {n}\n" for n in range(FILE_LINES))
        path.write_text(text)
        originals[path] = text
        count = hunks_left // (PATCH_FILES - i)
        hunks_left -= count
        body = [f"*** Update File: src/file{i:02}.py"]
        for h in range(count):
            n = 10 + h * (FILE_LINES // (count + 1))
            body += [
                "@@",
                f" value_{i}_{n - 1} = {n - 1}",
                f"-value_{i}_{n} = {n}",
                f"+value_{i}_{n} = {n * 2}",
                f" value_{i}_{n + 1} = {n + 1}",
            ]
        sections.append("\n".join(body))
    return "*** Begin Patch\n" + "\n".join(sections) + "\n*** End Patch\n", originals


def subagent_round_trips(root: Path, runs: int = 10) -> dict[str, float]:
    from tests.support.api import events, wait_status
    from tests.support.llm import ScriptedLLM, call
    from tests.support.server import ServerProcess

    llm = ScriptedLLM().start()
    server = ServerProcess(root / "server-state").start()
    totals, starts, returns = [], [], []
    try:
        with server.client() as client:
            for i in range(runs + 1):  # the first warms litellm up and is not counted
                key = f"sub{i}"
                llm.script(
                    key,
                    call("task", prompt="answer 42"),
                    call("finish", message="42"),
                    call("finish", message="the child said 42"),
                )
                started = time.perf_counter()
                r = client.post(
                    "/api/conversations",
                    json={
                        "agent": {
                            "llm": {
                                "model": "openai/test-model",
                                "base_url": llm.base_url(key),
                                "api_key": "sk-bench",
                            },
                            "tools": [{"name": "task"}],
                        },
                        "workspace": {"working_dir": str(root / "ws")},
                        "initial_message": {
                            "content": [{"type": "text", "text": "go"}],
                            "run": True,
                        },
                    },
                )
                assert r.status_code == 201, r.text
                cid = r.json()["id"]
                assert wait_status(client, cid) == "finished"
                total = (time.perf_counter() - started) * 1000
                obs = events(client, cid, "ObservationEvent")[0]
                assert obs["observation"]["status"] == "completed", obs
                (_, task_answered), (child_asked, child_answered), (parent_asked, _) = llm.timings[
                    key
                ][:3]
                if i:
                    totals.append(total)
                    starts.append((child_asked - task_answered) * 1000)
                    returns.append((parent_asked - child_answered) * 1000)
    finally:
        server.stop()
        llm.stop()
    return {
        "round_trip": round(statistics.median(totals), 1),
        "start_child": round(statistics.median(starts), 1),
        "return_result": round(statistics.median(returns), 1),
    }


async def main() -> dict[str, Any]:
    out: dict[str, Any] = {"ripgrep": shutil.which("rg") is not None}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tree = root / "tree"
        tree.mkdir()
        start = time.perf_counter()
        make_tree(tree)
        out["tree_build_s"] = round(time.perf_counter() - start, 1)
        ctx = ToolContext("bench", working_dir=tree, state_dir=root / "state")
        grep, glob = GrepTool(ctx), GlobTool(ctx)
        real = walk.ripgrep
        for backend in ("ripgrep", "python"):
            if backend == "python":
                walk.ripgrep = lambda: None
            elif real() is None:
                continue
            rare_ms, rare = await timed(lambda: grep.run(GrepAction(pattern="needle_rare")))
            common_ms, common = await timed(lambda: grep.run(GrepAction(pattern="common")))
            glob_ms, _ = await timed(lambda: glob.run(GlobAction(pattern="**/*.py")))
            out[f"grep_100k_files_ms_{backend}"] = {
                "rare_10_matches": rare_ms,
                "every_file_matches": common_ms,
            }
            out[f"glob_100k_files_ms_{backend}"] = glob_ms
            assert len(rare.matches) == 10 and len(common.matches) == 100  # type: ignore[attr-defined]
        walk.ripgrep = real

        work = root / "patch"
        work.mkdir()
        patch, originals = make_patch_files(work)
        tool = ApplyPatchTool(ToolContext("bench", working_dir=work, state_dir=root / "state2"))
        times = []
        for _ in range(5):
            for path, text in originals.items():
                path.write_text(text)
            start = time.perf_counter()
            obs = await tool.run(ApplyPatchAction(patch=patch))
            times.append((time.perf_counter() - start) * 1000)
            assert not obs.is_error, obs.text
        out["apply_patch_50_hunks_20_files_ms"] = round(statistics.median(times), 1)
        (root / "ws").mkdir()
        out["subagent_round_trip_ms"] = await asyncio.to_thread(subagent_round_trips, root)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=1))
