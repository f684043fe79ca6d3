"""Sandboxes on the host's kernel and on gVisor's, side by side in one run (prints JSON):
Docker on runc and on runsc, process sandboxes in bubblewrap (spawned, and forked from the
template) and on gVisor.

    .venv/bin/python bench/gvisor.py [--starts 5] [--runs 5] [--kinds runc,runsc,...]

For each kind a control plane (Docker's with the tests' image, built from Debian packages;
runsc registered as tests/support/docker.py does, docs/gvisor.md) starts `--starts` sandboxes
one after another, then, all of them idle:

- start_s: POST /api/v1/sandboxes -> RUNNING (the agent server answering in its sandbox);
- pss_mib: the PSS of every process of one idle sandbox, found by its cgroup (on gVisor these
  are its Sentry and gofer, which hold the agent server's memory themselves);
- command_s: one terminal command (`true`) through the agent server's /api/bash, the part of
  an agent step a sandbox's kernel changes (the model's part is the same on both);
- the tool work of an agent, timed inside one sandbox (bash's `time`, wall-clock): `git status`
  of a 2,000-file repository, `grep -r` over it (the image has no ripgrep), `python3 -m
  unittest` of a 50-test project, and the imports of the agent server's Python (what `pip
  install` of a small wheel mostly is here: the image has no pip).

Medians of `--runs`; the load average beside them (the figures of a busy machine say more about
its neighbours than about the runtime).
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

from control_plane.providers.containers import LABEL_PLANE, LABEL_SANDBOX, plane_label  # noqa: E402
from control_plane.providers.process import cgroups  # noqa: E402
from tests.control_plane.support import ControlPlane, make_config, template_socket  # noqa: E402
from tests.support import docker as docker_support  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

#: Made once in the sandbox's workspace: a 2,000-file repository and a 50-test project.
SETUP = """set -e
mkdir -p /workspace/project/bench && cd /workspace/project/bench
git init -q repo && cd repo
for d in $(seq 1 40); do
  mkdir d$d; for f in $(seq 1 50); do echo "line $d $f" > d$d/f$f.txt; done
done
git add -A && git -c user.email=b@x -c user.name=b commit -qm files
mkdir -p ../tests && cd ../tests
python3 - <<'EOF'
with open("test_many.py", "w") as out:
    out.write("import unittest\\nclass T(unittest.TestCase):\\n")
    for i in range(50):
        out.write(f"    def test_{i}(self):\\n"
                  f"        self.assertEqual(sum(range({i})), {i}*({i}-1)//2)\\n")
EOF
"""
WORK = {
    "git_status_s": "cd /workspace/project/bench/repo && git status --porcelain >/dev/null",
    "grep_s": "grep -r 'line 7 ' /workspace/project/bench/repo >/dev/null",
    "unittest_s": (
        "cd /workspace/project/bench/tests && python3 -m unittest -q test_many 2>/dev/null"
    ),
    "imports_s": "PYTHON -c 'import uvicorn, agent_server.app'",
}
KINDS = ("runc", "runsc", "bubblewrap", "bubblewrap-template", "gvisor")


def bash(url: str, key: str, command: str) -> dict[str, Any]:
    r = httpx.post(
        url + "/api/bash/execute_bash_command",
        json={"command": command, "timeout": 300},
        headers={"X-Session-API-Key": key},
        timeout=330,
    )
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


def timed(url: str, key: str, command: str) -> float:
    """`command`'s wall-clock seconds inside the sandbox (bash's `time`)."""
    out = bash(url, key, f"TIMEFORMAT=%R; {{ time ( {command} ) ; }} 2>&1 | tail -1")
    return float(out["stdout"].strip().splitlines()[-1])


def pss_mib(group: str) -> float:
    """The PSS of every process whose cgroup is the sandbox's (a container's id, or a process
    sandbox's group)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if group not in Path(f"/proc/{pid}/cgroup").read_text():
                continue
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def median(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def plane_config(kind: str, image: str, root: Path) -> Any:
    if kind in ("runc", "runsc"):
        return make_config(
            root,
            host="0.0.0.0",
            sandbox_provider="docker",
            sandbox_image=image,
            sandbox_runtime=None if kind == "runc" else kind,
        )
    return make_config(
        root,
        sandbox_isolation="gvisor" if kind == "gvisor" else "bubblewrap",
        sandbox_template=kind == "bubblewrap-template",
    )


def measure(kind: str, image: str, starts: int, runs: int) -> dict[str, Any]:
    engine = docker_support.client()
    with tempfile.TemporaryDirectory() as tmp:
        config = plane_config(kind, image, Path(tmp) / "cp")
        plane = ControlPlane(config).start()
        try:
            if config.sandbox_template:
                wait_for(template_socket(plane).exists, 180, what="the sandbox template")
            client = plane.client(plane.new_user("bench"))
            began: list[float] = []
            ids = []
            for _ in range(starts):
                t = time.monotonic()
                sid = client.post("/api/v1/sandboxes", json={}).json()["id"]
                wait_for(
                    lambda s=sid: (
                        client.get("/api/v1/sandboxes", params={"id": s}).json()[0]["status"]
                        == "RUNNING"
                    ),
                    120,
                    interval=0.01,
                    what="RUNNING",
                )
                began.append(time.monotonic() - t)
                ids.append(sid)
            record = client.get("/api/v1/sandboxes", params={"id": ids[0]}).json()[0]
            url, key = record["exposed_urls"][0]["url"], record["session_api_key"]
            time.sleep(5)  # idle: its server done loading
            if kind in ("runc", "runsc"):
                [container] = engine.containers.list(filters={"label": f"{LABEL_SANDBOX}={ids[0]}"})
                group, python = str(container.id), "python3"
            else:
                group, python = f"/{cgroups.GROUP}/{ids[0]}\n", sys.executable
            out: dict[str, Any] = {
                "kind": kind,
                "start_s": median(began),
                "start_max_s": round(max(began), 3),
                "pss_mib": pss_mib(group),
                "kernel": bash(url, key, "uname -r")["stdout"].strip(),
            }
            commands = []
            for _ in range(runs * 4):
                t = time.monotonic()
                bash(url, key, "true")
                commands.append(time.monotonic() - t)
            out["command_s"] = median(commands)
            setup = bash(url, key, SETUP)
            if setup["exit_code"] != 0:
                raise RuntimeError(f"setup failed: {setup}")
            for name, command in WORK.items():
                out[name] = median(
                    [timed(url, key, command.replace("PYTHON", python)) for _ in range(runs)]
                )
            return out
        finally:
            plane.stop()
            docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_label(config.db_url)}")
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}"
    )
    args = parser.parse_args()
    docker_support.Daemon.ensure(Path(tempfile.gettempdir()) / "bench-dockerd.log")
    docker_support.ensure_runtime("runsc")
    image = docker_support.sandbox_image() if {"runc", "runsc"} & set(args.kinds.split(",")) else ""
    results = [measure(kind, image, args.starts, args.runs) for kind in args.kinds.split(",")]
    print(json.dumps({"load_average": os.getloadavg(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
