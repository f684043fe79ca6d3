"""One Docker sandbox's start, request to READY, and optionally stage by stage (prints JSON).

    .venv/bin/python bench/docker_start.py [--starts 10] [--image TAG] [--warm-pool N] [--split]

A control plane with the Docker provider (the tests' image unless --image; built from Debian
packages, tests/support/docker.py) makes `--starts` new sandboxes one after another
(NO_GROUPING, no message), each deleted before the next: request -> READY, its median, p95 and
maximum.

With `--split`, Docker's own events and a poller of the published port split each cold start
into:

- to_created: the control plane's work up to `docker create` done (its task, the network and
  the volume, the container's creation);
- created_to_started: attaching the keys' stdin and Docker starting the container;
- started_to_alive: the agent server inside, from its container's start to the first answer
  of /alive (the interpreter, its imports, uvicorn listening), seen by a poller every 5 ms;
- alive_to_ready: the control plane noticing the server (it says it serves on the container's
  attach), then the conversation created in the sandbox and the task's stages stored.

The poller is a load of its own (a connection every 5 ms, through Docker's proxy, while the
server boots): without `--split` nothing polls, and request -> READY is the start's alone.

With `--warm-pool N` the control plane keeps N containers parked (control_plane/providers/pool.py):
before each start the pool is full again and its servers idle (done loading), and a start is
request -> READY alone (its container was made and started before the request).

Also, in a container of the image with the provider's hardening (read-only root, no
capabilities): the server's imports, timed inside it (wall-clock and CPU).
The machine's load average beside them (a busy machine's figures say more about its neighbours
than about the start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.control_plane import post_start, wait_ready  # noqa: E402
from control_plane.providers.containers import (  # noqa: E402
    LABEL_PLANE,
    LABEL_SANDBOX,
    PORT_NUMBER,
    plane_label,
)
from control_plane.providers.docker.pool import PREFIX  # noqa: E402
from tests.control_plane.support import ControlPlane, configure_llm, make_config  # noqa: E402
from tests.support import docker as docker_support  # noqa: E402
from tests.support.llm import ScriptedLLM  # noqa: E402

#: The server's imports, wall-clock and CPU seconds (the CPU figure says less of the neighbours).
IMPORTS = (
    "import time; t, c = time.perf_counter(), time.process_time(); import uvicorn, "
    "agent_server.__main__, agent_server.app; "
    "print(time.perf_counter() - t, time.process_time() - c)"
)


def alive(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"GET /alive HTTP/1.0\r\nHost: x\r\n\r\n")
            return conn.recv(16).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


class Watch:
    """Docker's create and start events of the plane's containers (wall-clock seconds), and
    the first /alive of each started container."""

    def __init__(self, engine: Any, plane: str) -> None:
        self.engine = engine
        self.events = engine.events(
            decode=True, filters={"type": "container", "label": f"{LABEL_PLANE}={plane}"}
        )
        self.seen: dict[str, dict[str, float]] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            for event in self.events:
                action, cid = event.get("Action"), event.get("id", "")
                if action in ("create", "start"):
                    self.seen.setdefault(cid, {})[action] = event["timeNano"] / 1e9
                if action == "start":
                    threading.Thread(target=self._poll, args=(cid,), daemon=True).start()

    def _poll(self, cid: str) -> None:
        ports = self.engine.api.inspect_container(cid)["NetworkSettings"]["Ports"]
        port = int(ports[f"{PORT_NUMBER}/tcp"][0]["HostPort"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if alive(port):
                self.seen[cid]["alive"] = time.time()
                return
            time.sleep(0.005)

    def close(self) -> None:
        self.events.close()


def inside(engine: Any, image: str, code: str, runs: int = 3) -> list[float]:
    """The medians of `code`'s printed figures, run in a fresh hardened container each time."""
    rows = []
    for _ in range(runs):
        out = engine.containers.run(
            image,
            ["python", "-c", code],
            entrypoint=[],
            remove=True,
            read_only=True,
            cap_drop=["ALL"],
            user="1000:1000",
            network_disabled=True,
            tmpfs={"/tmp": ""},
        )
        rows.append([float(x) for x in out.decode().strip().splitlines()[-1].split()])
    return [round(statistics.median(column), 3) for column in zip(*rows, strict=True)]


