"""How long a start's background leg walks through the project's files (prints JSON).

    .venv/bin/python bench/start_walk.py

What is measured: the design review's walk of "3a. Control plane: POST /api/v1/app-conversations
-> start task -> provider -> READY", its background leg (the start task's job, with the process
provider), counted from a trace instead of by hand, the same way on any checkout.

How: a control plane runs in this process with the process provider, as the tests start one
(`tests.control_plane.support`: make_config, ControlPlane, configure_llm; the scripted LLM of
`tests.support.llm`). One warm-up start is made untraced (so first imports and caches are not
counted), then one traced start into a new sandbox (NO_GROUPING, no template: the server is
spawned). A profile hook (`threading.setprofile`, installed before the control plane's thread
starts) records every *call* event of a function defined under core/, web/, events/, launch/ or
control_plane/ (not tests, not libraries; module bodies left out), with the asyncio task it ran
in. Resuming a coroutine or generator also raises a call event: only first entries are kept
(the frame is at its first RESUME). Work an asyncio task hands to a thread (`asyncio.to_thread`
copies the context) is the task's: a context variable names the task whose context it is.

The jobs are found by name, not by importing internals that moved: the start task's job is the
task named "start task <task id>"; the sandbox's launch job is any other task whose name holds
the new sandbox's id (it is "start sandbox <id>" at the commits measured). Tasks that these
jobs created without a name are counted with the job that made them; named tasks they created
are listed under `other_tasks_from_the_jobs` and not counted.

The walk, as the review counted it:
- a *stay* is a maximal run of consecutive call events in one file;
- loops are read once: a repeated identical sequence of stays (a stay being its file and the
  functions called in it, in order) is collapsed to one occurrence, repeatedly, shortest
  sequences first, adjacent stays in one file merged again after each collapse, until nothing
  changes (`raw` gives the figures before this);
- a *return* is a stay in a file the walk visited before (stays - files of the walk);
- each stay is work (starting the process: the process provider's files, core/processes,
  core/procfs, core/namespaces), bookkeeping (the review's list: start_tasks, sandboxes/service,
  store/sandboxes, store/tasks, store/conversations, models, crypto, leases, agent_client, with
  the modules since carved out of them: sandboxes/starts.py and rows.py, placement.py,
  create_request.py, start_secrets.py) or other (anything else, listed by file).

Each figure also has `direct`: the same counts over the calls made by project code only (the
caller is a project function, or the call is a task's or a worker thread's root), leaving out a
library calling back into the project (SQLAlchemy's type decorators in store/tables.py,
aiosqlite calling store/db.py's connection, pydantic's validators), which a reader following
the code does not see.

Per job, and together: the launch job's walk spliced into the start task's where it began
(`together`), or both jobs' events in the order they happened (`together_interleaved`: the
event loop switches between them at each await, so this one is longer). Distinct functions and
files count every recorded call, before any collapsing.
"""

from __future__ import annotations

import asyncio
import contextvars
import dis
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.control_plane.support import ControlPlane, configure_llm, make_config  # noqa: E402
from tests.support.llm import ScriptedLLM, call  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

PACKAGES = ("core/", "web/", "events/", "launch/", "control_plane/")

#: The review's real work: the process provider (wherever it lived) and the process helpers.
WORK_PREFIXES = ("control_plane/providers/process/", "control_plane/providers/process.py")
WORK_FILES = {
    # 0b0e2ac: the process provider's modules sat in control_plane/sandboxes/
    "control_plane/sandboxes/process.py",
    "control_plane/sandboxes/isolation.py",
    "control_plane/sandboxes/spawn.py",
    "control_plane/sandboxes/cgroups.py",
    "control_plane/sandboxes/disks.py",
    "control_plane/sandboxes/seccomp.py",
    "control_plane/sandboxes/gvisor.py",
    "control_plane/sandboxes/template.py",
    "core/processes.py",
    "core/procfs.py",  # carved out of core/processes.py
    "core/namespaces.py",
}
#: The review's bookkeeping, with the modules carved out of them since.
BOOKKEEPING_FILES = {
    "control_plane/start_tasks.py",
    "control_plane/sandboxes/service.py",
    "control_plane/sandboxes/starts.py",
    "control_plane/sandboxes/rows.py",
    "control_plane/placement.py",
    "control_plane/create_request.py",
    "control_plane/start_secrets.py",
    "control_plane/store/sandboxes.py",
    "control_plane/store/tasks.py",
    "control_plane/store/conversations.py",
    "control_plane/models.py",
    "control_plane/crypto.py",
    "control_plane/leases.py",
    "control_plane/agent_client.py",
}


def kind(path: str) -> str:
    if path in WORK_FILES or path.startswith(WORK_PREFIXES):
        return "work"
    if path in BOOKKEEPING_FILES:
        return "bookkeeping"
    return "other"


