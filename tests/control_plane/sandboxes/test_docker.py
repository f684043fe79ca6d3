"""The Docker provider for real: the control plane runs each sandbox as a container of the
sandbox image (built here from Debian packages, tests/support/docker.py) on the bridge network.

The scripted LLM and a Git daemon serving the test repository listen on the bridge's address;
the container reaches the daemon, and the control plane's webhook and LLM gateway, as
host.docker.internal; the LLM is called by the control plane (its gateway), on the bridge's
address. Skipped with the reason where Docker is not installed."""

from __future__ import annotations

import contextlib
import json
import platform
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
import httpx
import pytest
from docker.models.containers import Container

from control_plane.config import Config
from control_plane.providers.docker.provider import (
    HOST_ALIAS,
    LABEL_PLANE,
    LABEL_SANDBOX,
    STATE_DIR,
    VOLUME_DIR,
    WORKSPACE,
    DockerProvider,
    DockerSettings,
    for_container,
    name_of,
    plane_label,
)
from control_plane.sandboxes.provider import Launch, Liveness, ProviderError
from control_plane.sandboxes.service import CLEANUP_RETRY
from tests.control_plane.support import (
    ControlPlane,
    ShiftedClock,
    bare_repository,
    configure_llm,
    delete_last_conversation,
    git_daemon,
    make_config,
    start,
    whole_flow,
)
from tests.control_plane.tenants import attempts, idle, reads, run, victim
from tests.support import docker as docker_support
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[str]:
    """acme/demo served by `git daemon` on the test internet: the clone URL template."""
    bare_repository(tmp_path / "forge", "acme/demo")
    with git_daemon(tmp_path / "forge") as template:
        yield template


def docker_config(state_dir: Path, image: str, **extra: Any) -> Any:
    # 0.0.0.0: the containers' webhook reaches it through the bridge gateway.
    return make_config(
        state_dir, host="0.0.0.0", sandbox_provider="docker", sandbox_image=image, **extra
    )


#: The control planes a test runs on: runc (Docker's default) and gVisor (`runsc`).
RUNTIMES = pytest.mark.parametrize(
    "plane", [{}, {"sandbox_runtime": "runsc"}], ids=["runc", "gvisor"], indirect=True
)


@pytest.fixture
def plane(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sandbox_image: str,
    forge: str,
    engine: docker.DockerClient,
) -> Iterator[ControlPlane]:
    """`request.param`: more settings (a warm pool's size, gVisor's runtime)."""
    extra = getattr(request, "param", {})
    if extra.get("sandbox_runtime") == "runsc":
        docker_support.ensure_runtime("runsc")
    config = docker_config(tmp_path / "cp", sandbox_image, repository_url_template=forge, **extra)
    server = ControlPlane(config).start()
    yield server
    server.stop()
    docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_label(config.db_url)}")


def container_of(engine: docker.DockerClient, sandbox_id: str) -> Container:
    [container] = engine.containers.list(
        all=True, filters={"label": f"{LABEL_SANDBOX}={sandbox_id}"}
    )
    return container


