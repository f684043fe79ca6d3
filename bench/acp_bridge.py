"""`agent-server acp`: what the bridge adds to a prompt, how fast a session loads, its memory.

    .venv/bin/python bench/acp_bridge.py [--steps 20] [--history 300] [--runs 3]

Prints one JSON object. A real agent server and the scripted LLM (tests/support), and the
bridge spawned as an editor spawns it, driven by the scripted editor of the tests:

- prompt_s: a prompt whose run takes `--steps` terminal steps (`echo`), from session/prompt to
  its answer (median of `--runs`, after one run of each kind to warm the server up: litellm's
  import, the first shell); direct_s: the same run through the server's own interface (POST
  the message, read the websocket until the run rests), so the difference is the bridge's
  (its process reading the socket beside the run, the translation, the ACP frames);
- updates: the session updates that prompt sent;
- load_s: session/load of a conversation of `--history` steps (about 3 events a step), from
  the request to its answer, every update replayed first; updates_per_s: the replay's rate;
- bridge_rss_mib: the bridge's resident memory after that load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from tests.support.acp_client import editor_process, start, text  # noqa: E402
from tests.support.llm import Reply, ScriptedLLM, call  # noqa: E402
from tests.support.server import KEY, ServerProcess  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def steps(llm: ScriptedLLM, key: str, n: int, tool: str = "terminal") -> None:
    replies: list[Reply] = [
        call("terminal", command=f"echo step-{i}")
        if tool == "terminal"
        else call("think", thought=f"step {i}")
        for i in range(n)
    ]
    llm.script(key, *replies, call("finish", message="done"))


def agent(llm: ScriptedLLM, key: str) -> dict[str, Any]:
    return {
        "llm": {
            "model": "openai/test-model",
            "base_url": llm.base_url(key),
            "api_key": "sk-bench",
            "num_retries": 0,
        },
        "tools": [{"name": "terminal"}],
    }


async def direct(server: ServerProcess, llm: ScriptedLLM, key: str, work: Path, n: int) -> float:
    async with httpx.AsyncClient(
        base_url=server.url, headers={"X-Session-API-Key": KEY}, timeout=60
    ) as client:
        r = await client.post(
            "/api/conversations",
            json={
                "agent": agent(llm, key),
                "workspace": {"working_dir": str(work)},
                "confirmation_policy": {"kind": "NeverConfirm"},
            },
        )
        cid = r.json()["id"]
        steps(llm, key, n)
        url = server.url.replace("http", "ws") + f"/sockets/events/{cid}"
        async with connect(
            url, additional_headers={"X-Session-API-Key": KEY}, max_size=None
        ) as socket:
            await socket.recv()  # the full_state snapshot: subscribed
            began = time.perf_counter()
            await client.post(
                f"/api/conversations/{cid}/events",
                json={"role": "user", "content": [{"type": "text", "text": "go"}], "run": True},
            )
            async for frame in socket:
                event = json.loads(frame)
                if event.get("key") == "execution_status" and event.get("value") == "finished":
                    return time.perf_counter() - began
    raise RuntimeError("the run did not finish")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--history", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="acp-bench-"))
    llm = ScriptedLLM().start()
    server = ServerProcess(tmp / "state").start()
    out: dict[str, Any] = {"steps": args.steps, "history_steps": args.history}
    try:
        (tmp / "agent.json").write_text(json.dumps(agent(llm, "bench")))
        env = {
            "AGENT_SERVER_URL": server.url,
            "SESSION_API_KEY": KEY,
            "AGENT_SERVER_ACP_AGENT_FILE": str(tmp / "agent.json"),
            "AGENT_SERVER_ACP_APPROVAL": "always-approve",
        }
        work = tmp / "project"
        work.mkdir()
        prompts, directs, updates = [], [], 0
        async with editor_process(env, work) as editor:
            await start(editor)
            for run in range(args.runs + 1):
                sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
                steps(llm, "bench", args.steps)
                began = time.perf_counter()
                await editor.conn.prompt(session_id=sid, prompt=text("go"))
                took = time.perf_counter() - began
                updates = len(editor.of(sid))
                took_direct = await direct(server, llm, f"direct-{run}", work, args.steps)
                if run:  # the first of each warms up
                    prompts.append(took)
                    directs.append(took_direct)
            # A long conversation to load.
            sid = (await editor.conn.new_session(cwd=str(work), mcp_servers=[])).session_id
            steps(llm, "bench", args.history, tool="think")
            await editor.conn.prompt(session_id=sid, prompt=text("think a lot"))
        out.update(
            prompt_s=round(statistics.median(prompts), 3),
            direct_s=round(statistics.median(directs), 3),
            updates=updates,
        )
        async with editor_process(env, work) as editor:
            await start(editor)
            began = time.perf_counter()
            await editor.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
            took = time.perf_counter() - began
            replayed = len(editor.of(sid))
            out.update(
                load_s=round(took, 3),
                replayed_updates=replayed,
                updates_per_s=round(replayed / took),
                bridge_rss_mib=rss_mib(editor.process.pid),
            )  # type: ignore[attr-defined]
    finally:
        server.stop()
        llm.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