# ---------------------------------------------------------------------------------------------
# The trace

ACTIVE = False
#: (sequence number, job key, file, function, made by project code) of each first entry into a
#: project function.
EVENTS: list[tuple[int, str, str, str, bool]] = []
_seq = 0
_lock = threading.Lock()
#: The task whose context this is (set by the hook in each task; copied into child tasks and
#: into `asyncio.to_thread`'s calls).
JOB: contextvars.ContextVar[str] = contextvars.ContextVar("start_walk_job")
#: task name -> the task's object, and the name of the task that created it (if known).
TASKS: dict[str, asyncio.Task[Any]] = {}
PARENT: dict[str, str | None] = {}
_files: dict[str, str | None] = {}
_first_resume: dict[Any, int] = {}


def _relative(filename: str) -> str | None:
    try:
        return _files[filename]
    except KeyError:
        pass
    rel: str | None = None
    try:
        path = Path(filename).resolve().relative_to(ROOT).as_posix()
        if path.startswith(PACKAGES):
            rel = path
    except ValueError:
        pass
    _files[filename] = rel
    return rel


def _fresh(frame: Any) -> bool:
    """Whether a call event enters the frame first (not a coroutine's or generator's resume)."""
    code = frame.f_code
    if not code.co_flags & (0x20 | 0x80 | 0x200):  # generator, coroutine, async generator
        return True
    first = _first_resume.get(code)
    if first is None:
        first = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
        _first_resume[code] = first
    return frame.f_lasti <= first


def _direct(frame: Any, task: asyncio.Task[Any] | None) -> bool:
    """Whether project code made this call (a reader following the code sees it): its caller is
    a project function, or it is the root of a task or of a worker thread's call. Not: a library
    calling back into the project (SQLAlchemy's type decorators, pydantic's validators,
    aiosqlite's connection method)."""
    back = frame.f_back
    if back is None:
        return task is None or task.get_coro().cr_frame is frame  # type: ignore[union-attr]
    if _relative(back.f_code.co_filename) is not None:
        return True
    if task is not None:
        return False
    while back is not None:  # a worker thread: its first project frame is the call handed to it
        if _relative(back.f_code.co_filename) is not None:
            return False
        back = back.f_back
    return True


def _hook(frame: Any, event: str, arg: Any) -> None:
    global _seq
    if event != "call" or not ACTIVE:
        return
    code = frame.f_code
    path = _relative(code.co_filename)
    if path is None or code.co_name == "<module>" or not _fresh(frame):
        return
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    if loop is not None and task is None:  # a callback of the loop's, in no task
        return
    direct = _direct(frame, task)
    if task is not None:
        name = task.get_name()
        inherited = JOB.get(None)
        if name not in TASKS:
            TASKS[name] = task
            PARENT[name] = inherited
        if name.startswith("Task-") and inherited is not None:
            key = inherited  # an unnamed task counts with the job that made it
        else:
            key = name
        if inherited != key:
            JOB.set(key)
    else:
        key = JOB.get(None)  # a worker thread running a task's call (asyncio.to_thread)
        if key is None:
            return
    with _lock:
        _seq += 1
        EVENTS.append((_seq, key, path, code.co_qualname, direct))


# ---------------------------------------------------------------------------------------------
# The walk


