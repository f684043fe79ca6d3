"""Control-plane figures (prints JSON): start latency, concurrent starts per strategy, webhook
ingest on SQLite and PostgreSQL, conversation search among 10,000 conversations, pause and
resume of a process sandbox, concurrent starts across two control-plane processes on one
PostgreSQL database, and the Docker provider's start, pause and resume.

    .venv/bin/python bench/control_plane.py [--starts 20] [--events 20000] [--conversations 10000]
        [--several 50] [--docker-starts 10] [--only several,pause_resume,docker] [--docker-only]

Everything is real: agent-server sandboxes, the scripted LLM, SQLite, a PostgreSQL server
started for the run (skipped when its binaries are absent), and Docker containers of the
sandbox image built as the tests build it (skipped, with the reason, where Docker is absent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select  # noqa: E402

from control_plane.store import Database, accounts  # noqa: E402
from control_plane.store.tables import app_conversations  # noqa: E402
from tests.control_plane.planes import kill_sandboxes, several  # noqa: E402
from tests.control_plane.postgres import PostgresServer, binaries  # noqa: E402
from tests.control_plane.support import ControlPlane, configure_llm, make_config  # noqa: E402
from tests.support import docker as docker_support  # noqa: E402
from tests.support.llm import ScriptedLLM, call  # noqa: E402
from tests.support.otlp import OTLPReceiver  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

STRATEGIES = (
    "NO_GROUPING",
    "GROUP_BY_NEWEST",
    "LEAST_RECENTLY_USED",
    "FEWEST_CONVERSATIONS",
    "ADD_TO_ANY",
)


def post_start(client: httpx.Client, body: dict[str, Any]) -> str:
    r = client.post("/api/v1/app-conversations", json=body)
    r.raise_for_status()
    task_id: str = r.json()["id"]
    return task_id


def wait_ready(client: httpx.Client, task_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task = client.get("/api/v1/app-conversations/start-tasks", params={"ids": task_id}).json()[
            0
        ]
        return task if task["status"] in ("READY", "ERROR") else None

    task: dict[str, Any] = wait_for(done, 120, interval=0.01)
    if task["status"] != "READY":
        raise RuntimeError(task["detail"])
    return task


def start_latency(plane: ControlPlane, llm: ScriptedLLM, n: int) -> dict[str, float]:
    """A new sandbox each time (NO_GROUPING): request -> READY, and -> first event stored."""
    client = plane.client(plane.new_user("latency"))
    configure_llm(client, llm.base_url("latency"), tools=["terminal"])
    ready, first_event = [], []
    for _ in range(n):
        llm.script("latency", call("finish", message="done"))
        began = time.monotonic()
        task = wait_ready(
            client,
            post_start(
                client,
                {"initial_message": {"content": [{"type": "text", "text": "hi"}], "run": True}},
            ),
        )
        ready.append(time.monotonic() - began)
        cid = task["app_conversation_id"]
        wait_for(
            lambda cid=cid: client.get(f"/api/v1/conversation/{cid}/events/count").json() > 0,
            60,
            interval=0.01,
        )
        first_event.append(time.monotonic() - began)
        client.delete(f"/api/v1/app-conversations/{cid}")
    return {
        "ready_median_s": round(statistics.median(ready), 3),
        "ready_max_s": round(max(ready), 3),
        "first_event_median_s": round(statistics.median(first_event), 3),
    }


def concurrent_starts(plane: ControlPlane, llm: ScriptedLLM, n: int) -> dict[str, Any]:
    """Per strategy: two RUNNING sandboxes exist, then n starts at once."""
    out = {}
    for strategy in STRATEGIES:
        key = plane.new_user(f"concurrent-{strategy}")
        client = plane.client(key)
        configure_llm(client, llm.base_url("idle"))
        seeds = [wait_ready(client, post_start(client, {}))["sandbox_id"] for _ in range(2)]
        client.patch("/api/v1/settings", json={"grouping_strategy": strategy})
        began = time.monotonic()

        def one(_: int, key: str = key) -> str:
            with plane.client(key) as own:
                sandbox: str = wait_ready(own, post_start(own, {}))["sandbox_id"]
                return sandbox

        with ThreadPoolExecutor(n) as pool:
            placed = Counter(pool.map(one, range(n)))
        out[strategy] = {
            "all_ready_s": round(time.monotonic() - began, 3),
            "into_existing": sum(placed[s] for s in seeds),
            "new_sandboxes": len([s for s in placed if s not in seeds]),
        }
        for sandbox in {*placed, *seeds}:
            client.delete(f"/api/v1/sandboxes/{sandbox}", params={"sandbox_id": sandbox})
    return out


def ingest(plane: ControlPlane, llm: ScriptedLLM, total: int, posters: int = 4) -> dict[str, float]:
    """Batches of 100 events POSTed to the webhook, `posters` conversations at once."""
    client = plane.client(plane.new_user("ingest"))
    configure_llm(client, llm.base_url("idle"))
    client.patch("/api/v1/settings", json={"grouping_strategy": "ADD_TO_ANY"})
    tasks = [wait_ready(client, post_start(client, {})) for _ in range(posters)]
    sid = tasks[0]["sandbox_id"]
    session = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["session_api_key"]

    def batch(start: int) -> list[dict[str, Any]]:
        return [
            {
                "id": f"01J{start + i:023d}",
                "timestamp": "2026-01-01T00:00:00+00:00",
                "source": "agent",
                "kind": "MessageEvent",
                "llm_message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "x" * 200}],
                },
            }
            for i in range(100)
        ]

    async def run() -> float:
        async with httpx.AsyncClient(
            base_url=plane.url, headers={"X-Session-API-Key": session}, timeout=60
        ) as http:

            async def poster(cid: str, offset: int) -> None:
                for start in range(offset, offset + total // posters, 100):
                    r = await http.post(f"/api/v1/webhooks/events/{cid}", json=batch(start))
                    while r.status_code == 429:  # the intake's bound: sent again, as the
                        waited[0] += 1  # agent server does, after its Retry-After
                        await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                        r = await http.post(f"/api/v1/webhooks/events/{cid}", json=batch(start))
                    r.raise_for_status()

            began = time.monotonic()
            await asyncio.gather(
                *(
                    poster(t["app_conversation_id"], i * total // posters)
                    for i, t in enumerate(tasks)
                )
            )
            return time.monotonic() - began

    waited = [0]
    elapsed = asyncio.run(run())
    return {
        "events": total,
        "seconds": round(elapsed, 3),
        "events_per_s": round(total / elapsed),
        "told_to_wait": waited[0],
    }


def search(plane: ControlPlane, n: int) -> dict[str, float]:
    """n conversation rows of one user (written straight to the store), then searches."""
    key = plane.new_user("search")
    client = plane.client(key)

    async def fill() -> None:
        db = Database(plane.config.db_url)
        user = await accounts.get_or_create_user(db, "search")
        from control_plane.store.tables import sandboxes

        sid = uuid.uuid4().hex
        moment = db.now()
        async with db.begin() as conn:
            await conn.execute(
                sandboxes.insert().values(
                    id=sid,
                    user_id=user.id,
                    spec_id="process",
                    status="MISSING",
                    session_key_hash=uuid.uuid4().hex,
                    session_key_enc="x",
                    root_dir="/nowhere",
                    created_at=moment,
                    updated_at=moment,
                    last_activity_at=moment,
                )
            )
            rows = [
                {
                    "id": str(uuid.uuid4()),
                    "user_id": user.id,
                    "sandbox_id": sid,
                    "started": True,
                    "title": f"conversation {i}",
                    "tags": {},
                    "working_dir": "/w",
                    "created_at": moment - timedelta(seconds=i),
                    "updated_at": moment,
                    "last_activity_at": moment,
                }
                for i in range(n)
            ]
            for i in range(0, n, 1000):
                await conn.execute(app_conversations.insert(), rows[i : i + 1000])
        await db.close()

    asyncio.run(fill())

    def timed(params: dict[str, Any], path: str = "/api/v1/app-conversations/search") -> float:
        samples = []
        for _ in range(10):
            began = time.monotonic()
            client.get(path, params=params).raise_for_status()
            samples.append(time.monotonic() - began)
        return round(statistics.median(samples) * 1000, 1)

    return {
        "conversations": n,
        "first_page_100_ms": timed({"limit": 100}),
        "deep_page_ms": timed({"limit": 100, "page_id": str(n - 200)}),
        "title_contains_ms": timed({"title__contains": "tion 999", "limit": 100}),
        "count_ms": timed({}, "/api/v1/app-conversations/count"),
    }


def docker_figures(n: int) -> dict[str, Any]:
    """The Docker provider: a start request to READY on a new container (cold) and into a
    RUNNING sandbox (reused), then pause and resume of a sandbox through the API (resume
    answers once /alive answers again), n of each; and what building the image took."""
    timings: dict[str, float] = {}
    try:
        daemon = docker_support.Daemon.ensure(Path(tempfile.gettempdir()) / "bench-dockerd.log")
    except docker_support.Unavailable as exc:
        return {"skipped": str(exc)}
    llm: ScriptedLLM | None = None
    try:
        began = time.monotonic()
        image = docker_support.sandbox_image(timings)
        build = {k: round(v, 1) for k, v in timings.items()}
        build["total_s"] = round(time.monotonic() - began, 1)
        with contextlib.closing(docker_support.client()) as engine:
            gateway = docker_support.bridge_gateway(engine)
        llm = ScriptedLLM(host=gateway).start()
        with tempfile.TemporaryDirectory() as tmp:
            config = make_config(
                Path(tmp) / "docker", host="0.0.0.0", sandbox_provider="docker", sandbox_image=image
            )
            plane = ControlPlane(config).start()
            try:
                return {"image_build_s": build, **docker_starts(plane, llm, n)}
            finally:
                plane.stop()
    finally:
        if llm is not None:
            llm.stop()
        daemon.stop()


def docker_starts(
    plane: ControlPlane, llm: ScriptedLLM, n: int, before_each: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """`before_each`: waits before each new sandbox's start (for a warm pool to be full)."""
    client = plane.client(plane.new_user("docker"), timeout=120)
    configure_llm(client, llm.base_url("idle", host="host.docker.internal"))

    def ready_s(body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        began = time.monotonic()
        task = wait_ready(client, post_start(client, body))
        return time.monotonic() - began, task

    client.patch("/api/v1/settings", json={"grouping_strategy": "NO_GROUPING"})
    cold, sandboxes = [], []
    for _ in range(n):
        before_each()
        seconds, task = ready_s({})
        cold.append(seconds)
        sandboxes.append(task["sandbox_id"])
    reused = [ready_s({"sandbox_id": sandboxes[0]})[0] for _ in range(n)]
    pause, resume = [], []
    for sandbox in sandboxes:
        for samples, action in ((pause, "pause"), (resume, "resume")):
            began = time.monotonic()
            client.post(f"/api/v1/sandboxes/{sandbox}/{action}").raise_for_status()
            samples.append(time.monotonic() - began)
    destroy = []
    for sandbox in sandboxes:
        began = time.monotonic()
        client.delete(
            f"/api/v1/sandboxes/{sandbox}", params={"sandbox_id": sandbox}
        ).raise_for_status()
        destroy.append(time.monotonic() - began)

    def figures(samples: list[float]) -> dict[str, float]:
        return {"median_s": round(statistics.median(samples), 3), "max_s": round(max(samples), 3)}

    return {
        "starts": n,
        "cold_container_to_ready": figures(cold),
        "reused_sandbox_to_ready": figures(reused),
        "pause": figures(pause),
        "resume_to_alive": figures(resume),
        "delete": figures(destroy),
    }


def pause_resume(plane: ControlPlane, llm: ScriptedLLM, n: int = 10) -> dict[str, float]:
    """POST pause and POST resume of an idle process sandbox, answered (frozen, then /alive)."""
    client = plane.client(plane.new_user("pause-resume"))
    configure_llm(client, llm.base_url("idle"))
    sid = wait_ready(client, post_start(client, {}))["sandbox_id"]
    pauses, resumes = [], []
    for _ in range(n):
        began = time.monotonic()
        client.post(f"/api/v1/sandboxes/{sid}/pause").raise_for_status()
        pauses.append(time.monotonic() - began)
        began = time.monotonic()
        client.post(f"/api/v1/sandboxes/{sid}/resume").raise_for_status()
        resumes.append(time.monotonic() - began)
    client.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid})
    return {
        "rounds": n,
        "pause_median_ms": round(statistics.median(pauses) * 1000, 1),
        "pause_max_ms": round(max(pauses) * 1000, 1),
        "resume_median_ms": round(statistics.median(resumes) * 1000, 1),
        "resume_max_ms": round(max(resumes) * 1000, 1),
    }