def settled(engine: Any, plane: str, size: int) -> None:
    """Until `size` parked containers run and none of them used 10 ms of CPU over half a second
    (their servers have loaded everything and wait for their keys)."""

    def usage() -> dict[str, int]:
        found = engine.api.containers(filters={"label": f"{LABEL_PLANE}={plane}"})
        parked = [c["Id"] for c in found if c["Names"][0].startswith("/" + PREFIX)]
        return {
            cid: engine.api.stats(cid, stream=False)["cpu_stats"]["cpu_usage"]["total_usage"]
            for cid in parked
        }

    deadline = time.monotonic() + 120
    before = usage()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = usage()
        if (
            len(now) == size
            and now.keys() == before.keys()
            and all(now[cid] - before[cid] < 10_000_000 for cid in now)
        ):
            return
        before = now
    raise RuntimeError("the warm pool did not settle")


def remove(client: Any, engine: Any, plane: str, sandbox_id: str) -> None:
    """The sandbox deleted, until its container is gone (its removal is no neighbour of the
    next start)."""
    client.delete(f"/api/v1/sandboxes/{sandbox_id}", params={"sandbox_id": sandbox_id})
    deadline = time.monotonic() + 60
    labels = [f"{LABEL_PLANE}={plane}", f"{LABEL_SANDBOX}={sandbox_id}"]
    while engine.api.containers(all=True, filters={"label": labels}):
        if time.monotonic() > deadline:
            raise RuntimeError(f"sandbox {sandbox_id}'s container was not removed")
        time.sleep(0.1)


def figures(samples: list[float]) -> dict[str, float]:
    """Median, 95th percentile (the inclusive method: the maximum's neighbour for few samples)
    and maximum."""
    p95 = statistics.quantiles(samples, n=20, method="inclusive")[-1] if samples[1:] else samples[0]
    return {
        "median_s": round(statistics.median(samples), 3),
        "p95_s": round(p95, 3),
        "max_s": round(max(samples), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--image", default="")
    parser.add_argument("--warm-pool", type=int, default=0)
    parser.add_argument("--split", action="store_true", help="a cold start's stages (polls)")
    args = parser.parse_args()
    split = args.split and not args.warm_pool
    results: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        daemon = docker_support.Daemon.ensure(tmp / "dockerd.log")
        try:
            image = args.image or docker_support.sandbox_image()
            engine = docker_support.client()
            results["image"] = image
            results["image_mb"] = round(engine.images.get(image).attrs["Size"] / 1e6, 1)
            wall, cpu = inside(engine, image, IMPORTS)
            results["server_imports_in_container"] = {"wall_s": wall, "cpu_s": cpu}
            llm = ScriptedLLM(host=docker_support.bridge_gateway(engine)).start()
            config = make_config(
                tmp / "docker",
                host="0.0.0.0",
                sandbox_provider="docker",
                sandbox_image=image,
                stop_sandboxes_on_exit=True,
                warm_pool=args.warm_pool,
            )
            running = ControlPlane(config).start()
            watch = Watch(engine, plane_label(config.db_url)) if split else None
            try:
                client = running.client(running.new_user("docker"), timeout=120)
                configure_llm(client, llm.base_url("idle", host="host.docker.internal"))
                client.patch("/api/v1/settings", json={"grouping_strategy": "NO_GROUPING"})
                stages: dict[str, list[float]] = {
                    k: []
                    for k in (
                        "to_created",
                        "created_to_started",
                        "started_to_alive",
                        "alive_to_ready",
                        "request_to_ready",
                    )
                }
                for _ in range(args.starts):
                    if args.warm_pool:
                        settled(engine, plane_label(config.db_url), args.warm_pool)
                    began = time.time()
                    task = wait_ready(client, post_start(client, {}))
                    ready = time.time()
                    stages["request_to_ready"].append(ready - began)
                    if watch is None:
                        remove(client, engine, plane_label(config.db_url), task["sandbox_id"])
                        continue
                    [seen] = [s for s in list(watch.seen.values()) if s.get("create", 0) >= began]
                    deadline = time.monotonic() + 10
                    while "alive" not in seen and time.monotonic() < deadline:
                        time.sleep(0.01)
                    stages["to_created"].append(seen["create"] - began)
                    stages["created_to_started"].append(seen["start"] - seen["create"])
                    stages["started_to_alive"].append(seen["alive"] - seen["start"])
                    stages["alive_to_ready"].append(ready - seen["alive"])
                    remove(client, engine, plane_label(config.db_url), task["sandbox_id"])
                results["starts"] = args.starts
                results["warm_pool"] = args.warm_pool
                results.update({k: figures(v) for k, v in stages.items() if v})
            finally:
                if watch is not None:
                    watch.close()
                running.stop()
                llm.stop()
                docker_support.remove_labelled(
                    engine, f"{LABEL_PLANE}={plane_label(config.db_url)}"
                )
                engine.close()
        finally:
            daemon.stop()
    results["load_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
