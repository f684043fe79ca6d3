"""What one host holds: N hibernated sandboxes and M idle ones at once (prints JSON).

    .venv/bin/python bench/capacity.py [--idle 500] [--hibernated 5000] [--parallel 8] \
        [--hibernated-until HH:MM] [--no-restart]

A real control plane (`python -m control_plane`, a process of its own, so its RSS and CPU are
its own) with the process provider as it runs by default as root (bubblewrap, the template,
a disk, a network namespace and cgroups per sandbox), SQLite, the scripted LLM on loopback:

1. Hibernated: `--hibernated` sandboxes, each made as cheaply as the API allows: `POST
   /api/v1/sandboxes` (no conversation), polled until RUNNING, then `POST .../pause`, which
   with CONTROL_PLANE_SANDBOX_HIBERNATION=always ends its processes, takes back its network
   namespace and cgroups and unmounts its disk. `--parallel` of these at once.
2. Idle: `--idle` sandboxes, each from a start request with a first message (NO_GROUPING:
   one sandbox each) that the scripted LLM answers with `finish`; idle once its conversation
   has finished (RUNNING, its agent has answered once). `--parallel` at once.

Then, with all of them there: the host's memory (MemAvailable's drop since before the control
plane started; the PSS and USS of the idle sandboxes' processes summed, as bench/density.py
reads them; the template's), the disk each hibernated sandbox holds (its sparse images' real
blocks, as `du` counts them), the mounts, loop devices, network namespaces and cgroups held
(by idle and by hibernated ones), whether the control plane still answers (its sandbox list,
a batch read, a new start to READY, a hibernated sandbox resumed to RUNNING) and what it holds
itself (RSS, descriptors, CPU while nothing is asked of it); an idle sandbox hibernated among
all the others' processes; then the control plane SIGKILLed and a new one started on the same
state, timed until it answers (it adopts every live sandbox first). Last, every sandbox
deleted through the API (timed), the control plane stopped and what is left checked.
`--hibernated-until` (UTC) stops making hibernated sandboxes at that time and goes on with
those made, for a run that must end by a deadline.

The caps it meets are raised through the control plane's variables: CONTROL_PLANE_MAX_SANDBOXES
and _MAX_SANDBOXES_PER_USER (at most 10,000 per user), the sandbox subnet (a /24 per test
deployment holds 253 running sandboxes; this one gets what `--idle` needs) and the idle time
(a day, so no idle sandbox is paused by its timer while the others are made). The rest are
the defaults: health checks every 5 s, the reconciler's rounds of at most 200 sandboxes.
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import ipaddress
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.density import memory_kib  # noqa: E402
from control_plane.providers.process.environment import ready_marker  # noqa: E402
from control_plane.providers.process.isolation import _uids_in_use  # noqa: E402
from core.procfs import list_processes  # noqa: E402
from tests.support.internet import Internet, forget_subnet  # noqa: E402
from tests.support.llm import ScriptedLLM, call, free_port  # noqa: E402
from tests.support.proc import cpu_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
OPERATOR = "operator-key-for-capacity-" + "0" * 16
FIRST = {
    "initial_message": {
        "role": "user",
        "content": [{"type": "text", "text": "hello"}],
        "run": True,
    }
}
ENDED = ("finished", "idle", "error", "stuck", "paused")


def log(*parts: Any) -> None:
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    print(f"[{stamp} load {os.getloadavg()[0]:.1f}]", *parts, file=sys.stderr, flush=True)


def summary(values: list[float], digits: int = 3) -> dict[str, Any] | None:
    if not values:
        return None
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {
        "n": len(ordered),
        "median": round(statistics.median(ordered), digits),
        "p95": round(p95, digits),
        "max": round(ordered[-1], digits),
    }


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable")


# -- the control plane, a process of its own ----------------------------------------------------


class Plane:
    def __init__(
        self,
        state: Path,
        subnet: ipaddress.IPv4Network,
        dns: str,
        total: int,
        **env: str,
    ) -> None:
        """`env`: more of the control plane's variables (over these)."""
        self.state = state
        self.subnet = subnet
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cap = total + 50
        self.env = {
            **os.environ,
            "CONTROL_PLANE_STATE_DIR": str(state),
            "CONTROL_PLANE_HOST": "127.0.0.1",
            "CONTROL_PLANE_PORT": str(self.port),
            "CONTROL_PLANE_MAX_SANDBOXES": str(cap),
            "CONTROL_PLANE_MAX_SANDBOXES_PER_USER": str(min(cap, 10_000)),
            "CONTROL_PLANE_SANDBOX_HIBERNATION": "always",
            "CONTROL_PLANE_SANDBOX_SUBNET": str(subnet),
            "CONTROL_PLANE_SANDBOX_DNS_UPSTREAM": dns,
            "CONTROL_PLANE_IDLE_SECONDS": "86400",
            "CONTROL_PLANE_STOP_SANDBOXES_ON_EXIT": "true",
            "CONTROL_PLANE_OPERATOR_KEY": OPERATOR,
            "CONTROL_PLANE_LOG_LEVEL": "warning",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = state.parent / "control-plane.log"

    def new_key(self, user: str) -> str:
        done = subprocess.run(
            [str(PYTHON), "-m", "control_plane", "keys", "create", "--user", user],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip().splitlines()[-1]

    def start(self) -> None:
        out = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps its own copy)
        self.process = subprocess.Popen(
            [str(PYTHON), "-m", "control_plane", "serve"],
            env=self.env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )
        out.close()
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the control plane exited: see {self.log_path}")
            try:
                if httpx.get(self.url + "/alive", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the control plane did not start")
            time.sleep(0.1)
        socket = self.state / "template" / "template.sock"
        while not socket.exists():  # forks from the template, as by default
            if time.monotonic() > deadline + 120:
                raise RuntimeError("the sandbox template did not come up")
            time.sleep(0.2)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self, timeout: float = 1800) -> float | None:
        """SIGTERM, and the seconds it took to exit (it stops what is left of its sandboxes)."""
        if self.process is None or self.process.poll() is not None:
            return None
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return round(time.monotonic() - began, 2)

    def status(self) -> dict[str, Any]:
        """Its own memory (kB as the kernel says), descriptors and threads."""
        fields: dict[str, Any] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM", "Threads"):
                fields[name] = int(rest.split()[0])
        return {
            "rss_mib": round(fields["VmRSS"] / 1024, 1),
            "peak_rss_mib": round(fields["VmHWM"] / 1024, 1),
            "threads": fields["Threads"],
            "open_fds": len(os.listdir(f"/proc/{self.pid}/fd")),
        }

    def restart(self) -> dict[str, Any]:
        """SIGKILL (a crash: its sandboxes live on in their own sessions), then a new control
        plane on the same state: the seconds until it answers (it adopts every live sandbox
        before it serves)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        began = time.monotonic()
        self.start()
        alive = time.monotonic() - began
        return {"to_alive_s": round(alive, 2)}

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)


# -- many waits, one batch read per round ---------------------------------------------------------


class Poller:
    """Waits for many records at once: each round, one batch GET per 100 ids waited on."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        path: str,
        param: str,
        done: Callable[[dict[str, Any]], bool],
        interval: float = 0.1,
    ) -> None:
        self.client, self.path, self.param, self.done = client, path, param, done
        self.interval = interval
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.task: asyncio.Task[None] | None = None

    async def wait(self, key: str, timeout: float = 300) -> dict[str, Any]:
        if self.task is None:
            self.task = asyncio.create_task(self._run())
        future = self.pending[key] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(key, None)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            keys = list(self.pending)
            for offset in range(0, len(keys), 100):
                chunk = keys[offset : offset + 100]
                try:
                    answer = await self.client.get(self.path, params={self.param: chunk})
                    answer.raise_for_status()
                except httpx.HTTPError:
                    continue
                for key, record in zip(chunk, answer.json()):
                    future = self.pending.get(key)
                    if record and future is not None and not future.done() and self.done(record):
                        future.set_result(record)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def workers(
    count: int,
    parallel: int,
    one: Callable[[int], Awaitable[None]],
    until: float | None = None,
) -> None:
    """`one(i)` for i in range(count), `parallel` at a time; none begun after `until` (a
    time.time())."""
    queue = iter(range(count))

    async def worker() -> None:
        for i in queue:
            if until is not None and time.time() >= until:
                return
            await one(i)

    await asyncio.gather(*(worker() for _ in range(parallel)))