def several_planes(
    root: Path, postgres: PostgresServer, llm: ScriptedLLM, n: int, cap: int = 5, warm: bool = False
) -> dict[str, Any]:
    """n starts at once, alternately to two control-plane processes on one PostgreSQL database
    (ADD_TO_ANY, `cap` conversations a sandbox): request to every task READY or ERROR; none
    lost (every task ends), none doubled (one conversation row per task), none over capacity.

    Cold, no sandbox is RUNNING when the burst comes, so each start makes its own (grouping
    only joins RUNNING ones) and the figure is mostly sandbox boots on this machine; `warm`
    first starts n / cap sandboxes, so the figure is the control planes' own work."""
    url = postgres.new_database()
    planes = several(root, url, 2, max_conversations_per_sandbox=str(cap))
    try:
        key = planes[0].new_key("several")
        clients = [
            httpx.Client(base_url=p.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
            for p in planes
        ]
        configure_llm(clients[0], llm.base_url("idle"))
        clients[0].patch("/api/v1/settings", json={"grouping_strategy": "ADD_TO_ANY"})
        if warm:
            seeds = [
                clients[0].post("/api/v1/sandboxes", json={}).json()["id"] for _ in range(n // cap)
            ]
            wait_for(
                lambda: all(
                    s["status"] == "RUNNING"
                    for s in clients[0].get("/api/v1/sandboxes", params={"id": seeds}).json()
                ),
                300,
                interval=0.2,
            )
        began = time.monotonic()

        def one(i: int) -> str:
            return post_start(clients[i % 2], {})

        with ThreadPoolExecutor(n) as pool:
            ids = list(pool.map(one, range(n)))
        posted = time.monotonic() - began

        def finished() -> list[dict[str, Any]] | None:
            found: list[dict[str, Any]] = (
                clients[0].get("/api/v1/app-conversations/start-tasks", params={"ids": ids}).json()
            )
            return found if all(t["status"] in ("READY", "ERROR") for t in found) else None

        done = wait_for(finished, 600, interval=0.05)
        elapsed = time.monotonic() - began

        async def rows() -> int:
            db = Database(url)
            try:
                async with db.connect() as conn:
                    return int(
                        await conn.scalar(select(func.count()).select_from(app_conversations)) or 0
                    )
            finally:
                await db.close()

        stored = asyncio.run(rows())
        items = clients[0].get("/api/v1/sandboxes/search").json()["items"]
        statuses = Counter(t["status"] for t in done)
        for client in clients:
            client.close()
        return {
            "starts": n,
            "control_planes": 2,
            "all_posted_s": round(posted, 3),
            "into_running_sandboxes": warm,
            "all_finished_s": round(elapsed, 3),
            "starts_per_s": round(n / elapsed, 2),
            "ready": statuses["READY"],
            "error": statuses["ERROR"],
            "lost": n - len(done),
            "doubled": stored - len({t["app_conversation_id"] for t in done}),
            "sandboxes": len(items),
            "over_capacity": sum(1 for s in items if s["conversation_count"] > cap),
        }
    finally:
        for plane in planes:
            plane.stop()
        for plane in planes:
            kill_sandboxes(plane.state_dir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--conversations", type=int, default=10000)
    parser.add_argument("--docker-starts", type=int, default=10)
    parser.add_argument(
        "--docker-only", action="store_true", help="only the Docker provider's figures"
    )
    parser.add_argument(
        "--several", type=int, default=50, help="starts across two control planes on PostgreSQL"
    )
    parser.add_argument("--only", default="", help="comma-separated sections (default: all)")
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="the SQLite control plane records and exports its spans (to a local OTLP "
        "receiver): run with and without for tracing's overhead",
    )
    args = parser.parse_args()
    only = {"docker"} if args.docker_only else set(filter(None, args.only.split(",")))

    def wanted(section: str) -> bool:
        return not only or section in only

    results: dict[str, Any] = {}
    if only and only <= {"docker"}:
        print(json.dumps({"docker": docker_figures(args.docker_starts)}, indent=2))
        return
    llm = ScriptedLLM().start()
    receiver = OTLPReceiver().start() if args.tracing else None
    traced = {"otlp_traces_endpoint": receiver.base_url + "/v1/traces"} if receiver else {}
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(make_config(Path(tmp) / "sqlite", **traced)).start()
        try:
            if wanted("start_latency"):
                results["start_latency"] = start_latency(plane, llm, args.starts)
            if wanted("concurrent_starts"):
                results["concurrent_starts"] = concurrent_starts(plane, llm, args.starts)
            if wanted("ingest"):
                results["ingest_sqlite"] = ingest(plane, llm, args.events)
            if wanted("search"):
                results["search_sqlite"] = search(plane, args.conversations)
            if wanted("pause_resume"):
                results["pause_resume_process"] = pause_resume(plane, llm)
        finally:
            plane.stop()
        bindir = binaries()
        if bindir is not None:
            postgres = PostgresServer(bindir).start()
            try:
                if wanted("ingest") or wanted("search"):
                    plane = ControlPlane(
                        make_config(Path(tmp) / "pg", postgres.new_database())
                    ).start()
                    try:
                        if wanted("ingest"):
                            results["ingest_postgresql"] = ingest(plane, llm, args.events)
                        if wanted("search"):
                            results["search_postgresql"] = search(plane, args.conversations)
                    finally:
                        plane.stop()
                if wanted("several"):
                    results["several_control_planes_cold"] = several_planes(
                        Path(tmp) / "several", postgres, llm, args.several
                    )
                    results["several_control_planes_warm"] = several_planes(
                        Path(tmp) / "several-warm", postgres, llm, args.several, warm=True
                    )
            finally:
                postgres.stop()
    llm.stop()
    if receiver is not None:
        results["spans_received"] = len(receiver.received())
        receiver.stop()
    if wanted("docker"):
        results["docker"] = docker_figures(args.docker_starts)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