@pytest.mark.e2e
@RUNTIMES
def test_the_whole_flow_in_a_container(
    plane: ControlPlane, bridge_llm: ScriptedLLM, key: str, engine: docker.DockerClient
) -> None:
    flow = whole_flow(plane, bridge_llm, key)  # called by the control plane (its gateway)
    client, sid = flow.client, flow.sid

    # The container: named and labelled after its sandbox, its port on loopback only, its
    # state and workspace in its own volume, its webhook in its environment (its key came over
    # its stdin, closed since).
    container = container_of(engine, sid)
    assert container.name == name_of(sid) and container.status == "running"
    assert container.labels[LABEL_PLANE] == plane_label(plane.config.db_url)
    bindings = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"]
    assert {b["HostIp"] for b in bindings} == {"127.0.0.1"}
    assert flow.url == f"http://127.0.0.1:{bindings[0]['HostPort']}"
    [mount] = container.attrs["Mounts"]
    assert (mount["Type"], mount["Name"], mount["Destination"]) == (
        "volume",
        name_of(sid),
        VOLUME_DIR,
    )
    env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    assert "SESSION_API_KEY" not in env and flow.session not in json.dumps(container.attrs)
    assert (
        env["AGENT_SERVER_WEBHOOK_URL"]
        == f"http://{HOST_ALIAS}:{plane.config.port}/api/v1/webhooks"
    )
    assert not [name for name in env if name.startswith("CONTROL_PLANE_")]
    # The control plane checks /alive itself: no Python started by Docker every 10 s besides.
    assert container.attrs["Config"]["Healthcheck"]["Test"] == ["NONE"]
    assert "Health" not in container.attrs["State"]
    runtime = plane.config.sandbox_runtime
    assert container.attrs["HostConfig"]["Runtime"] == (runtime or "runc")

    # Pause freezes every process of the container; the agent server answers nothing.
    r = client.post(f"/api/v1/sandboxes/{sid}/pause")
    assert r.status_code == 200, r.text
    container.reload()
    assert container.attrs["State"]["Paused"] is True
    with pytest.raises(httpx.TimeoutException):
        httpx.get(flow.url + "/alive", timeout=1)
    assert client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"] == "PAUSED"

    # Resume thaws it, and the conversation carries on where it was.
    r = client.post(f"/api/v1/sandboxes/{sid}/resume")
    assert r.status_code == 200, r.text
    container.reload()
    assert container.attrs["State"]["Paused"] is False
    assert httpx.get(flow.url + "/alive", timeout=5).status_code == 200
    bridge_llm.script(
        key,
        call("terminal", command="cat hello.py /proc/version; dmesg | head -1"),
        call("finish", message="thawed"),
    )
    r = client.post(
        f"/api/v1/app-conversations/{flow.cid}/send-message",
        json={"role": "user", "content": [{"type": "text", "text": "again"}], "run": True},
    )
    assert r.status_code == 200, r.text
    wait_for(lambda: len(flow.actions()) >= 5, 30, what="the actions after resuming")

    # The kernel its commands see: gVisor's own under runsc (its Sentry serves each system
    # call), this host's under runc.
    def told() -> str | None:
        text = client.get(
            f"/api/v1/conversation/{flow.cid}/events/search", params={"limit": 1000}
        ).text
        return text if "Linux version" in text else None

    seen = wait_for(told, 30, what="the kernel's version")
    if runtime == "runsc":
        assert "Starting gVisor" in seen and platform.release() not in seen
    else:
        assert f"Linux version {platform.release()}" in seen

    # Delete takes the container and its volume (the workspace archived first).
    delete_last_conversation(plane, flow)
    with pytest.raises(docker.errors.NotFound):
        container.reload()
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(name_of(sid))


