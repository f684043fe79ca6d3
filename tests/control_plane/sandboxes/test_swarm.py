"""The Swarm provider for real, on a two-node swarm made on this machine (tests/support/swarm.py:
the host's daemon as the manager, a docker-in-docker worker): every sandbox is placed on the
worker by a placement constraint, as a service of the sandbox image built from Debian packages.

The scripted LLM and the control planes listen on the host's docker0 address, which both nodes
reach (a sandbox only its control plane's, through its node's fence); the Git daemon of the test
repository is on the test internet, where the worker's traffic is routed meanwhile. The control
planes reach each sandbox on the worker's address and the port its task published there."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import httpx
import pytest

from control_plane.__main__ import node_fence
from control_plane.config import Config
from control_plane.providers.containers import (
    LABEL_PLANE,
    LABEL_SANDBOX,
    VOLUME_DIR,
    name_of,
    plane_label,
)
from control_plane.providers.swarm.fence import LABEL_FENCE
from control_plane.providers.swarm.nodejobs import Jobs
from control_plane.providers.swarm.spec import KEYS_FILE, ROOT_CAPS, node_of
from tests.control_plane.planes import PlaneProcess
from tests.control_plane.postgres import PostgresServer
from tests.control_plane.support import (
    ControlPlane,
    ShiftedClock,
    configure_llm,
    conversation,
    git_daemon,
    start,
    wait_task,
)
from tests.control_plane.tenants import outcomes, probe, reads, run, victim
from tests.control_plane.test_flow import bare_repository, delete_last_conversation, whole_flow
from tests.support import docker as docker_support
from tests.support import swarm as swarm_support
from tests.support.internet import Internet
from tests.support.llm import ScriptedLLM, call, free_port
from tests.support.swarm import Cluster
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def swarm(sandbox_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    stack = contextlib.ExitStack()
    try:
        cluster = stack.enter_context(
            swarm_support.cluster(sandbox_image, tmp_path_factory.mktemp("swarm"))
        )
    except docker_support.Unavailable as exc:
        pytest.skip(str(exc))
    with stack:
        yield cluster


@pytest.fixture(autouse=True)
def two_nodes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that failed with its worker down (or given up) does not take the next ones with
    it: the worker is brought back after each test that used the cluster."""
    yield
    if "swarm" in request.fixturenames:
        request.getfixturevalue("swarm").restore()


@pytest.fixture(scope="module")
def llm(swarm: Cluster) -> Iterator[ScriptedLLM]:
    """The scripted LLM where both nodes' containers reach it."""
    server = ScriptedLLM(host=swarm.gateway).start()
    yield server
    server.stop()


def settings(swarm: Cluster, image: str, port: int, **extra: Any) -> dict[str, Any]:
    """A swarm control plane's settings: on 0.0.0.0, reached by the nodes on docker0; its
    nodes' fences ask the test internet's DNS server."""
    return {
        "host": "0.0.0.0",
        "port": port,
        "public_url": f"http://{swarm.gateway}:{port}",
        "sandbox_provider": "swarm",
        "sandbox_image": image,
        "sandbox_dns_upstream": (Internet.shared().dns,),
        "swarm_constraints": (f"node.hostname=={swarm.worker_hostname}",),
        "sandbox_stop_grace": 2.0,
        "health_interval": 0.5,
        **extra,
    }


def swarm_config(state_dir: Path, swarm: Cluster, image: str, **extra: Any) -> Config:
    return Config(
        state_dir=state_dir,
        stop_sandboxes_on_exit=True,
        **settings(swarm, image, free_port(), **extra),
    )


@contextlib.contextmanager
def running(
    config: Config, swarm: Cluster, clock: ShiftedClock | None = None
) -> Iterator[ControlPlane]:
    plane = ControlPlane(config, clock).start()
    try:
        yield plane
    finally:
        plane.stop()
        swarm.remove_labelled(f"{LABEL_PLANE}={plane_label(config.db_url)}")


def service_of(swarm: Cluster, sandbox_id: str) -> dict[str, Any]:
    [service] = [
        s
        for s in swarm.services(f"{LABEL_SANDBOX}={sandbox_id}")
        if s["Spec"]["Name"] == name_of(sandbox_id)
    ]
    return service


