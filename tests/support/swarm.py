"""A two-node Docker Swarm on this machine for the tests: the manager is the host's daemon (put
in swarm mode for the tests and taken out again), the worker a docker-in-docker container
built from Debian packages (`swarm-worker.Dockerfile` on the debootstrapped test image).

The worker's daemon runs with inter-container traffic off on its default bridge (`--icc=false`),
as docs/deployment.md asks of every node that takes sandboxes: that is where they run.

This VM lacks CAP_SYS_RESOURCE, so `--privileged` fails: the worker gets every capability but
that one, no seccomp or AppArmor profile, the host's cgroup file system and a data directory
of its own (../shared/engines/FINDINGS.md). Its data directory is kept under the test cache, so
the sandbox image loaded into it (no registry is reachable: `docker save` from the host,
`docker load` into the worker) is loaded again only when it changed; its swarm state, stopped
containers and volumes are dropped at each start. The worker's image is tagged by a digest of
what makes it, so it is built once per machine.

The host's daemon is shared by every test session of the machine, so one cluster at a time is
made (a lock file beside the machine's Docker socket's users: /tmp). At the end the manager
leaves the swarm it made (a swarm it found, not made by these tests, is left alone; the
manager node's label tells), and what swarm mode made (docker_gwbridge) goes with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import shutil
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx

from tests.support import docker as docker_support
from tests.support import probe
from tests.support.wait import wait_for

DOCKERFILE = Path(__file__).with_name("swarm-worker.Dockerfile")
LOCK = Path("/tmp/agent-server-test-swarm.lock")
WORKER = "agent-server-test-swarm-worker"
#: The manager node's label saying these tests made its swarm (a run that crashed left it).
MARK = "agent-server-test.swarm"


@dataclass
class Cluster:
    manager: docker.DockerClient
    """The host's daemon, a swarm manager."""
    worker: docker.DockerClient
    """The worker's own daemon (through its socket on this machine): what a test inspects of
    the node, as an operator logged in there would."""
    worker_hostname: str
    worker_address: str
    worker_socket: Path
    """The worker's daemon's socket on this machine."""
    gateway: str
    """The host's address on docker0: where both nodes reach the control plane and the LLM."""
    timings: dict[str, float]

    def services(self, label: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.manager.api.services(filters={"label": label})
        return found

    def parked(self, plane: str) -> list[str]:
        """The deployment's parked services (control_plane/providers/swarm/pool.py) whose
        server answers as parked on the worker: loaded and waiting for a claim."""
        from control_plane.providers.containers import LABEL_PLANE
        from control_plane.providers.swarm.pool import LABEL_PARKED

        found = []
        for service in self.services(f"{LABEL_PLANE}={plane}"):
            if service["Spec"]["Labels"].get(LABEL_PARKED) != "true":
                continue
            for task in self.manager.api.tasks(filters={"service": service["ID"]}):
                ports = (task.get("Status") or {}).get("PortStatus", {}).get("Ports") or []
                if task["Status"]["State"] == "running" and ports:
                    url = f"http://{self.worker_address}:{ports[0]['PublishedPort']}/parked"
                    with contextlib.suppress(httpx.HTTPError):
                        if probe.get(url, timeout=2).status_code == 204:
                            found.append(str(service["Spec"]["Name"]))
        return found

    def remove_labelled(self, label: str) -> None:
        """Every service and secret carrying `label`, and the volumes on the worker."""
        removed = [service["ID"] for service in self.services(label)]
        for service_id in removed:
            with contextlib.suppress(docker.errors.NotFound):
                self.manager.api.remove_service(service_id)
        # A removed service's tasks stop after the call returns: waited for, so that none (a
        # node fence answering its old sandboxes' addresses, which Docker gives out again)
        # outlives the test that made it.
        for client in (self.worker, self.manager):
            for service_id in removed:
                wait_for(
                    lambda c=client, s=service_id: (  # sparse: no inspection of each, which
                        # fails on a container Docker removes between the listing and it
                        not c.api.containers(
                            all=True, filters={"label": f"com.docker.swarm.service.id={s}"}
                        )
                    ),
                    60,
                    interval=0.2,
                    what="a removed service's containers to end",
                )
        for secret in self.manager.api.secrets(filters={"label": label}):
            with contextlib.suppress(docker.errors.APIError):
                wait_for(
                    lambda s=secret: _removed(self.manager, s["ID"]),
                    30,
                    interval=0.2,
                    what="a secret to be free",
                )
        for client in (self.worker, self.manager):
            for volume in client.volumes.list(filters={"label": label}):
                with contextlib.suppress(docker.errors.APIError):
                    wait_for(lambda v=volume: _gone(v), 30, interval=0.2, what="a volume")

    def stop_worker(self) -> None:
        """The worker machine loses power: its daemon and every container on it die at once."""
        self.manager.containers.get(WORKER).kill()

    def start_worker(self) -> None:
        """The machine comes back: its daemon starts on its kept state and rejoins the swarm."""
        self._boot()
        wait_for(lambda: self.node_state() == "ready", 60, interval=0.2, what="the worker node")

    def remove_worker_node(self) -> None:
        """The operator gives the dead machine up: its node leaves the cluster."""
        for node in self.manager.nodes.list():
            if node.attrs["Description"]["Hostname"] == self.worker_hostname:
                node.remove(force=True)

    def rejoin_worker(self) -> None:
        """The machine back, joined anew as a new node (its old membership was removed)."""
        self._boot()
        with contextlib.suppress(docker.errors.APIError):
            self.worker.swarm.leave(force=True)
        self.worker.swarm.join(
            remote_addrs=[f"{self.gateway}:2377"],
            join_token=self.manager.swarm.attrs["JoinTokens"]["Worker"],
            listen_addr="0.0.0.0:2377",
            advertise_addr=self.worker_address,
        )
        wait_for(lambda: self.node_state() == "ready", 60, interval=0.2, what="the worker node")

    def restore(self) -> None:
        """The worker up and in the cluster again, whatever a failed test left it as (dead, or
        given up): the next test starts on two nodes."""
        state = self.node_state()
        if state == "gone":
            self.rejoin_worker()
        elif state != "ready" or self.manager.containers.get(WORKER).status != "running":
            self.start_worker()

    def _boot(self) -> None:
        container = self.manager.containers.get(WORKER)
        container.start()
        container.reload()  # (its address on the bridge may have changed)
        self.worker_address = str(container.attrs["NetworkSettings"]["IPAddress"])
        # (a plain socket: the SDK's unix connection leaves its socket open when connect fails)
        wait_for(
            lambda: docker_support._answers(self.worker_socket),
            60,
            interval=0.2,
            what="the worker's daemon",
        )

    def default_runtime(self, name: str) -> None:
        """The worker's daemon.json as docs/gvisor.md has an operator write it (runsc
        registered, `name` the default: what every Swarm task of the node runs on), read again
        on SIGHUP (its containers go on). A restarted worker keeps it."""
        config = {"runtimes": {"runsc": docker_support.RUNSC}, "default-runtime": name}
        self.put("/etc/docker/daemon.json", json.dumps(config).encode(), 0o644)
        self.manager.containers.get(WORKER).exec_run(["sh", "-c", "kill -HUP 1"])
        wait_for(
            lambda: self.worker.info().get("DefaultRuntime") == name,
            30,
            interval=0.2,
            what=f"the worker's default runtime to be {name}",
        )

    def put(self, path: str, data: bytes, mode: int = 0o400) -> None:
        """A root-owned file on the worker machine (what an operator copies there)."""
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        self.manager.containers.get(WORKER).put_archive("/", archive.getvalue())

    def node_state(self) -> str:
        for node in self.manager.nodes.list():
            if node.attrs["Description"]["Hostname"] == self.worker_hostname:
                return str(node.attrs["Status"]["State"])
        return "gone"


def _removed(client: docker.DockerClient, secret_id: str) -> bool:
    try:
        client.api.remove_secret(secret_id)
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:  # still used by a service being removed
        return False
    return True


def _gone(volume: Any) -> bool:
    try:
        volume.remove(force=True)
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:
        return False
    return True


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def worker_image(c: docker.DockerClient, timings: dict[str, float]) -> str:
    """Debian's docker.io on the debootstrapped test image, tagged by a digest of both."""
    with docker_support._locked():
        debian = docker_support.debian_image(c, timings)
        text = DOCKERFILE.read_text()
        tag = (
            "agent-server-test/swarm-worker:"
            + hashlib.sha256(f"{debian}\n{text}".encode()).hexdigest()[:16]
        )
        if not docker_support._has(c, tag):
            began = time.monotonic()
            context = docker_support.CACHE / "swarm-worker"
            context.mkdir(parents=True, exist_ok=True)
            shutil.copy(DOCKERFILE, context / "Dockerfile")
            docker_support._build(
                c,
                path=str(context),
                tag=tag,
                buildargs={"DEBIAN_IMAGE": debian, **docker_support.proxy_args()},
            )
            timings["worker_image_s"] = time.monotonic() - began
    return tag


def load_image(
    manager: docker.DockerClient, worker: docker.DockerClient, tag: str, timings: dict[str, float]
) -> None:
    """The image into the worker (no registry: saved here, loaded there) unless it has it;
    older sandbox images of the tests go."""
    wanted = manager.images.get(tag)
    try:
        if worker.images.get(tag).id == wanted.id:
            return
    except docker.errors.ImageNotFound:
        pass
    began = time.monotonic()
    worker.images.load(wanted.save(chunk_size=1024 * 1024, named=tag))
    timings["load_image_s"] = time.monotonic() - began
    repository = tag.rpartition(":")[0]
    for image in worker.images.list(name=repository):
        if image.id != wanted.id:
            with contextlib.suppress(docker.errors.APIError):
                worker.images.remove(image.id, force=True)


@contextlib.contextmanager
def cluster(sandbox_image: str, run_dir: Path) -> Iterator[Cluster]:
    """The two-node swarm and `sandbox_image` on both nodes, as an operator would set it up;
    all of it undone at the end."""
    timings: dict[str, float] = {}
    with _locked(), contextlib.closing(docker_support.client()) as manager:
        gateway = docker_support.bridge_gateway(manager)
        image = worker_image(manager, timings)
        began = time.monotonic()
        had_gwbridge = bool(manager.networks.list(names=["docker_gwbridge"]))
        ours = _enter_swarm(manager, gateway)
        worker_client: docker.DockerClient | None = None
        try:
            worker_client, address = _start_worker(manager, image, run_dir)
            worker_client.swarm.join(
                remote_addrs=[f"{gateway}:2377"],
                join_token=manager.swarm.attrs["JoinTokens"]["Worker"],
                listen_addr="0.0.0.0:2377",
                advertise_addr=address,
            )
            timings["cluster_s"] = time.monotonic() - began
            load_image(manager, worker_client, sandbox_image, timings)
            yield Cluster(
                manager=manager,
                worker=worker_client,
                worker_hostname=WORKER,
                worker_address=address,
                gateway=gateway,
                timings=timings,
                worker_socket=run_dir / "worker-run" / "docker.sock",
            )
        finally:
            _leave(manager, worker_client, ours, had_gwbridge)


def _enter_swarm(manager: docker.DockerClient, gateway: str) -> bool:
    """The host's daemon as a manager advertising on docker0 (the worker reaches it there);
    True when these tests made (or had made) that swarm."""
    info = manager.info()["Swarm"]
    if info["LocalNodeState"] == "active":
        node = manager.nodes.get(info["NodeID"])
        if (node.attrs["Spec"].get("Labels") or {}).get(MARK) != "true":
            if not info.get("ControlAvailable") or info.get("NodeAddr") != gateway:
                raise docker_support.Unavailable(
                    "the Docker daemon is in a swarm these tests cannot use (not its manager, "
                    f"or not advertised on {gateway}): they leave it alone"
                )
            return False
        # Left by a run that did not finish (its services, tasks and networks with it): made anew.
        manager.swarm.leave(force=True)
    # A 1 s heartbeat: a worker that died is marked down within seconds, not 15.
    manager.swarm.init(
        advertise_addr=gateway,
        listen_addr=f"{gateway}:2377",
        dispatcher_heartbeat_period=1_000_000_000,
    )
    node = manager.nodes.get(manager.info()["Swarm"]["NodeID"])
    spec = node.attrs["Spec"]
    node.update({**spec, "Labels": {**(spec.get("Labels") or {}), MARK: "true"}})
    return True


def _start_worker(
    manager: docker.DockerClient, image: str, run_dir: Path
) -> tuple[docker.DockerClient, str]:
    """The worker's container on its kept data directory (swarm state, containers, networks
    and volumes of an earlier run dropped) and its daemon's client through a socket on this
    machine."""
    with contextlib.suppress(docker.errors.NotFound):
        manager.containers.get(WORKER).remove(force=True)
    data = docker_support.CACHE / "swarm-worker-docker"
    for state in ("swarm", "network"):  # its membership, and the networks it brought
        shutil.rmtree(data / state, ignore_errors=True)
    data.mkdir(parents=True, exist_ok=True)
    sockets = run_dir / "worker-run"
    sockets.mkdir(parents=True, exist_ok=True)
    # The API's form of the CLI's `--security-opt systempaths=unconfined`: nothing of /proc
    # or /sys masked or read-only (the worker's daemon writes there), which the SDK cannot say.
    host_config = manager.api.create_host_config(
        cap_add=["ALL"],
        cap_drop=["SYS_RESOURCE"],
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        binds={
            "/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"},
            str(data): {"bind": "/var/lib/docker", "mode": "rw"},
            str(sockets): {"bind": "/run/worker", "mode": "rw"},
        },
    )
    host_config.update({"MaskedPaths": [], "ReadonlyPaths": []})
    created = manager.api.create_container(
        image,
        name=WORKER,
        hostname=WORKER,
        host_config=host_config,
        # A machine that lost power boots with its daemons' pid files still there: dockerd was
        # PID 1 and is PID 1 again, so it would take the stale file for a daemon running.
        command=[
            "sh",
            "-c",
            "rm -f /var/run/docker.pid /var/run/docker/containerd/*.pid "
            "/run/worker/docker.sock && exec dockerd --host=unix:///var/run/docker.sock "
            f"--host=unix:///run/worker/docker.sock --cgroup-parent=/{WORKER} --icc=false",
        ],
        # Tasks use the image loaded here: no registry lookup before each start.
        environment={"DOCKER_SERVICE_PREFER_OFFLINE_IMAGE": "1"},
    )
    container = manager.containers.get(created["Id"])
    container.start()
    socket = sockets / "docker.sock"
    wait_for(lambda: docker_support._answers(socket), 60, interval=0.2, what="the worker's daemon")
    client = docker.DockerClient(base_url=f"unix://{socket}", version="auto", timeout=300)
    client.containers.prune()
    client.volumes.prune()
    container.reload()
    return client, str(container.attrs["NetworkSettings"]["IPAddress"])