@pytest.mark.e2e
def test_containers_are_adopted_after_a_restart(
    tmp_path: Path,
    sandbox_image: str,
    bridge_llm: ScriptedLLM,
    key: str,
    engine: docker.DockerClient,
    request: pytest.FixtureRequest,
) -> None:
    """A control plane stopped without its sandboxes: the next one finds their containers by
    label; a running one stays running (same container), a paused one stays paused, one
    removed behind its back is MISSING."""
    config = docker_config(tmp_path / "cp", sandbox_image, stop_sandboxes_on_exit=False)
    label = f"{LABEL_PLANE}={plane_label(config.db_url)}"
    # Its planes leave their containers on exit: whatever fails, none stays behind.
    request.addfinalizer(lambda: docker_support.remove_labelled(engine, label))
    first = ControlPlane(config).start()
    try:
        user = first.new_user("carol")
        client = first.client(user)
        r = client.patch(
            "/api/v1/settings",
            json={
                "llm_model": "openai/test-model",
                "llm_api_key": "sk-test-key",
                "llm_base_url": bridge_llm.base_url(key),
                "grouping_strategy": "NO_GROUPING",
            },
        )
        assert r.status_code == 200, r.text
        running, paused, removed = (start(client)["sandbox_id"] for _ in range(3))
        r = client.post(f"/api/v1/sandboxes/{paused}/pause")
        assert r.status_code == 200, r.text
        ids = {sid: container_of(engine, sid).id for sid in (running, paused, removed)}
    finally:
        first.stop()
    assert container_of(engine, running).status == "running"  # it outlived the control plane
    container_of(engine, removed).remove(force=True)
    time.sleep(0.2)

    second = ControlPlane(config.model_copy(update={"stop_sandboxes_on_exit": True})).start()
    try:
        client = second.client(user)

        def status(sid: str) -> str:
            found: str = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["status"]
            return found

        assert (status(running), status(paused), status(removed)) == (
            "RUNNING",
            "PAUSED",
            "MISSING",
        )
        assert container_of(engine, running).id == ids[running]  # adopted, not started again
        assert container_of(engine, paused).attrs["State"]["Paused"] is True
        record = client.get("/api/v1/sandboxes", params={"id": running}).json()[0]
        alive = httpx.get(
            record["exposed_urls"][0]["url"] + "/api/conversations/search",
            headers={"X-Session-API-Key": record["session_api_key"]},
        )
        assert alive.status_code == 200 and len(alive.json()["items"]) == 1
        r = client.post(f"/api/v1/sandboxes/{paused}/resume")
        assert r.status_code == 200 and r.json()["status"] == "RUNNING"
        assert container_of(engine, paused).attrs["State"]["Paused"] is False
    finally:
        second.stop()
    # Stopped with its sandboxes this time: their containers and volumes are gone, the
    # removed one's volume too (cleaned up when it was found MISSING).
    assert engine.containers.list(all=True, filters={"label": label}) == []
    assert engine.volumes.list(filters={"label": label}) == []


@pytest.mark.e2e
def test_a_missing_image_ends_the_start_with_the_reason(
    tmp_path: Path, engine: docker.DockerClient
) -> None:
    config = docker_config(tmp_path / "cp", "agent-server-test/absent:never")
    plane = ControlPlane(config).start()
    try:
        client = plane.client(plane.new_user("dave"))
        configure_llm(client, "http://127.0.0.1:9/v1")  # never reached
        task = start(client)
        assert task["status"] == "ERROR"
        assert "agent-server-test/absent:never" in task["detail"] and "make image" in task["detail"]
        # The sandbox made for it went with it, its volume too.
        [sandbox] = client.get("/api/v1/sandboxes/search").json()["items"]
        assert sandbox["status"] == "MISSING"
        label = f"{LABEL_PLANE}={plane_label(config.db_url)}"
        assert engine.volumes.list(filters={"label": label}) == []
    finally:
        plane.stop()
        docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_label(config.db_url)}")


def test_a_runtime_docker_does_not_know_is_said_at_start_and_by_each_start(
    tmp_path: Path,
    sandbox_image: str,
    engine: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = docker_config(tmp_path / "cp", sandbox_image, sandbox_runtime="gvisor-absent")
    plane = ControlPlane(config).start()
    try:
        said = [r.getMessage() for r in caplog.records if "gvisor-absent" in r.getMessage()]
        assert len(said) == 1 and "daemon.json" in said[0], said
        client = plane.client(plane.new_user("dave"))
        configure_llm(client, "http://127.0.0.1:9/v1")  # never reached
        task = start(client)
        assert task["status"] == "ERROR"
        assert "Docker has no runtime 'gvisor-absent'" in task["detail"], task
        assert "CONTROL_PLANE_SANDBOX_RUNTIME" in task["detail"]
        label = f"{LABEL_PLANE}={plane_label(config.db_url)}"
        assert engine.containers.list(all=True, filters={"label": label}) == []
    finally:
        plane.stop()
        docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_label(config.db_url)}")


