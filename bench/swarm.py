"""Sandboxes on a two-node Docker Swarm beside Docker and process sandboxes (prints JSON).

    .venv/bin/python bench/swarm.py [--starts 10] [--hold 20] [--only process,docker,swarm,hold]

The cluster is the tests' (tests/support/swarm.py): the host's daemon as the manager, a
docker-in-docker worker, the sandbox image built from Debian packages. For each provider, one
control plane on SQLite makes `--starts` sandboxes one after another (NO_GROUPING, no message):

- cold_container_to_ready: a start request to its start task's READY on a new sandbox (for
  Swarm: a new service placed on the worker by a constraint, its task up, /alive answering on
  the worker's address);
- reused_sandbox_to_ready: a start into a RUNNING sandbox (no provider work);
- pause, resume_to_alive, delete: through the API (Swarm: scale to 0 and back on the same node,
  delete with the archive and volume jobs on the node).

`hold`: a Swarm control plane without placement constraints (both nodes take sandboxes) starts
up to `--hold` sandboxes and keeps them all running: how many came up, on which node, start
to READY as they piled up, and the machine's available memory before and after (both nodes
share this machine's memory, so that is what they cost together).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.control_plane import docker_starts, post_start, wait_ready  # noqa: E402
from control_plane.config import Config  # noqa: E402
from control_plane.providers.containers import (  # noqa: E402
    LABEL_PLANE,
    LABEL_SANDBOX,
    name_of,
    plane_label,
)
from tests.control_plane.support import ControlPlane, configure_llm, make_config  # noqa: E402
from tests.support import docker as docker_support  # noqa: E402
from tests.support import swarm as swarm_support  # noqa: E402
from tests.support.llm import ScriptedLLM, free_port  # noqa: E402


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def swarm_config(
    state_dir: Path, cluster: swarm_support.Cluster, image: str, **extra: Any
) -> Config:
    port = free_port()
    return Config(
        state_dir=state_dir,
        host="0.0.0.0",
        port=port,
        public_url=f"http://{cluster.gateway}:{port}",
        sandbox_provider="swarm",
        sandbox_image=image,
        stop_sandboxes_on_exit=True,
        health_interval=0.5,
        sandbox_stop_grace=2.0,
        **extra,
    )


@contextlib.contextmanager
def plane(config: Config, cluster: swarm_support.Cluster | None = None) -> Iterator[ControlPlane]:
    """A control plane; what it left on the cluster removed after it."""
    running = ControlPlane(config).start()
    try:
        yield running
    finally:
        running.stop()
        if cluster is not None:
            cluster.remove_labelled(f"{LABEL_PLANE}={plane_label(config.db_url)}")


def parked(cluster: swarm_support.Cluster, config: Config, size: int) -> None:
    """Until `size` parked services of the plane answer as parked (loaded, waiting)."""
    deadline = time.monotonic() + 180
    while len(cluster.parked(plane_label(config.db_url))) < size:
        if time.monotonic() > deadline:
            raise RuntimeError("the warm pool did not fill")
        time.sleep(0.2)


def hold(
    cluster: swarm_support.Cluster, image: str, llm: ScriptedLLM, n: int, tmp: Path
) -> dict[str, Any]:
    config = swarm_config(tmp / "hold", cluster, image, max_sandboxes_per_user=n + 5)
    before = available_mib()
    with plane(config, cluster) as running:
        client = running.client(running.new_user("hold"), timeout=180)
        configure_llm(client, llm.base_url("idle"))
        client.patch("/api/v1/settings", json={"grouping_strategy": "NO_GROUPING"})
        seconds, sandboxes, failed = [], [], None
        for _ in range(n):
            began = time.monotonic()
            task = wait_ready(client, post_start(client, {}))
            if task["status"] != "READY":
                failed = task["detail"]
                break
            seconds.append(time.monotonic() - began)
            sandboxes.append(task["sandbox_id"])
        nodes: Counter[str] = Counter()
        for sandbox in sandboxes:
            [service] = [
                s
                for s in cluster.services(f"{LABEL_SANDBOX}={sandbox}")
                if s["Spec"]["Name"] == name_of(sandbox)
            ]
            tasks = cluster.manager.api.tasks(
                filters={"service": service["ID"], "desired-state": "running"}
            )
            node = cluster.manager.nodes.get(tasks[0]["NodeID"])
            nodes[node.attrs["Description"]["Hostname"]] += 1
        alive = sum(
            1
            for s in sandboxes
            if client.get("/api/v1/sandboxes", params={"id": s}).json()[0]["status"] == "RUNNING"
        )
        after = available_mib()
    return {
        "asked": n,
        "ready": len(sandboxes),
        "running_at_the_end": alive,
        "first_failure": failed,
        "per_node": dict(nodes),
        "start_to_ready_s": {
            "median": round(statistics.median(seconds), 2),
            "first": round(seconds[0], 2),
            "last": round(seconds[-1], 2),
        }
        if seconds
        else None,
        "available_mib_before": round(before),
        "available_mib_with_all_up": round(after),
        "mib_per_sandbox": round((before - after) / len(sandboxes), 1) if sandboxes else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--hold", type=int, default=20)
    parser.add_argument("--only", default="process,docker,swarm,hold")
    parser.add_argument(
        "--warm-pool",
        type=int,
        default=0,
        help="Swarm sandboxes parked in advance; each start waits for a full pool",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        daemon = docker_support.Daemon.ensure(tmp / "dockerd.log")
        try:
            timings: dict[str, float] = {}
            image = docker_support.sandbox_image(timings)
            with contextlib.closing(docker_support.client()) as engine:
                gateway = docker_support.bridge_gateway(engine)
            llm = ScriptedLLM(host=gateway).start()
            try:
                if "process" in only:
                    with plane(make_config(tmp / "process")) as running:
                        results["process"] = docker_starts(running, llm, args.starts)
                if "docker" in only:
                    with plane(
                        make_config(
                            tmp / "docker",
                            host="0.0.0.0",
                            sandbox_provider="docker",
                            sandbox_image=image,
                        )
                    ) as running:
                        results["docker"] = docker_starts(running, llm, args.starts)
                if only & {"swarm", "hold"}:
                    began = time.monotonic()
                    with swarm_support.cluster(image, tmp / "swarm") as cluster:
                        results["cluster_up_s"] = round(time.monotonic() - began, 1)
                        results["cluster_timings_s"] = {
                            k: round(v, 1) for k, v in cluster.timings.items()
                        }
                        if "swarm" in only:
                            constraint = (f"node.hostname=={cluster.worker_hostname}",)
                            config = swarm_config(
                                tmp / "swarm-cp",
                                cluster,
                                image,
                                swarm_constraints=constraint,
                                warm_pool=args.warm_pool,
                            )
                            full = lambda: parked(cluster, config, args.warm_pool)  # noqa: E731
                            with plane(config, cluster) as running:
                                results["swarm"] = docker_starts(running, llm, args.starts, full)
                                results["swarm"]["warm_pool"] = args.warm_pool
                        if "hold" in only:
                            results["hold"] = hold(cluster, image, llm, args.hold, tmp)
            finally:
                llm.stop()
        finally:
            daemon.stop()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