def _leave(
    manager: docker.DockerClient, worker: docker.DockerClient | None, ours: bool, had_gwbridge: bool
) -> None:
    if worker is not None:
        with contextlib.suppress(docker.errors.APIError):
            worker.swarm.leave(force=True)
        worker.close()
    with contextlib.suppress(docker.errors.NotFound):
        manager.containers.get(WORKER).remove(force=True)
    info = manager.info()["Swarm"]
    with contextlib.suppress(docker.errors.APIError):
        for node in manager.nodes.list():
            if node.attrs["Description"]["Hostname"] == WORKER:
                node.remove(force=True)
    if ours and info["LocalNodeState"] == "active":
        manager.swarm.leave(force=True)
        if not had_gwbridge:
            wait_for(
                lambda: _network_gone(manager, "docker_gwbridge"),
                60,
                interval=0.5,
                what="docker_gwbridge to go",
            )


def _network_gone(c: docker.DockerClient, name: str) -> bool:
    try:
        c.networks.get(name).remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as exc:  # its last endpoints are still going
        print(f"removing {name}: {exc}")
        return False
    return True


def kill_task_container(cluster: Cluster, service_id: str) -> None:
    """The sandbox's container killed on its node, behind Swarm's back (an OOM kill, a crash).
    Listed sparse and running only: a task the service replaced may be removed meanwhile (the
    SDK's full listing inspects each one it found, and failed on it with NotFound)."""
    for found in cluster.worker.api.containers(
        filters={"label": f"com.docker.swarm.service.id={service_id}", "status": "running"}
    ):
        cluster.worker.api.kill(found["Id"])