def test_a_docker_provider_is_built_from_the_configuration(tmp_path: Path) -> None:
    """`DockerSettings.of`: the composition root's one mapping of the configuration."""
    config = Config(
        state_dir=tmp_path,
        host="0.0.0.0",
        sandbox_provider="docker",
        sandbox_image="sbx-image",
        docker_network="sbx-net",
        warm_pool=2,
        sandbox_runtime="runsc",
        sandbox_cpu_limit=1.5,
        sandbox_start_timeout=7.0,
    )
    settings = DockerSettings.of(config)
    assert settings.archive_dir == tmp_path / "archives"
    assert (settings.image, settings.plane) == ("sbx-image", plane_label(config.db_url))
    assert (settings.network, settings.warm_pool, settings.runtime) == ("sbx-net", 2, "runsc")
    assert settings.limits.cpus == 1.5 and settings.start_timeout == 7.0
    assert settings.webhook_url == config.webhook_base


@pytest.mark.e2e
async def test_the_provider_finds_its_containers_and_reports_a_failed_start(
    tmp_path: Path, sandbox_image: str, engine: docker.DockerClient
) -> None:
    """At the provider's level: a second provider (a restarted control plane) recovers a
    container by its labels; one whose agent server exits at start is a ProviderError quoting
    its log, and leaves no container behind."""
    plane = f"test-{tmp_path.name[-12:]}"
    settings = DockerSettings(tmp_path / "archives", image=sandbox_image, plane=plane)
    first, second = DockerProvider(settings), DockerProvider(settings)
    launch = Launch(
        sandbox_id="p" + tmp_path.name[-8:],
        spec_id="docker",
        root_dir=Path("/nowhere"),
        session_api_key="sk-provider-test",
        webhook_url="http://127.0.0.1:9/hooks",
    )
    try:
        handle = await first.create(launch)
        assert await second.recover(launch) == handle
        assert await second.inspect(handle) is Liveness.ALIVE
        await second.pause(handle)
        assert await first.inspect(handle) is Liveness.STOPPED
        assert await first.recover(launch) == handle
        assert await first.destroy(launch.sandbox_id, None, launch.root_dir) is not None
        assert await second.inspect(handle) is Liveness.GONE
        assert await second.recover(launch) is None

        # Without a session key the agent server refuses to listen beyond loopback: it exits.
        keyless = Launch(**{**launch.__dict__, "session_api_key": ""})
        with pytest.raises(ProviderError, match="exited with status .*SESSION_API_KEY"):
            await first.create(keyless)
        assert engine.containers.list(all=True, filters={"label": f"{LABEL_PLANE}={plane}"}) == []

        # A network of that name on which containers reach each other is not used.
        open_network = DockerProvider(replace(settings, network="bridge"))
        try:
            with pytest.raises(ProviderError, match="lets containers reach each other"):
                await open_network.create(launch)
        finally:
            await open_network.close()
        assert engine.containers.list(all=True, filters={"label": f"{LABEL_PLANE}={plane}"}) == []
    finally:
        await first.close()
        await second.close()
        docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane}")