class Progress:
    def __init__(self, what: str, total: int, every: int) -> None:
        self.what, self.total, self.every = what, total, every
        self.began = time.monotonic()
        self.done = 0
        self.failed: Counter[str] = Counter()

    def tick(self, failure: str | None = None) -> None:
        self.done += 1
        if failure:
            self.failed[failure[:160]] += 1
        if self.done % self.every == 0 or self.done == self.total:
            spent = time.monotonic() - self.began
            rate = self.done / spent
            left = (self.total - self.done) / rate if rate else float("nan")
            log(
                f"{self.what}: {self.done}/{self.total} in {spent:.0f} s "
                f"({rate:.2f}/s, {left:.0f} s left), failed {sum(self.failed.values())}"
            )


# -- phase 1: hibernated sandboxes -----------------------------------------------------------------


async def hibernated(
    client: httpx.AsyncClient, count: int, parallel: int, until: float | None = None
) -> tuple[list[str], dict[str, Any]]:
    rows = Poller(client, "/api/v1/sandboxes", "id", lambda r: r["status"] != "STARTING")
    made: list[str] = []
    up_s: list[float] = []
    pause_s: list[float] = []
    progress = Progress("hibernated", count, max(1, min(250, count // 10)))

    async def one(_: int) -> None:
        began = time.monotonic()
        try:
            answer = await client.post("/api/v1/sandboxes", json={})
            if answer.status_code != 201:
                progress.tick(f"create {answer.status_code}: {answer.text}")
                return
            sandbox_id = answer.json()["id"]
            row = await rows.wait(sandbox_id)
            if row["status"] != "RUNNING":
                made.append(sandbox_id)  # (deleted at the end with the rest)
                progress.tick(f"{row['status']}: {row.get('status_detail')}")
                return
            up = time.monotonic()
            up_s.append(up - began)
            answer = await client.post(f"/api/v1/sandboxes/{sandbox_id}/pause", timeout=300)
            made.append(sandbox_id)
            if answer.status_code != 200 or answer.json()["status"] != "PAUSED":
                progress.tick(f"pause {answer.status_code}: {answer.text}")
                return
            pause_s.append(time.monotonic() - up)
            progress.tick()
        except (httpx.HTTPError, TimeoutError) as exc:
            progress.tick(f"{type(exc).__name__}: {exc}")

    began = time.monotonic()
    try:
        await workers(count, parallel, one, until)
    finally:
        rows.close()
    wall = time.monotonic() - began
    return made, {
        "asked": count,
        "cut_short_at_deadline": until is not None and len(made) < count,
        "hibernated": len(pause_s),
        "failed": dict(progress.failed),
        "wall_s": round(wall, 1),
        "per_second": round(len(pause_s) / wall, 2) if wall else None,
        "create_to_running_s": summary(up_s),
        "pause_to_hibernated_s": summary(pause_s),
    }


# -- phase 2: idle sandboxes, each after a first conversation --------------------------------------


async def idle(
    client: httpx.AsyncClient, count: int, parallel: int
) -> tuple[list[str], dict[str, Any]]:
    tasks = Poller(
        client,
        "/api/v1/app-conversations/start-tasks",
        "ids",
        lambda t: t["status"] in ("READY", "ERROR"),
    )
    conversations = Poller(
        client,
        "/api/v1/app-conversations",
        "ids",
        lambda c: str(c.get("execution_status") or "").lower() in ENDED,
        interval=0.25,
    )
    made: list[str] = []
    ready_s: list[float] = []
    answered_s: list[float] = []
    ends: Counter[str] = Counter()
    progress = Progress("idle", count, max(1, min(50, count // 10)))

    async def one(_: int) -> None:
        began = time.monotonic()
        try:
            answer = await client.post("/api/v1/app-conversations", json=FIRST)
            if answer.status_code != 201:
                progress.tick(f"start {answer.status_code}: {answer.text}")
                return
            task = await tasks.wait(answer.json()["id"])
            if task.get("sandbox_id"):
                made.append(task["sandbox_id"])
            if task["status"] != "READY":
                progress.tick(f"task {task['status']}: {task.get('detail')}")
                return
            ready_s.append(time.monotonic() - began)
            record = await conversations.wait(task["app_conversation_id"])
            ends[str(record["execution_status"]).lower()] += 1
            answered_s.append(time.monotonic() - began)
            progress.tick()
        except (httpx.HTTPError, TimeoutError) as exc:
            progress.tick(f"{type(exc).__name__}: {exc}")

    began = time.monotonic()
    try:
        await workers(count, parallel, one)
    finally:
        tasks.close()
        conversations.close()
    wall = time.monotonic() - began
    return made, {
        "asked": count,
        "idle": len(answered_s),
        "failed": dict(progress.failed),
        "conversations_ended": dict(ends),
        "wall_s": round(wall, 1),
        "per_second": round(len(answered_s) / wall, 2) if wall else None,
        "start_to_ready_s": summary(ready_s),
        "start_to_answered_s": summary(answered_s),
    }


# -- what the host holds ---------------------------------------------------------------------------


def processes() -> dict[int, tuple[int, int, str | None, bytes]]:
    """Every process once: pid -> (ppid, pgid, pid namespace, command line)."""
    found = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                ns: str | None = os.readlink(f"/proc/{pid}/ns/pid")
            except OSError:
                continue
            rest = stat[stat.rfind(b")") + 2 :].split()
            found[pid] = (int(rest[1]), int(rest[2]), ns, cmdline)
    return found


def sandbox_processes(state: Path, ids: list[str]) -> dict[str, list[int]]:
    """Each sandbox's processes, as bench/density.py finds them (its launcher, which leads its
    group and names its ready file; all below it; all in the pid namespaces below it, where
    the server forked from the template is), in one pass over /proc."""
    table = processes()
    ours = os.readlink("/proc/self/ns/pid")
    children: dict[int, list[int]] = {}
    by_ns: dict[str, list[int]] = {}
    for pid, (ppid, _, ns, _) in table.items():
        children.setdefault(ppid, []).append(pid)
        if ns is not None:
            by_ns.setdefault(ns, []).append(pid)
    wanted = {str(state / "sandboxes" / i / "ready.json").encode(): i for i in ids}
    found: dict[str, list[int]] = {}
    for pid, (_, pgid, _, cmdline) in table.items():
        if pid != pgid:
            continue
        for argument in cmdline.split(b"\0"):
            if argument in wanted:
                below, todo = set(), [pid]
                while todo:
                    current = todo.pop()
                    below.add(current)
                    todo.extend(children.get(current, []))
                for member in list(below):
                    ns = table[member][2] if member in table else None
                    if ns not in (None, ours):
                        below.update(by_ns.get(ns, []))
                found[wanted[argument]] = sorted(below)
                break
    return found


def marked_sandboxes(state: Path, ids: list[str]) -> int:
    """How many of these sandboxes have any process left (each of a sandbox's processes
    carries its mark in its environment), in one pass over /proc."""
    marks = {ready_marker(state / "sandboxes" / i): i for i in ids}
    name = next(iter(marks)).split(b"=", 1)[0] + b"=" if marks else b""
    seen = set()
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if name and name in environ:
                for item in environ.split(b"\0"):
                    if item in marks:
                        seen.add(marks[item])
    return len(seen)


def held(state: Path, ids: list[str]) -> dict[str, Any]:
    """Mounts, loop devices, network namespaces and cgroups these sandboxes hold."""
    wanted = set(ids)
    sandboxes = state / "sandboxes"
    mounts = 0
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(line.split()[4])
        for candidate in (point, point.parent):
            if candidate.parent == sandboxes and candidate.name in wanted:
                mounts += 1
                break
    loops = 0
    looped = set()
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            name = Path(backing.read_text().strip()).name
        except OSError:
            continue
        if name.split(".")[0] in wanted:
            loops += 1
            looped.add(name.split(".")[0])
    netns = (
        sum(1 for n in os.listdir("/run/netns") if n.startswith("as-") and n[3:] in wanted)
        if os.path.isdir("/run/netns")
        else 0
    )
    groups = 0
    for parent in Path("/sys/fs/cgroup").glob("*/agent-sandboxes"):
        groups += sum(1 for child in parent.iterdir() if child.name in wanted)
    found: dict[str, Any] = {
        "mounts": mounts,
        "loop_devices": loops,
        "netns": netns,
        "cgroups": groups,
    }
    if looped and not mounts:  # bound, yet mounted nowhere here: whose mount namespace?
        found["loops_held_by"] = loop_holders(looped)
    return found


def loop_holders(ids: set[str], most: int = 8) -> list[dict[str, Any]]:
    """Processes whose mount namespace still has a filesystem of these sandboxes mounted."""
    holders = []
    seen_ns = set()
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                ns = os.readlink(f"/proc/{entry.name}/ns/mnt")
                if ns in seen_ns:
                    continue
                text = Path(f"/proc/{entry.name}/mountinfo").read_text()
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            except OSError:
                continue
            inside = sorted(i for i in ids if i in text)
            if inside:
                seen_ns.add(ns)
                holders.append(
                    {
                        "pid": int(entry.name),
                        "mnt_ns": ns,
                        "cmdline": cmdline.replace(b"\0", b" ").decode(errors="replace")[:160],
                        "sandboxes": len(inside),
                    }
                )
                if len(holders) >= most:
                    break
    return holders


def disk_of(state: Path, ids: list[str]) -> dict[str, Any]:
    """The host's disk each sandbox holds: its images (sparse: their real blocks, as `du`
    counts them, and their apparent size) and its directory."""
    real, apparent = [], []
    for sandbox_id in ids:
        blocks = size = 0
        for path in (
            state / "disks" / f"{sandbox_id}.ext4",
            state / "disks" / f"{sandbox_id}.state.ext4",
        ):
            try:
                st = path.stat()
            except OSError:
                continue
            blocks += st.st_blocks * 512
            size += st.st_size
        root = state / "sandboxes" / sandbox_id
        if root.exists() and not os.path.ismount(root):  # unmounted: the host's own bytes
            for folder, _, files in os.walk(root):
                for name in [".", *files]:
                    try:
                        blocks += os.lstat(os.path.join(folder, name)).st_blocks * 512
                    except OSError:
                        pass
        real.append(blocks / 1024**2)
        apparent.append(size / 1024**3)
    return {
        "real_mib": summary(real, 2),
        "real_total_gib": round(sum(real) / 1024, 2),
        "apparent_gib_each": round(statistics.median(apparent), 2) if apparent else None,
    }


def du_kib(path: Path) -> int:
    done = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.stdout else 0


# -- does it still answer --------------------------------------------------------------------------


async def timed(request: Awaitable[httpx.Response]) -> tuple[float, httpx.Response]:
    began = time.monotonic()
    answer = await request
    return time.monotonic() - began, answer


async def answers(
    client: httpx.AsyncClient, total: int, sandbox_ids: list[str], hibernated_ids: list[str]
) -> dict[str, Any]:
    alive, first, deep, batch = [], [], [], []
    for _ in range(10):
        alive.append((await timed(client.get("/alive")))[0])
        seconds, answer = await timed(client.get("/api/v1/sandboxes/search", params={"limit": 100}))
        answer.raise_for_status()
        first.append(seconds)
    for _ in range(5):
        seconds, answer = await timed(
            client.get(
                "/api/v1/sandboxes/search",
                params={"limit": 100, "page_id": str(max(0, total - 100))},
            )
        )
        answer.raise_for_status()
        deep.append(seconds)
        seconds, answer = await timed(
            client.get("/api/v1/sandboxes", params={"id": sandbox_ids[-100:]})
        )
        answer.raise_for_status()
        batch.append(seconds)
    began, listed, page = time.monotonic(), 0, None
    while True:
        params: dict[str, Any] = {"limit": 100}
        if page:
            params["page_id"] = page
        body = (await client.get("/api/v1/sandboxes/search", params=params)).json()
        listed += len(body["items"])
        page = body["next_page_id"]
        if not page:
            break
    walk = time.monotonic() - began

    new_ready = []
    for _ in range(3):
        began = time.monotonic()
        answer = await client.post("/api/v1/app-conversations", json=FIRST)
        answer.raise_for_status()
        task_id = answer.json()["id"]
        while True:
            task = (
                await client.get("/api/v1/app-conversations/start-tasks", params={"ids": task_id})
            ).json()[0]
            if task["status"] in ("READY", "ERROR"):
                break
            await asyncio.sleep(0.01)
        if task["status"] != "READY":
            raise RuntimeError(f"a new start failed: {task.get('detail')}")
        new_ready.append(time.monotonic() - began)
        sandbox_ids.append(task["sandbox_id"])

    resumed = []
    for sandbox_id in hibernated_ids[: min(3, len(hibernated_ids))]:
        seconds, answer = await timed(
            client.post(f"/api/v1/sandboxes/{sandbox_id}/resume", timeout=120)
        )
        answer.raise_for_status()
        if answer.json()["status"] != "RUNNING":
            raise RuntimeError(f"resumed, {answer.json()['status']}")
        resumed.append(seconds)
    return {
        "alive_s": summary(alive, 4),
        "sandbox_list_first_page_s": summary(first, 3),
        "sandbox_list_last_page_s": summary(deep, 3),
        "sandbox_batch_get_100_s": summary(batch, 3),
        "sandbox_list_all_pages": {"sandboxes": listed, "seconds": round(walk, 2)},
        "new_start_to_ready_s": [round(s, 3) for s in new_ready],
        "hibernated_resume_to_running_s": [round(s, 3) for s in resumed],
    }


async def every_sandbox(client: httpx.AsyncClient) -> list[str]:
    ids: list[str] = []
    page = None
    while True:
        params: dict[str, Any] = {"limit": 100}
        if page:
            params["page_id"] = page
        body = (await client.get("/api/v1/sandboxes/search", params=params)).json()
        ids.extend(item["id"] for item in body["items"] if item["status"] != "MISSING")
        page = body["next_page_id"]
        if not page:
            return ids


async def delete_all(client: httpx.AsyncClient, parallel: int) -> dict[str, Any]:
    ids = await every_sandbox(client)
    progress = Progress("delete", len(ids), max(1, min(500, len(ids) // 10)))
    seconds: list[float] = []

    async def one(i: int) -> None:
        sandbox_id = ids[i]
        began = time.monotonic()
        try:
            answer = await client.delete(
                f"/api/v1/sandboxes/{sandbox_id}",
                params={"sandbox_id": sandbox_id},
                timeout=600,
            )
            seconds.append(time.monotonic() - began)
            progress.tick(None if answer.status_code == 200 else f"{answer.status_code}")
        except httpx.HTTPError as exc:
            progress.tick(f"{type(exc).__name__}: {exc}")

    began = time.monotonic()
    await workers(len(ids), parallel, one)
    return {
        "sandboxes": len(ids),
        "wall_s": round(time.monotonic() - began, 1),
        "each_s": summary(seconds),
        "failed": dict(progress.failed),
    }


# -- the run ---------------------------------------------------------------------------------------


async def measure(
    args: argparse.Namespace, plane: Plane, key: str, llm: ScriptedLLM, out: dict[str, Any]
) -> None:
    def new_client() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=plane.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
            limits=httpx.Limits(max_connections=args.parallel * 3 + 20),
        )

    client = new_client()
    settings = {
        "llm_model": "openai/test-model",
        "llm_base_url": llm.base_url("capacity"),
        "llm_api_key": "sk-test-key",
        "default_tools": ["terminal"],
        "grouping_strategy": "NO_GROUPING",
    }
    try:
        (await client.patch("/api/v1/settings", json=settings)).raise_for_status()
        out["control_plane_at_start"] = plane.status()
        log(f"phase 1: {args.hibernated} hibernated sandboxes, {args.parallel} at once")
        hibernated_ids, out["phase_hibernated"] = await hibernated(
            client, args.hibernated, args.parallel, args.hibernated_until
        )
        args.all_ids = list(hibernated_ids)
        out["control_plane_after_hibernated"] = plane.status()
        out["mem_available_drop_after_hibernated_mib"] = round(
            out["mem_available_before_mib"] - mem_available_mib(), 1
        )
        log("phase 1 done:", json.dumps(out["phase_hibernated"]))

        log(f"phase 2: {args.idle} idle sandboxes, {args.parallel} at once")
        idle_ids, out["phase_idle"] = await idle(client, args.idle, args.parallel)
        args.all_ids = hibernated_ids + idle_ids
        log("phase 2 done:", json.dumps(out["phase_idle"]))

        log(f"settling {args.settle:g} s")
        await asyncio.sleep(args.settle)
        out["held"] = await asyncio.to_thread(peak, args, plane, hibernated_ids, idle_ids)
        log("held:", json.dumps(out["held"]))

        # CPU of the control plane while nobody asks it anything (its timers only).
        before, began = plane.cpu_seconds(), time.monotonic()
        await asyncio.sleep(args.quiet)
        out["control_plane_quiet_cpu_percent"] = round(
            100 * (plane.cpu_seconds() - before) / (time.monotonic() - began), 1
        )
        out["control_plane_at_peak"] = plane.status()
        log("probing the control plane")
        total = len(hibernated_ids) + len(idle_ids)
        out["answers_at_peak"] = await answers(client, total, idle_ids, hibernated_ids)
        args.all_ids = hibernated_ids + idle_ids
        # An idle sandbox hibernated now, among all the others' processes (phase 1's pauses
        # met a host with few): the stop's /proc scans grow with the host's processes.
        paused = []
        for sandbox_id in idle_ids[:3]:
            seconds, answer = await timed(
                client.post(f"/api/v1/sandboxes/{sandbox_id}/pause", timeout=300)
            )
            answer.raise_for_status()
            paused.append(round(seconds, 3))
        out["answers_at_peak"]["idle_pause_to_hibernated_s"] = paused
        log("answers:", json.dumps(out["answers_at_peak"]))
        out["control_plane_after_probes"] = plane.status()
        out["load_at_peak"] = [round(x, 2) for x in os.getloadavg()]

        if args.restart:
            log("SIGKILL of the control plane, and a new one adopting every sandbox")
            await client.aclose()
            out["restart"] = await asyncio.to_thread(plane.restart)
            client = new_client()
            began = time.monotonic()
            statuses: Counter[str] = Counter()
            page = None
            while True:
                params: dict[str, Any] = {"limit": 100}
                if page:
                    params["page_id"] = page
                body = (await client.get("/api/v1/sandboxes/search", params=params)).json()
                statuses.update(item["status"] for item in body["items"])
                page = body["next_page_id"]
                if not page:
                    break
            out["restart"]["list_all_pages_s"] = round(time.monotonic() - began, 2)
            out["restart"]["statuses_after"] = dict(statuses)
            out["restart"]["control_plane"] = plane.status()
            log("restart:", json.dumps(out["restart"]))
    finally:
        log("deleting every sandbox")
        try:
            out["teardown_delete"] = await delete_all(client, args.parallel)
        except httpx.HTTPError:  # (a client of a control plane that was restarted)
            await client.aclose()
            client = new_client()
            out["teardown_delete"] = await delete_all(client, args.parallel)
        await client.aclose()
        log("deleted:", json.dumps(out["teardown_delete"]))


def peak(
    args: argparse.Namespace, plane: Plane, hibernated_ids: list[str], idle_ids: list[str]
) -> dict[str, Any]:
    state = plane.state
    found = sandbox_processes(state, idle_ids)
    idle_memory = [memory_kib(pids) for pids in found.values()]
    table = processes()
    template = [
        pid
        for pid, (ppid, _, _, cmdline) in table.items()
        if ppid == plane.pid and b"template.sock" in cmdline
    ]
    began = time.perf_counter()
    list_processes()
    proc_scan = time.perf_counter() - began
    began = time.perf_counter()
    _uids_in_use(state / "sandboxes")
    uid_scan = time.perf_counter() - began
    return {
        "proc_scan_ms": round(proc_scan * 1000, 1),
        "uid_scan_ms": round(uid_scan * 1000, 1),
        "mem_available_drop_mib": round(args.mem_before - mem_available_mib(), 1),
        "idle_sandboxes_with_processes": len(found),
        "idle_processes": sum(len(p) for p in found.values()),
        "idle_pss_total_mib": round(sum(m["Pss"] for m in idle_memory) / 1024, 1),
        "idle_pss_each_mib": summary([m["Pss"] / 1024 for m in idle_memory], 1),
        "idle_uss_each_mib": summary(
            [(m["Private_Clean"] + m["Private_Dirty"]) / 1024 for m in idle_memory], 1
        ),
        "idle_rss_each_mib": summary([m["Rss"] / 1024 for m in idle_memory], 1),
        "template_pss_mib": round(memory_kib(template)["Pss"] / 1024, 1),
        "host_processes": len(table),
        "hibernated_with_processes": marked_sandboxes(state, hibernated_ids),
        "hibernated_hold": held(state, hibernated_ids),
        "idle_hold": held(state, idle_ids),
        "hibernated_disk": disk_of(state, hibernated_ids),
        "idle_disk": disk_of(state, idle_ids),
        "state_dir_du_mib": round(du_kib(state) / 1024, 1),
        "database_mib": round(
            sum(p.stat().st_size for p in state.glob("control-plane.db*")) / 1024**2, 1
        ),
    }


def subnet_for(internet: Internet, running: int) -> ipaddress.IPv4Network:
    """A subnet of this process's test internet (routed into it, never out) holding every
    sandbox that runs at once: the last one of its /16 that is large enough (the per-test
    /24s are handed out from the start of it)."""
    prefix = min(24, 32 - math.ceil(math.log2(running + 64)))
    return list(internet.sandboxes.subnets(new_prefix=prefix))[-1]


def leftovers(state: Path) -> dict[str, int]:
    """What of this run is left on the host (its own state directory's mounts and loop
    devices; its sandboxes' namespaces and cgroups are counted by `held`)."""
    mounts = sum(
        1
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(str(state))
    )
    loops = 0
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if backing.read_text().strip().startswith(str(state)):
                loops += 1
        except OSError:
            pass
    return {"mounts": mounts, "loop_devices": loops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--hibernated", type=int, default=5000)
    parser.add_argument("--parallel", type=int, default=8, help="starts (and pauses) at once")
    parser.add_argument(
        "--hibernated-until",
        metavar="HH:MM",
        help="UTC: no hibernated sandbox begun after this (the run goes on with those made)",
    )
    parser.add_argument(
        "--restart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="at the peak, SIGKILL the control plane and time a new one's start (adoption)",
    )
    parser.add_argument("--settle", type=float, default=10.0, help="seconds idle before reading")
    parser.add_argument("--quiet", type=float, default=30.0, help="seconds of the CPU reading")
    args = parser.parse_args()
    if args.idle < 1:
        parser.error("--idle is at least 1")
    if args.idle + args.hibernated + 60 > 10_000:
        parser.error(
            "one user holds at most 10,000 sandboxes (CONTROL_PLANE_MAX_SANDBOXES_PER_USER)"
        )

    if args.hibernated_until:
        hours, minutes = map(int, args.hibernated_until.split(":"))
        day = time.gmtime()
        until = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, hours, minutes, 0))
        args.hibernated_until = until if until > time.time() else until + 86400
    args.mem_before = mem_available_mib()
    args.all_ids = []
    out: dict[str, Any] = {
        "args": {
            "idle": args.idle,
            "hibernated": args.hibernated,
            "parallel": args.parallel,
            "hibernated_until": args.hibernated_until,
        },
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "mem_available_before_mib": round(args.mem_before, 1),
    }
    internet = Internet.shared()
    subnet = subnet_for(internet, args.idle + args.parallel + 10)
    llm = ScriptedLLM()
    llm.responder = lambda key, body: call("finish", message="done")
    llm.start()
    base = Path(tempfile.mkdtemp(prefix="capacity-", dir="/tmp"))
    state = base / "state"
    plane = Plane(state, subnet, internet.dns, args.idle + args.hibernated + 10)
    began = time.monotonic()
    try:
        key = plane.new_key("capacity")
        began_plane = time.monotonic()
        plane.start()
        out["control_plane_start_to_alive_s"] = round(time.monotonic() - began_plane, 2)
        out["control_plane_up_s"] = round(time.monotonic() - began, 1)
        out["control_plane_pid"] = plane.pid
        asyncio.run(measure(args, plane, key, llm, out))
    finally:
        log("stopping the control plane")
        out["control_plane_stop_s"] = plane.stop()
        out["left_after_stop"] = {
            **leftovers(state),
            **{k: v for k, v in held(state, args.all_ids).items() if k in ("netns", "cgroups")},
        }
        if any(out["left_after_stop"].values()):
            log("left behind, removed now:", out["left_after_stop"])
            for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
                point = line.split()[4]
                if point.startswith(str(state)):
                    subprocess.run(["umount", "-l", point], check=False)
        forget_subnet(subnet)
        llm.stop()
        if plane.log_path.exists():
            shutil.copy(plane.log_path, "/tmp/capacity-control-plane.log")
        shutil.rmtree(base, ignore_errors=True)
        out["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        out["wall_s"] = round(time.monotonic() - began, 1)
        out["load_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(out, indent=1), flush=True)


if __name__ == "__main__":
    main()