def stays(events: list[tuple[str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """Maximal runs of consecutive calls in one file: (file, the functions called, in order)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for path, function in events:
        if out and out[-1][0] == path:
            out[-1] = (path, (*out[-1][1], function))
        else:
            out.append((path, (function,)))
    return out


def merge(walk: list[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...]]] = []
    for path, functions in walk:
        if out and out[-1][0] == path:
            out[-1] = (path, (*out[-1][1], *functions))
        else:
            out.append((path, functions))
    return out


def collapse(walk: list[tuple[str, tuple[str, ...]]]) -> tuple[list[Any], int]:
    """A sequence of stays repeated back to back (X X ... X) read once; how many were dropped."""
    walk = list(walk)
    dropped = 0
    changed = True
    while changed:
        changed = False
        for size in range(1, len(walk) // 2 + 1):
            i = 0
            while i + 2 * size <= len(walk):
                if walk[i : i + size] == walk[i + size : i + 2 * size]:
                    del walk[i + size : i + 2 * size]
                    dropped += size
                    changed = True
                else:
                    i += 1
            if changed:
                walk = merge(walk)
                break
    return walk, dropped


def measure(marked: list[tuple[str, str, bool]]) -> dict[str, Any]:
    figures = walk_of([(p, f) for p, f, _ in marked])
    direct = walk_of([(p, f) for p, f, d in marked if d])
    direct.pop("walk")
    return {**figures, "direct": direct}


def walk_of(events: list[tuple[str, str]]) -> dict[str, Any]:
    raw = stays(events)
    walk, dropped = collapse(raw)
    files = [path for path, _ in walk]
    kinds = Counter(kind(path) for path in files)
    return {
        "calls": len(events),
        "distinct_functions": len(set(events)),
        "distinct_files": len({path for path, _ in events}),
        "stays": len(walk),
        "files_of_walk": len(set(files)),
        "returns": len(walk) - len(set(files)),
        "work_stays": kinds["work"],
        "bookkeeping_stays": kinds["bookkeeping"],
        "other_stays": kinds["other"],
        "visits_by_file": dict(Counter(files).most_common()),
        "raw": {
            "stays": len(raw),
            "returns": len(raw) - len({path for path, _ in raw}),
            "stays_dropped_as_repeats": dropped,
        },
        "walk": [f"{path}: {', '.join(dict.fromkeys(functions))}" for path, functions in walk],
    }


# ---------------------------------------------------------------------------------------------
# The run


def post_start(client: Any) -> str:
    r = client.post(
        "/api/v1/app-conversations",
        json={
            "initial_message": {
                "role": "user",
                "content": [{"type": "text", "text": "hello"}],
                "run": True,
            }
        },
    )
    r.raise_for_status()
    task_id: str = r.json()["id"]
    return task_id


def until_finished(client: Any, task_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task: dict[str, Any] = client.get(
            "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
        ).json()[0]
        return task if task["status"] in ("READY", "ERROR") else None

    task: dict[str, Any] = wait_for(done, 180, what=f"start task {task_id}")
    if task["status"] != "READY":
        raise RuntimeError(f"the start failed: {task.get('detail')}")
    return task


def run() -> dict[str, Any]:
    global ACTIVE
    llm = ScriptedLLM().start()
    threading.setprofile(_hook)  # the control plane's thread and its workers start after this
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(make_config(Path(tmp), max_sandboxes_per_user=10)).start()
        try:
            client = plane.client(plane.new_user("walker"), timeout=60)
            configure_llm(client, llm.base_url("walk"), tools=["terminal"])
            r = client.patch("/api/v1/settings", json={"grouping_strategy": "NO_GROUPING"})
            r.raise_for_status()
            for _ in range(2):
                llm.script("walk", call("finish", message="done"))
            until_finished(client, post_start(client))  # warm-up, untraced
            time.sleep(1.0)

            ACTIVE = True
            task_id = post_start(client)
            task = until_finished(client, task_id)
            sandbox_id = task["sandbox_id"]
            root = f"start task {task_id}"
            # Until the jobs (and what they made) have ended: the start task releases its
            # lease after READY is seen.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ours = [t for n, t in list(TASKS.items()) if n == root or sandbox_id in n]
                if ours and all(t.done() for t in ours):
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            ACTIVE = False
        finally:
            threading.setprofile(None)  # type: ignore[arg-type]
            ACTIVE = False
            plane.stop()
            llm.stop()

    events = list(EVENTS)
    launch_names = sorted({e[1] for e in events if e[1] != root and sandbox_id in e[1]})
    jobs = {root: "start_task", **{name: "launch" for name in launch_names}}

    def of(keys: set[str]) -> list[tuple[int, str, str, bool]]:
        return [(s, p, f, d) for s, k, p, f, d in events if k in keys]

    start_events = of({root})
    launch_events = of(set(launch_names))
    if launch_events:  # the launch job's walk read where it began
        began = launch_events[0][0]
        spliced = (
            [e for e in start_events if e[0] < began]
            + launch_events
            + [e for e in start_events if e[0] >= began]
        )
    else:
        spliced = start_events
    interleaved = sorted(start_events + launch_events)
    pair = lambda es: [(p, f, d) for _, p, f, d in es]  # noqa: E731

    descendants = {
        name: PARENT.get(name)
        for name in TASKS
        if name not in jobs and PARENT.get(name) in jobs and not name.startswith("Task-")
    }
    together = measure(pair(spliced))
    interleaved_measure = measure(pair(interleaved))
    interleaved_measure.pop("walk")
    interleaved_measure.pop("visits_by_file")
    return {
        "commit": _commit(),
        "jobs": {"start_task": root, "launch": launch_names},
        "other_tasks_from_the_jobs": descendants,
        "start_task": measure(pair(start_events)),
        "launch": measure(pair(launch_events)),
        "together": together,
        "together_interleaved": interleaved_measure,
    }


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    # The sandboxes' servers write their logs to the stdout they inherit: stdout is the JSON's.
    sys.stdout.flush()
    out = os.dup(1)
    os.dup2(2, 1)
    try:
        result = run()
    finally:
        sys.stdout.flush()
        os.dup2(out, 1)
        os.close(out)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