@pytest.mark.e2e
def test_what_a_vanished_container_leaves_is_cleaned_up(
    tmp_path: Path,
    sandbox_image: str,
    bridge_llm: ScriptedLLM,
    key: str,
    engine: docker.DockerClient,
) -> None:
    """A container removed behind the control plane's back: its sandbox is MISSING (read-only,
    the transcript kept) and its volume goes too, the workspace archived first (SPEC 3.1: after
    clean-up, workspace files and sandbox state are not kept). When Docker refuses that
    clean-up (here: another container holds the volume), the volume is not left for ever: the
    user's delete removes it, or the reconciler once the retry is due."""
    clock = ShiftedClock()
    config = docker_config(tmp_path / "cp", sandbox_image)
    label = f"{LABEL_PLANE}={plane_label(config.db_url)}"
    plane = ControlPlane(config, clock).start()
    holders: list[Container] = []
    try:
        client = plane.client(plane.new_user("erin"))
        configure_llm(client, bridge_llm.base_url(key), grouping_strategy="NO_GROUPING")
        plain, deleted, retried = (start(client)["sandbox_id"] for _ in range(3))
        archives = plane.config.state_dir / "archives"

        def volume(sid: str) -> bool:
            return bool(engine.volumes.list(filters={"name": name_of(sid), "label": label}))

        def missing(sid: str) -> dict[str, Any] | None:
            found: dict[str, Any] = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
            return found if found["status"] == "MISSING" else None

        # Removed by hand: MISSING, and its volume goes with it (the workspace archived).
        container_of(engine, plain).remove(force=True)
        record = wait_for(lambda: missing(plain), 30, what="MISSING")
        assert record["status_reason"] == "VANISHED"
        wait_for(lambda: not volume(plain), 30, what="the volume to go")
        assert (archives / f"{plain}.tar.gz").exists()

        # The same while another container holds the volume: Docker refuses to remove it.
        for sid in (deleted, retried):
            holders.append(
                engine.containers.create(  # at the image's VOLUME: no anonymous one
                    sandbox_image, command="true", volumes={name_of(sid): {"bind": VOLUME_DIR}}
                )
            )
            container_of(engine, sid).remove(force=True)
        for sid in (deleted, retried):
            wait_for(lambda sid=sid: missing(sid), 30, what="MISSING")
        time.sleep(1.0)  # several reconciler rounds: nothing retried before it is due
        assert volume(deleted) and volume(retried)
        for holder in holders:
            holder.remove(force=True, v=True)

        # The user deletes the sandbox: what was left goes at once.
        r = client.delete(f"/api/v1/sandboxes/{deleted}", params={"sandbox_id": deleted})
        assert r.status_code == 200, r.text
        assert not volume(deleted) and (archives / f"{deleted}.tar.gz").exists()
        assert missing(deleted)["status_reason"] == "VANISHED"  # MISSING stays as it was told
        # The other is tried again by the reconciler once the retry is due.
        assert volume(retried)
        clock.offset = CLEANUP_RETRY
        wait_for(lambda: not volume(retried), 30, what="the retried clean-up")
        assert engine.containers.list(all=True, filters={"label": label}) == []
    finally:
        for holder in holders:
            with contextlib.suppress(docker.errors.NotFound):
                holder.remove(force=True, v=True)
        plane.stop()
        docker_support.remove_labelled(engine, label)