def tasks_of(swarm: Cluster, service_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = swarm.manager.api.tasks(filters={"service": service_id})
    return found


def record(client: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get("/api/v1/sandboxes", params={"id": sandbox_id}).json()[0]
    return found


def status_of(client: httpx.Client, sandbox_id: str) -> str:
    return str(record(client, sandbox_id)["status"])


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/alive", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def has_volume(client: Any, sandbox_id: str) -> bool:
    return bool(client.volumes.list(filters={"name": name_of(sandbox_id)}))


def test_the_whole_flow_on_the_worker(
    tmp_path: Path, swarm: Cluster, sandbox_image: str, llm: ScriptedLLM, key: str
) -> None:
    bare_repository(tmp_path / "forge", "acme/demo")
    # The forge is on the test internet (the node's fence keeps sandboxes off this host).
    with (
        git_daemon(tmp_path / "forge") as forge,
        Internet.shared().contained(swarm.worker_address),
        running(
            swarm_config(tmp_path / "cp", swarm, sandbox_image, repository_url_template=forge),
            swarm,
        ) as plane,
    ):
        flow = whole_flow(plane, llm, key)
        client, sid = flow.client, flow.sid

        # A one-replica service placed on the worker by the constraint, reached on the
        # worker's address (host-mode port), its workspace in a volume there.
        service = service_of(swarm, sid)
        spec = service["Spec"]
        assert spec["Labels"][LABEL_PLANE] == plane_label(plane.config.db_url)
        assert spec["Mode"] == {"Replicated": {"Replicas": 1}}
        [task] = [t for t in tasks_of(swarm, service["ID"]) if t["DesiredState"] == "running"]
        worker_node = swarm.manager.nodes.get(task["NodeID"])
        assert worker_node.attrs["Description"]["Hostname"] == swarm.worker_hostname
        [port] = task["Status"]["PortStatus"]["Ports"]
        assert port["PublishMode"] == "host"
        assert flow.url == f"http://{swarm.worker_address}:{port['PublishedPort']}"
        assert has_volume(swarm.worker, sid) and not has_volume(swarm.manager, sid)
        # The key is in no spec: only in its secret, which nobody reads back.
        assert flow.session not in json.dumps(service)
        [secret] = swarm.manager.api.secrets(filters={"label": f"{LABEL_SANDBOX}={sid}"})
        assert "Data" not in secret["Spec"]

        # Pause stops the service (Swarm cannot freeze one), pinned to its node, its port kept.
        r = client.post(f"/api/v1/sandboxes/{sid}/pause")
        assert r.status_code == 200 and r.json()["status"] == "PAUSED", r.text
        spec = service_of(swarm, sid)["Spec"]
        assert spec["Mode"] == {"Replicated": {"Replicas": 0}}
        assert f"node.id=={worker_node.id}" in spec["TaskTemplate"]["Placement"]["Constraints"]
        assert not answers(flow.url)
        assert has_volume(swarm.worker, sid)

        # Resume: a new task on the same node and port, the workspace as it was, runs go on.
        r = client.post(f"/api/v1/sandboxes/{sid}/resume")
        assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
        assert record(client, sid)["exposed_urls"][0]["url"] == flow.url and answers(flow.url)
        r = client.get(f"/api/v1/app-conversations/{flow.cid}/file", params={"path": "hello.py"})
        assert r.status_code == 200 and r.text == "print(1)\n"
        llm.script(key, call("terminal", command="cat hello.py"), call("finish", message="back"))
        r = client.post(
            f"/api/v1/app-conversations/{flow.cid}/send-message",
            json={"role": "user", "content": [{"type": "text", "text": "again"}], "run": True},
        )
        assert r.status_code == 200, r.text
        wait_for(lambda: len(flow.actions()) >= 5, 60, what="the actions after resuming")

        # Delete: the workspace archived from the worker's volume, then nothing left there.
        delete_last_conversation(plane, flow)
        assert swarm.services(f"{LABEL_SANDBOX}={sid}") == []
        assert swarm.manager.api.secrets(filters={"label": f"{LABEL_SANDBOX}={sid}"}) == []
        assert not has_volume(swarm.worker, sid)


@pytest.mark.parametrize("pool", [0, 2], ids=["cold", "warm-pool"])
def test_the_keys_are_out_of_the_agents_reach(
    tmp_path: Path, swarm: Cluster, sandbox_image: str, llm: ScriptedLLM, pool: int
) -> None:
    """A prompt-injected agent (a terminal command, a child of the agent server) and the
    sandbox's own /api/bash try every way to the keys: the secret's file, every environment,
    root's descriptors, the spec; and the hardening as Docker reports it on the worker; and
    another sandbox's port on the node's bridge. With a warm pool, both sandboxes are parked
    services claimed (their secret a claim token, their keys over their port)."""
    config = swarm_config(tmp_path / "cp", swarm, sandbox_image, warm_pool=pool)
    with running(config, swarm) as plane:
        if pool:
            wait_for(
                lambda: len(swarm.parked(plane_label(config.db_url))) == pool,
                120,
                what="the parked services",
            )
        a = victim(plane, llm)
        secret_file = f"/run/secrets/{KEYS_FILE}"
        b = run(
            plane,
            llm,
            "mallory",
            reads([secret_file, "/proc/1/environ", "/proc/1/fd/3"])
            + "; ls /proc/1/fd; echo [fd listed: $?]",
        )
        told = b.events()
        assert f"[read {secret_file}: 1]" in told and "[read /proc/1/environ: 1]" in told
        assert "[fd listed: 2]" in told and "[environ read]" in told
        for leak in (a.session, b.session, a.secret, a.llm_key):
            assert leak not in told
        inside = b.bash(
            "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
            f"cat {secret_file}; cat /proc/[0-9]*/environ | tr '\\0' '\\n'"
        )
        lines = inside["stdout"].split("\n")
        assert lines[:4] == [
            "1000",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "NoNewPrivs:\t1",
        ], inside
        assert "Permission denied" in inside["stderr"] and b.session not in inside["stdout"]
        assert "AGENT_SERVER_RUN_TAG=" in inside["stdout"]  # the environments it may read
        for sid, session in ((a.sid, a.session), (b.sid, b.session)):
            assert session not in json.dumps(service_of(swarm, sid))
            command = service_of(swarm, sid)["Spec"]["TaskTemplate"]["ContainerSpec"]["Command"]
            assert ("agent_server.warm --claim" in " ".join(command)) == bool(pool)

        # The hardening, as the worker's Docker reports it.
        [container] = swarm.worker.containers.list(
            filters={"label": f"com.docker.swarm.service.name={name_of(b.sid)}"}
        )
        host = container.attrs["HostConfig"]
        assert host["Privileged"] is False and host["CapDrop"] == ["ALL"]
        assert sorted(host["CapAdd"]) == sorted(ROOT_CAPS) and host["ReadonlyRootfs"] is True
        assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (
            int(plane.config.sandbox_memory_limit),
            int(plane.config.sandbox_cpu_limit * 1e9),
            plane.config.sandbox_pids_limit,
        )
        assert {m["Type"] for m in container.attrs["Mounts"]} <= {"volume", "tmpfs", "bind"}
        assert "docker.sock" not in json.dumps(container.attrs)
        env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
        assert "SESSION_API_KEY" not in env and b.session not in json.dumps(container.attrs)

        # On the node's bridge, B does not reach A's agent server; A reaches itself.
        [a_container] = swarm.worker.containers.list(
            filters={"label": f"com.docker.swarm.service.name={name_of(a.sid)}"}
        )
        a_ip = next(iter(a_container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        probe = (
            "python3 -c 'import socket, sys\n"
            "try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
            "except OSError as e:\n    sys.exit(str(e))' "
        )
        assert b.bash(probe + f"{a_ip} 8000")["exit_code"] != 0
        assert a.bash(probe + f"{a_ip} 8000")["exit_code"] == 0
        assert b.bash(probe + f"{swarm.gateway} {plane.config.port}")["exit_code"] == 0


def test_the_nodes_fence_holds_each_policy(
    tmp_path: Path, swarm: Cluster, sandbox_image: str, llm: ScriptedLLM
) -> None:
    """The network boundary on a swarm node (its fence, a global service of the sandbox
    image), tried as a prompt-injected agent on the worker would: `open` reaches the test
    internet by name and address and nothing of the node, the manager, another sandbox or a
    private or link-local range, refused at once and counted; the control plane itself is
    reached (the run goes on); then an allowlist and `none`, changed while it runs. Whatever
    the worker sends off this machine's networks ends in the test internet meanwhile."""
    internet = Internet.shared()
    canary = socket.create_server(("0.0.0.0", 0))
    with (
        contextlib.closing(canary),
        internet.contained(swarm.worker_address),
        running(swarm_config(tmp_path / "cp", swarm, sandbox_image), swarm) as plane,
    ):
        neighbour = run(plane, llm, "alice", "true")
        [container] = swarm.worker.containers.list(
            filters={"label": f"com.docker.swarm.service.name={name_of(neighbour.sid)}"}
        )
        neighbour_ip = next(iter(container.attrs["NetworkSettings"]["Networks"].values()))[
            "IPAddress"
        ]
        web = internet.socket(80, internet.names["allowed.test"][0])
        with contextlib.closing(web):
            attacker = run(
                plane,
                llm,
                "mallory",
                probe(
                    {
                        "internet": ("allowed.test", 80),
                        "node": (swarm.worker_address, 2375),
                        "manager": (swarm.gateway, canary.getsockname()[1]),
                        "neighbour": (neighbour_ip, 8000),
                        "metadata": ("169.254.169.254", 80),
                        "private": ("10.0.0.1", 80),
                    }
                ),
            )
        seen = outcomes(attacker)
        assert seen.pop("internet") == "connected", seen
        assert all(outcome.startswith("refused") for outcome in seen.values()), seen
        # The fence reports once a second: a report read while the probe ran counts only the
        # refusals made before it, so the next one is waited for.
        state = wait_for(
            lambda: (
                (s := attacker.client.get(f"/api/v1/sandboxes/{attacker.sid}/network").json())
                and (s["refused"] or 0) >= 4
                and s
            ),
            30,
            what="the node fence's report of the probe's refusals",
        )
        assert state["enforced"], state

        tried = probe({"allowed": ("allowed.test", 80), "other": ("other.test", 7000)})
        changed = attacker.client.patch(
            f"/api/v1/sandboxes/{attacker.sid}",
            json={"network_policy": {"mode": "allowlist", "allow": ["allowed.test:80"]}},
        )
        assert changed.status_code == 200, changed.text  # returns once the fence holds it
        web = internet.socket(80, internet.names["allowed.test"][0])
        with contextlib.closing(web):
            lines = attacker.bash(tried)["stdout"].splitlines()
            assert dict(line.split(" ", 1) for line in lines) == {
                "allowed": "connected",
                "other": "unresolved",
            }
            changed = attacker.client.patch(
                f"/api/v1/sandboxes/{attacker.sid}", json={"network_policy": {"mode": "none"}}
            )
            assert changed.status_code == 200, changed.text
            lines = attacker.bash(tried)["stdout"].splitlines()
            assert dict(line.split(" ", 1) for line in lines) == {
                "allowed": "unresolved",
                "other": "unresolved",
            }


def test_sandboxes_on_gvisor_nodes(
    tmp_path: Path, swarm: Cluster, sandbox_image: str, llm: ScriptedLLM
) -> None:
    """Swarm on gVisor, deployed as docs/gvisor.md says: the worker's fence run by its operator
    on runc (the command `control-plane node-fence` prints, the token copied to the node). On a
    node still on runc a start ends in ERROR with why; made runsc's default, a prompt-injected
    agent's terminal sees gVisor's kernel, and the node fence holds it as on runc."""
    config = swarm_config(tmp_path / "cp", swarm, sandbox_image, sandbox_runtime="runsc")
    token = tmp_path / "fence-token"
    ours = f"{LABEL_PLANE}={plane_label(config.db_url)}"
    internet = Internet.shared()

    def fence_logs() -> str:
        return str(
            swarm.worker.containers.get(f"agent-fence-{plane_label(config.db_url)}")
            .logs(tail=20)
            .decode()
        )

    with internet.contained(swarm.worker_address), running(config, swarm) as plane:
        command = node_fence(config, str(token))
        swarm.put(str(token), token.read_bytes())
        fence = subprocess.run(
            shlex.split(command),
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_HOST": f"unix://{swarm.worker_socket}"},
        )
        try:
            assert fence.returncode == 0, fence.stderr
            assert swarm.services(ours) == []  # no global fence service on gVisor

            client = plane.client(plane.new_user("dave"))
            configure_llm(client, "http://127.0.0.1:9/v1")  # never reached
            task = start(client)
            assert task["status"] == "ERROR", task
            assert "runs it on runc, not runsc" in task["detail"], (task, fence_logs())
            assert swarm.services(ours) == []  # nothing of the start left

            swarm.default_runtime("runsc")
            web = internet.socket(80, internet.names["allowed.test"][0])
            with contextlib.closing(web):
                agent = run(
                    plane,
                    llm,
                    "mallory",
                    "cat /proc/version; dmesg | head -1; "
                    + probe(
                        {
                            "internet": ("allowed.test", 80),
                            "node": (swarm.worker_address, 2375),
                            "manager": (swarm.gateway, 2377),
                            "private": ("10.0.0.1", 80),
                        }
                    ),
                )
            told = agent.events()
            assert "Starting gVisor" in told and "Linux version 4.4.0" in told, told
            seen = {
                k: v
                for k, v in outcomes(agent).items()
                if k in ("internet", "node", "manager", "private")
            }
            assert seen.pop("internet") == "connected", seen
            assert len(seen) == 3 and all(v.startswith("refused") for v in seen.values()), seen
            [container] = swarm.worker.containers.list(
                filters={"label": f"com.docker.swarm.service.name={name_of(agent.sid)}"}
            )
            assert container.attrs["HostConfig"]["Runtime"] == "runsc"
        finally:
            swarm.default_runtime("runc")
            with contextlib.suppress(docker.errors.NotFound):
                swarm.worker.containers.get(f"agent-fence-{plane_label(config.db_url)}").remove(
                    force=True
                )


def test_a_sandbox_no_node_can_take_ends_its_start(
    tmp_path: Path, swarm: Cluster, sandbox_image: str
) -> None:
    config = swarm_config(
        tmp_path / "cp",
        swarm,
        sandbox_image,
        swarm_placement_timeout=3.0,
        swarm_constraints=("node.labels.agent-server-test-nowhere==true",),
    )
    with running(config, swarm) as plane:
        client = plane.client(plane.new_user("dave"))
        configure_llm(client, "http://127.0.0.1:9/v1")  # never reached
        began = time.monotonic()
        task = start(client)
        assert task["status"] == "ERROR" and "no node can take the sandbox" in task["detail"]
        assert "no suitable node" in task["detail"] and time.monotonic() - began < 60
        [sandbox] = client.get("/api/v1/sandboxes/search").json()["items"]
        assert sandbox["status"] == "MISSING"
        left = swarm.services(f"{LABEL_PLANE}={plane_label(config.db_url)}")
        assert [s for s in left if LABEL_FENCE not in s["Spec"]["Labels"]] == []  # (the nodes'
        # fences stay: they are the deployment's, not a sandbox's)


def test_a_volume_its_ended_container_still_holds_is_removed(
    swarm: Cluster, sandbox_image: str
) -> None:
    """The volume job on a node where an ended container of the sandbox's service is still
    there, holding the volume (Swarm once left one past the job's minute after the service was
    scaled to 0): that container goes, then the volume; a neighbour's ended container stays."""
    sandbox, neighbour = name_of(uuid.uuid4().hex), name_of(uuid.uuid4().hex)
    held = {}
    for name in (sandbox, neighbour):
        held[name] = swarm.worker.containers.create(
            sandbox_image,
            entrypoint=["true"],
            labels={"com.docker.swarm.service.name": name},
            volumes={name: {"bind": VOLUME_DIR, "mode": "rw"}},
        )
        held[name].start()
        assert held[name].wait(timeout=60)["StatusCode"] == 0
    [attrs] = swarm.manager.api.nodes(filters={"name": swarm.worker_hostname})
    jobs = Jobs(
        swarm.manager,
        image=sandbox_image,
        labels={LABEL_SANDBOX: sandbox},
        start_timeout=60,
        node_socket="/var/run/docker.sock",
    )
    try:
        jobs.remove_volume(sandbox, node_of(attrs), sandbox)
        names = {v.name for v in swarm.worker.volumes.list()}
        assert sandbox not in names and neighbour in names
        with pytest.raises(docker.errors.NotFound):
            held[sandbox].reload()
        held[neighbour].reload()  # still there
    finally:
        for name, container in held.items():
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
            with contextlib.suppress(docker.errors.NotFound):
                swarm.worker.volumes.get(name).remove()


def test_the_timers_pause_and_delete_a_swarm_sandbox(
    tmp_path: Path, swarm: Cluster, sandbox_image: str, llm: ScriptedLLM, key: str
) -> None:
    """The 12-hour cap pauses it (scaled to 0), the deletion time deletes it with its archive,
    through the reconciler on a clock the test moves."""
    clock = ShiftedClock()
    config = swarm_config(
        tmp_path / "cp",
        swarm,
        sandbox_image,
        idle_seconds=None,
        deletion_seconds=3600.0,
        lifecycle_interval=0.3,
    )
    with running(config, swarm, clock) as plane:
        client = plane.client(plane.new_user("erin"))
        configure_llm(client, llm.base_url(key), tools=["terminal"])
        llm.script(
            key, call("terminal", command="echo kept > kept.txt"), call("finish", message="ok")
        )
        task = start(client, "go")
        sid, cid = task["sandbox_id"], task["app_conversation_id"]
        wait_for(
            lambda: conversation(client, cid)["execution_status"] == "finished", 60, what="the run"
        )
        clock.offset = 12 * 3600 + 1
        paused = wait_for(
            lambda: (r := record(client, sid))["status"] == "PAUSED" and r,
            60,
            what="the 12-hour cap",
        )
        assert paused["status_reason"] == "SESSION_CAP"
        assert service_of(swarm, sid)["Spec"]["Mode"] == {"Replicated": {"Replicas": 0}}
        clock.offset += 3600 + 1
        gone = wait_for(
            lambda: (r := record(client, sid))["status"] == "MISSING" and r,
            60,
            what="the deletion time",
        )
        assert gone["status_reason"] == "DELETION_TIME"
        archive = plane.config.state_dir / "archives" / f"{sid}.tar.gz"
        wait_for(
            lambda: (
                archive.exists()
                and not has_volume(swarm.worker, sid)
                and swarm.services(f"{LABEL_SANDBOX}={sid}") == []
            ),
            60,
            what="the archive, then the volume's and the service's removal",
        )


def test_two_control_planes_share_the_cluster(
    tmp_path: Path,
    swarm: Cluster,
    sandbox_image: str,
    llm: ScriptedLLM,
    key: str,
    postgres: PostgresServer,
) -> None:
    """Two control-plane processes on one PostgreSQL, both driving the swarm's manager: starts
    on both, one started by A is paused by B and resumed by A, A deletes one B started, and B
    SIGKILLed while it starts a sandbox: A takes that start over."""
    from cryptography.fernet import Fernet

    url, secret = postgres.new_database(), Fernet.generate_key().decode()
    planes = []
    for name in ("a", "b"):
        plane = PlaneProcess(
            tmp_path / name,
            database_url=url,
            secret_key=secret,
            lease_seconds="2",
            lifecycle_interval="0.5",
        )
        values = settings(swarm, sandbox_image, plane.port)
        plane.env.update(
            {
                "CONTROL_PLANE_" + k.upper(): ",".join(v) if isinstance(v, tuple) else str(v)
                for k, v in values.items()
            }
        )
        planes.append(plane)
    a, b = planes
    try:
        for plane in planes:
            plane.start()
        headers = {"Authorization": f"Bearer {a.new_key('frank')}"}
        with (
            httpx.Client(base_url=a.url, headers=headers, timeout=60) as ca,
            httpx.Client(base_url=b.url, headers=headers, timeout=60) as cb,
        ):
            configure_llm(ca, llm.base_url(key), grouping_strategy="NO_GROUPING")
            posted = [
                (c, c.post("/api/v1/app-conversations", json={}).json()["id"]) for c in (ca, cb)
            ]
            done = [wait_task(c, task_id, 120) for c, task_id in posted]
            assert [t["status"] for t in done] == ["READY"] * 2, [t["detail"] for t in done]
            on_worker = {t["sandbox_id"] for t in done}
            assert len(on_worker) == 2 and all(service_of(swarm, s) for s in on_worker)

            # One A started: B pauses it, A resumes it, A deletes one B started.
            first, second = done[0]["sandbox_id"], done[1]["sandbox_id"]
            assert cb.post(f"/api/v1/sandboxes/{first}/pause").json()["status"] == "PAUSED"
            resumed = ca.post(f"/api/v1/sandboxes/{first}/resume").json()
            assert resumed["status"] == "RUNNING" and answers(resumed["exposed_urls"][0]["url"])
            r = ca.delete(f"/api/v1/sandboxes/{second}", params={"sandbox_id": second})
            assert r.status_code == 200
            assert (tmp_path / "a" / "archives" / f"{second}.tar.gz").exists()
            assert swarm.services(f"{LABEL_SANDBOX}={second}") == []

            # B dies while it starts one: A finishes it (its reconciler takes the lease).
            later = cb.post("/api/v1/app-conversations", json={}).json()["id"]
            b.kill()
            ended = wait_task(ca, later, 120)
            assert ended["status"] == "READY", ended["detail"]
            assert answers(record(ca, ended["sandbox_id"])["exposed_urls"][0]["url"])
    finally:
        for plane in planes:
            plane.stop()
        swarm.remove_labelled(f"{LABEL_PLANE}={plane_label(url)}")


def test_a_task_that_dies_and_a_worker_that_goes(
    tmp_path: Path, swarm: Cluster, sandbox_image: str, llm: ScriptedLLM
) -> None:
    """Drift on a cluster: a sandbox whose container was killed on its node is MISSING with
    the task's end; when the worker dies mid-run its sandbox is lost with the reason and
    nothing stored is lost; a paused sandbox on it cannot be resumed while it is down (409,
    still PAUSED) and is resumed once it is back, its workspace there; a sandbox whose node left
    the cluster is MISSING."""
    config = swarm_config(
        tmp_path / "cp", swarm, sandbox_image, health_grace=3.0, lifecycle_interval=0.5
    )
    with running(config, swarm) as plane:
        client = plane.client(plane.new_user("grace"))
        script = f"g-{uuid.uuid4().hex[:8]}"
        configure_llm(
            client, llm.base_url(script), tools=["terminal"], grouping_strategy="NO_GROUPING"
        )

        def started(command: str, *more: Any) -> tuple[str, str]:
            llm.script(script, call("terminal", command=command), *more)
            task = start(client, "go")
            assert task["status"] == "READY", task
            return task["sandbox_id"], task["app_conversation_id"]

        def events(cid: str) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = client.get(
                f"/api/v1/conversation/{cid}/events/search", params={"limit": 100}
            ).json()["items"]
            return found

        # A task killed on its node: MISSING, with the task's end.
        killed, killed_cid = started("true", call("finish", message="ok"))
        wait_for(
            lambda: conversation(client, killed_cid)["execution_status"] == "finished",
            60,
            what="the run (its replies all taken)",
        )
        swarm_support.kill_task_container(swarm, service_of(swarm, killed)["ID"])
        lost = wait_for(
            lambda: (r := record(client, killed))["status"] == "MISSING" and r,
            60,
            what="the killed task to be seen",
        )
        assert lost["status_reason"] == "VANISHED" and "task" in lost["status_detail"]
        assert "exit status 137" in lost["status_detail"], lost

        # A paused one, and one mid-run (a long command) when the worker dies.
        paused, paused_cid = started("echo stays > stays.txt", call("finish", message="ok"))
        wait_for(
            lambda: conversation(client, paused_cid)["execution_status"] == "finished",
            60,
            what="the run",
        )
        r = client.get(f"/api/v1/app-conversations/{paused_cid}/file", params={"path": "stays.txt"})
        assert r.status_code == 200 and r.text == "stays\n", r.text
        assert client.post(f"/api/v1/sandboxes/{paused}/pause").json()["status"] == "PAUSED"
        busy, busy_cid = started("echo one > one.txt; sleep 600")
        wait_for(
            lambda: any(e["kind"] == "ActionEvent" for e in events(busy_cid)),
            60,
            what="the first step's events",
        )
        stored = events(busy_cid)
        swarm.stop_worker()
        down = wait_for(
            lambda: (r := record(client, busy))["status"] in ("ERROR", "MISSING") and r,
            60,
            what="the sandbox on the dead worker to be lost",
        )
        assert down["status_reason"] in ("UNHEALTHY", "VANISHED") and down["status_detail"], down
        assert events(busy_cid)[: len(stored)] == stored  # what was stored stays, read-only
        r = client.get(f"/api/v1/app-conversations/{busy_cid}/download")
        assert r.status_code == 200

        # Its paused neighbour cannot come back while the node is down, and stays PAUSED.
        wait_for(lambda: swarm.node_state() == "down", 60, what="the node to be seen down")
        r = client.post(f"/api/v1/sandboxes/{paused}/resume")
        assert r.status_code == 409 and swarm.worker_hostname in r.json()["detail"], r.text
        assert "is down" in r.json()["detail"] and status_of(client, paused) == "PAUSED"

        # The worker is back: the resume works, the workspace was on its volume.
        swarm.start_worker()
        r = client.post(f"/api/v1/sandboxes/{paused}/resume")
        assert r.status_code == 200 and r.json()["status"] == "RUNNING", r.text
        r = client.get(f"/api/v1/app-conversations/{paused_cid}/file", params={"path": "stays.txt"})
        assert r.status_code == 200 and r.text == "stays\n", r.text
        # The lost one's clean-up, due again, archives its workspace from the node now back.
        r = client.delete(f"/api/v1/sandboxes/{busy}", params={"sandbox_id": busy})
        assert r.status_code == 200
        assert (plane.config.state_dir / "archives" / f"{busy}.tar.gz").exists()

        # A node that left the cluster: its paused sandbox is MISSING, with why.
        assert client.post(f"/api/v1/sandboxes/{paused}/pause").json()["status"] == "PAUSED"
        swarm.stop_worker()
        swarm.remove_worker_node()
        left = wait_for(
            lambda: (r := record(client, paused))["status"] == "MISSING" and r,
            60,
            what="the sandbox of the node that left",
        )
        assert "left the cluster" in left["status_detail"], left
        swarm.rejoin_worker()


PARKED_HOLDER = """
import asyncio, sys
from pathlib import Path
from control_plane.providers.pool import Pooled
from control_plane.providers.swarm.provider import SwarmProvider
from control_plane.providers.swarm.settings import SwarmSettings

async def main() -> None:
    hooks = "http://127.0.0.1:9/hooks"
    provider = Pooled(SwarmProvider(SwarmSettings(Path(sys.argv[1]), image=sys.argv[2],
                                                  plane=sys.argv[3], network="bridge",
                                                  constraints=(sys.argv[4],), warm_pool=1,
                                                  webhook_url=hooks, lifeline=3)), 1, hooks)
    await provider.start()
    while not provider.pool.waiting:
        await asyncio.sleep(0.05)
    print(provider.pool.waiting[0], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_parked_service_is_claimed_once_with_its_token_and_ends_with_its_pool(
    tmp_path: Path, swarm: Cluster, sandbox_image: str
) -> None:
    """A pool of one on the worker: its parked service holds a claim token, not a key; a
    start claims it (the keys over its port, the parked label off) and it answers with that
    key alone; the pool parks another. A control plane SIGKILLed with a service parked: the
    service ends by itself once its lifeline stops, and the next pool removes it."""
    import asyncio
    import subprocess
    import sys

    from control_plane.providers.pool import Pooled
    from control_plane.providers.swarm.pool import LABEL_PARKED
    from control_plane.providers.swarm.provider import SwarmProvider
    from control_plane.providers.swarm.settings import SwarmSettings
    from control_plane.sandboxes.provider import Launch

    plane = f"pool-{uuid.uuid4().hex[:8]}"
    constraint = f"node.hostname=={swarm.worker_hostname}"
    hooks = "http://127.0.0.1:9/hooks"
    provider = Pooled(  # as the composition root wraps it
        SwarmProvider(
            SwarmSettings(
                tmp_path / "archives",
                image=sandbox_image,
                plane=plane,
                network="bridge",
                constraints=(constraint,),
                warm_pool=1,
                webhook_url=hooks,
                lifeline=20,
            )
        ),
        1,
        hooks,
    )
    await provider.start()
    try:
        pool = provider.pool
        deadline = time.monotonic() + 120
        while not pool.waiting:
            assert time.monotonic() < deadline, "nothing was parked"
            await asyncio.sleep(0.1)
        [parked_id] = pool.waiting
        service = service_of(swarm, parked_id)
        assert service["Spec"]["Labels"][LABEL_PARKED] == "true"
        assert "agent_server.warm --claim" in " ".join(
            service["Spec"]["TaskTemplate"]["ContainerSpec"]["Command"]
        )

        sid = provider.reserve("swarm")
        assert sid == parked_id and provider.reserve("swarm") is None
        launch = Launch(
            sandbox_id=sid,
            spec_id="swarm",
            root_dir=Path("/workspace"),
            session_api_key="sk-swarm-pooled-key",
            webhook_url=hooks,
        )
        handle = await provider.create(launch)

        async def keys_work() -> None:
            search = provider.url(handle) + "/api/conversations/search"
            for key, code in (("sk-swarm-pooled-key", 200), ("sk-someone-else", 401)):
                got = await asyncio.to_thread(
                    lambda k=key: (
                        httpx.get(search, headers={"X-Session-API-Key": k}, timeout=10).status_code
                    )
                )
                assert got == code

        await keys_work()
        assert LABEL_PARKED not in service_of(swarm, sid)["Spec"]["Labels"]
        # Paused (its task stops) and resumed (a new task): it starts as a cold one's would,
        # from its keys' secret, with the same key.
        await provider.pause(handle)
        handle = await provider.resume(handle)
        await keys_work()
        command = service_of(swarm, sid)["Spec"]["TaskTemplate"]["ContainerSpec"]["Command"]
        assert "agent_server.warm" not in " ".join(command)
        assert "sk-swarm-pooled-key" not in json.dumps(service_of(swarm, sid))
        while not pool.waiting:  # refilled
            assert time.monotonic() < deadline + 120, "the pool was not refilled"
            await asyncio.sleep(0.1)
        assert pool.waiting != [sid]
    finally:
        await provider.close()
    # Closed: its parked service went, the sandbox stays; deleted, nothing of it is left (its
    # claim token's secret and its keys' both gone).
    services = {s["Spec"]["Name"] for s in swarm.services(f"{LABEL_PLANE}={plane}")}
    assert services == {name_of(sid)}
    other = SwarmProvider(
        SwarmSettings(tmp_path / "a1", image=sandbox_image, plane=plane, network="bridge")
    )
    try:
        await other.destroy(sid, handle, Path("/workspace"))
    finally:
        await other.close()
    assert swarm.services(f"{LABEL_SANDBOX}={sid}") == []
    assert swarm.manager.api.secrets(filters={"label": f"{LABEL_SANDBOX}={sid}"}) == []

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PARKED_HOLDER,
            str(tmp_path / "a2"),
            sandbox_image,
            plane,
            constraint,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        orphan = (await asyncio.to_thread(holder.stdout.readline)).decode().strip()
        holder.kill()
        holder.wait()

        def ended() -> bool:
            tasks = tasks_of(swarm, service_of(swarm, orphan)["ID"])
            return bool(tasks) and all(
                t["Status"]["State"] in ("complete", "failed", "shutdown") for t in tasks
            )

        await asyncio.to_thread(wait_for, ended, 90, what="the orphan to end by itself")
        again = Pooled(
            SwarmProvider(
                SwarmSettings(
                    tmp_path / "a3",
                    image=sandbox_image,
                    plane=plane,
                    network="bridge",
                    constraints=(constraint,),
                    warm_pool=1,
                    webhook_url=hooks,
                    lifeline=20,
                )
            ),
            1,
            hooks,
        )
        await again.start()
        try:
            await asyncio.to_thread(
                wait_for,
                lambda: not swarm.services(f"{LABEL_SANDBOX}={orphan}"),
                90,
                what="the orphan removed by the next pool",
            )
        finally:
            await again.close()
    finally:
        holder.kill()
        if holder.stdout is not None:
            holder.stdout.close()
        swarm.remove_labelled(f"{LABEL_PLANE}={plane}")