@pytest.mark.parametrize(
    "plane",
    [
        {},
        {"warm_pool": 2},
        {"sandbox_runtime": "runsc"},
        {"sandbox_runtime": "runsc", "warm_pool": 2},
    ],
    ids=["cold", "warm-pool", "gvisor", "gvisor-warm-pool"],
    indirect=True,
)
def test_a_container_tenant_reads_nothing_of_another_and_reaches_no_other(
    plane: ControlPlane, bridge_llm: ScriptedLLM, engine: docker.DockerClient
) -> None:
    """The escape of test_isolation on this provider, and its hardening as Docker says it is:
    an unprivileged user without capabilities on a read-only root, limits, no host path, and a
    network on which sandboxes reach the control plane but not each other. With a warm pool,
    both tenants get parked containers (the pool's servers, `python -m agent_server.warm`)."""
    deployment = plane_label(plane.config.db_url)
    pooled = plane.config.warm_pool > 0
    if pooled:
        wait_for(
            lambda: list(docker_support.parked(engine, deployment).values()) == ["running"] * 2,
            60,
            what="two parked containers",
        )
    a = victim(plane, bridge_llm)
    volume = f"/var/lib/docker/volumes/{name_of(a.sid)}/_data"
    inside = [
        f"{WORKSPACE}/{a.cid}/notes.txt",
        f"{STATE_DIR}/conversations/{uuid.UUID(a.cid).hex}/meta.json",
    ]
    own = attempts(a, inside)  # the paths are right: A reads them
    assert a.note in own[inside[0]]["stdout"] and a.secret in own[inside[1]]["stdout"], own
    state = plane.config.state_dir
    targets = [
        *inside,
        f"{volume}/project/{a.cid}/notes.txt",
        f"{volume}/.agent-server/conversations/{uuid.UUID(a.cid).hex}/meta.json",
        str(state / "secret.key"),
        str(state / "control-plane.db"),
        "/var/run/docker.sock",
    ]

    b = run(plane, bridge_llm, "bob", reads(targets))
    told = b.events()
    assert "[environ read]" in told
    for target in targets:
        assert f"[read {target}: 1]" in told, told
    fernet = (state / "secret.key").read_text().strip()
    for leak in (a.secret, a.llm_key, a.note, a.session, fernet, "SQLite format 3", b.session):
        assert leak not in told
    # Not even its own key is in any environment it sees (tini's included): it came on stdin.
    environ = b.bash("cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
    assert "AGENT_SERVER_WEBHOOK_URL" in environ["stdout"] and b.session not in environ["stdout"]

    # The hardening, as Docker reports it.
    container = container_of(engine, b.sid)
    config, host = container.attrs["Config"], container.attrs["HostConfig"]
    for sid in (a.sid, b.sid):
        entrypoint = container_of(engine, sid).attrs["Config"]["Entrypoint"]
        assert (entrypoint[-1] == "agent_server.warm") == pooled, entrypoint
    assert host["Runtime"] == (plane.config.sandbox_runtime or "runc")
    assert config["User"] == "1000:1000" and host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert "no-new-privileges" in host["SecurityOpt"] and host["ReadonlyRootfs"] is True
    assert set(host["Tmpfs"]) == {"/tmp", "/home/agent"}
    assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (
        int(plane.config.sandbox_memory_limit),
        int(plane.config.sandbox_cpu_limit * 1e9),
        plane.config.sandbox_pids_limit,
    )
    assert [m["Type"] for m in container.attrs["Mounts"]] == ["volume"]
    assert host["Binds"] == [f"{name_of(b.sid)}:{VOLUME_DIR}:rw"]  # the volume, no host path
    assert "docker.sock" not in json.dumps(container.attrs)
    assert host["NetworkMode"] == plane.config.docker_network
    network = engine.networks.get(plane.config.docker_network)
    assert network.attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    inside_b = b.bash("id -u; grep CapEff /proc/self/status; touch /usr/x; echo rc=$?")
    assert inside_b["stdout"].split("\n")[:2] == ["1000", "CapEff:\t0000000000000000"]
    # (gVisor checks the permission before the mount's read-only flag: its error says so.)
    refusal = "Permission denied" if plane.config.sandbox_runtime else "Read-only file system"
    assert "rc=1" in inside_b["stdout"] and refusal in inside_b["stderr"]

    # B reaches the control plane through the gateway, but neither A's agent server on the
    # network nor A's port published on the host's loopback.
    a_container = container_of(engine, a.sid)
    a_ip = a_container.attrs["NetworkSettings"]["Networks"][plane.config.docker_network][
        "IPAddress"
    ]
    a_port = urlsplit(a.url).port
    probe = (
        "python3 -c 'import socket, sys\n"
        "try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
        "except OSError as e:\n    sys.exit(str(e))' "
    )
    assert b.bash(probe + f"{HOST_ALIAS} {plane.config.port}")["exit_code"] == 0
    for host_name, port in ((a_ip, 8000), (HOST_ALIAS, a_port)):
        result = b.bash(probe + f"{host_name} {port}")
        assert result["exit_code"] != 0, (host_name, port, result)
    assert a.bash(probe + f"{a_ip} 8000")["exit_code"] == 0  # it is there, for itself


@pytest.mark.e2e
def test_a_full_tmp_leaves_the_containers_server_its_memory(
    tmp_path: Path, sandbox_image: str, engine: docker.DockerClient
) -> None:
    """/tmp, home and /dev/shm are tmpfs mounts, whose pages are the container's memory and no
    process's: sized from that memory, filled, they are full, and the kernel does not end the
    largest process (the agent server) to make room."""
    config = docker_config(tmp_path / "cp", sandbox_image, sandbox_memory_limit="384MiB")
    plane = ControlPlane(config).start()
    try:
        tenant = idle(plane, "mallory")
        fill = " ".join(
            f"head -c 384M /dev/zero > {place}/fill;"
            for place in ("/tmp", "/home/agent", "/dev/shm")
        )
        full = tenant.bash(fill)
        assert full["stderr"].count("No space left on device") == 3, full
        assert tenant.bash("echo still here")["stdout"] == "still here\n"
        container = container_of(engine, tenant.sid)
        assert container.attrs["State"]["OOMKilled"] is False
    finally:
        plane.stop()
        docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_label(config.db_url)}")


@pytest.mark.e2e
def test_a_gvisor_sandbox_past_its_memory_ends_alone(
    tmp_path: Path, sandbox_image: str, engine: docker.DockerClient
) -> None:
    """Under runsc the host's kernel sees the Sentry hold all of a sandbox's memory: a command
    past the limit ends the whole sandbox (docs/gvisor.md), and nothing of its neighbour."""
    docker_support.ensure_runtime("runsc")
    config = docker_config(
        tmp_path / "cp", sandbox_image, sandbox_runtime="runsc", sandbox_memory_limit="384MiB"
    )
    plane = ControlPlane(config).start()
    try:
        greedy, neighbour = idle(plane, "mallory"), idle(plane, "alice")
        with contextlib.suppress(httpx.HTTPError, AssertionError):  # its server goes with it
            greedy.bash("python3 -c 'b = bytearray(1 << 30); b[::4096] = b\"x\" * (1 << 18)'")
        container = container_of(engine, greedy.sid)
        wait_for(
            lambda: (container.reload(), container.status)[1] != "running",
            60,
            what="the sandbox to end",
        )
        assert container.attrs["State"]["OOMKilled"] or container.attrs["State"]["ExitCode"] == 137
        assert neighbour.bash("echo still here")["stdout"].strip() == "still here"
        wait_for(
            lambda: (
                greedy.client.get("/api/v1/sandboxes", params={"id": greedy.sid}).json()[0][
                    "status"
                ]
                in ("MISSING", "ERROR")
            ),
            60,
            what="the loss recorded",
        )
    finally:
        plane.stop()
        docker_support.remove_labelled(engine, f"{LABEL_PLANE}={plane_label(config.db_url)}")


IMAGE_PROBE = """
import importlib.util, os, subprocess, sys, sysconfig
import uvicorn, agent_server.__main__, agent_server.app, tools.browser.manager
site = sysconfig.get_paths()["purelib"]
loaded = [m.__file__ for m in list(sys.modules.values())
          if (getattr(m, "__file__", None) or "").startswith(site) and m.__file__.endswith(".py")]
node = subprocess.run([site + "/playwright/driver/node", "--version"], capture_output=True,
                      text=True)
print(len(loaded), sum(not os.path.exists(importlib.util.cache_from_source(f)) for f in loaded),
      node.returncode, importlib.util.find_spec("pip") is not None, node.stderr.strip()[:200])
"""


@pytest.mark.e2e
def test_the_image_holds_what_a_server_runs_compiled_and_nothing_of_its_build(
    sandbox_image: str, engine: docker.DockerClient
) -> None:
    """As the provider runs it (its user, read-only root, no capability): every module a server
    imports to start has its bytecode (a read-only root compiles it again at every start),
    Playwright's Node starts (the browser tool's driver), and pip is not there (the build's)."""
    out = engine.containers.run(
        sandbox_image,
        ["python", "-c", IMAGE_PROBE],
        entrypoint=[],
        remove=True,
        user="1000:1000",
        read_only=True,
        cap_drop=["ALL"],
        network_disabled=True,
        tmpfs={"/tmp": ""},
    )
    loaded, uncompiled, node_status, has_pip, node_error = out.decode().split(" ", 4)
    assert int(loaded) > 300 and int(uncompiled) == 0
    assert (node_status, node_error.strip()) == ("0", "")
    assert has_pip == "False"


def test_containers_reach_the_host_by_its_alias() -> None:
    assert (
        for_container("http://127.0.0.1:3000/api/v1/webhooks")
        == "http://host.docker.internal:3000/api/v1/webhooks"
    )
    assert for_container("http://0.0.0.0:3000/x") == "http://host.docker.internal:3000/x"
    assert for_container("http://localhost/x") == "http://host.docker.internal/x"
    assert for_container("https://cp.example.com:8443/x") == "https://cp.example.com:8443/x"
    assert for_container("http://172.17.0.1:3000/x") == "http://172.17.0.1:3000/x"
