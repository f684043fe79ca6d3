"""The network boundary, tried as a prompt-injected agent would (issue 36): from an agent's
terminal command in a sandbox, every policy (`open`, `allowlist`, `none`) against the test
internet, this host (its loopback, its own addresses on v4 and v6, the control plane's
database port), another tenant's agent server, private and link-local ranges; a policy
changed while the sandbox runs; what was refused, counted and told.

Every packet stays on this machine: the test internet is a namespace of the test's own, and
the sandbox subnets' packets are routed into it, never out (`tests.support.internet`). With
the boundary off (`sandbox_network=host`) the same probes reach the host and the neighbour:
the tests fail without it.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control_plane.support import OPERATOR, ControlPlane, make_config, warm_pool
from tests.control_plane.tenants import Tenant, idle, outcomes, probe, run
from tests.support.internet import Internet, Listener
from tests.support.llm import ScriptedLLM, free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def internet() -> Internet:
    return Internet.shared()


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start_on_internet()
    yield server
    server.stop()


@pytest.fixture
def hosts(internet: Internet) -> Iterator[dict[str, Listener]]:
    """Test hosts: on the internet (allowed.test's address, port 80 and 7000; a UDP one), and
    canaries on this host, on loopback and on every address, v4 and v6."""
    canary_port = free_port()
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.bind(("::", canary_port))
    v6.listen(16)
    every = socket.create_server(("0.0.0.0", canary_port))
    loopback = socket.create_server(("127.0.0.1", free_port()))
    made = {
        "web": Listener(internet.socket(80, internet.names["allowed.test"][0])),
        "alt": Listener(internet.socket(7000, internet.names["other.test"][0])),
        "udp": Listener(
            internet.socket(9999, internet.names["allowed.test"][0], socket.SOCK_DGRAM)
        ),
        "host": Listener(every),
        "host6": Listener(v6),
        "loopback": Listener(loopback),
    }
    yield made
    for listener in made.values():
        listener.close()


def targets(
    hosts: dict[str, Listener], neighbour: Tenant | None = None, *, local: bool = False
) -> dict[str, Any]:
    """What an agent tries: this host every way it can be named, a neighbour, and (unless
    `local`: a sandbox sharing this host's network would send those off this machine) the
    internet by name and address, private, shared and link-local ranges."""
    port = hosts["host"].address[1]
    found: dict[str, Any] = {
        "loopback-canary": ("127.0.0.1", hosts["loopback"].address[1]),
        "host-v4": (own_address(), port),
        "host-v6": (own_address(6), port),
        "host-v6-loopback": ("::1", port),
        "postgres": ("127.0.0.1", 5432),
    }
    if not local:
        found.update(
            {
                "internet": ("allowed.test", 80),
                "internet-ip": (hosts["alt"].address[0], 7000),
                "metadata": ("169.254.169.254", 80),
                "private": ("10.0.0.1", 80),
                "cgnat": ("100.64.0.1", 80),
            }
        )
    if neighbour is not None:
        host, _, rest = neighbour.url.removeprefix("http://").rpartition(":")
        found["neighbour"] = (host, int(rest))
    return found


def container_address(plane: ControlPlane, sandbox_id: str) -> str:
    from control_plane.providers.containers import name_of
    from tests.support import docker as docker_support

    with contextlib.closing(docker_support.client()) as engine:
        networks = engine.containers.get(name_of(sandbox_id)).attrs["NetworkSettings"]["Networks"]
        return str(networks[plane.config.docker_network]["IPAddress"])


def own_address(version: int = 4) -> str:
    """This machine's own address on its outside interface (a packet to it stays here)."""
    family = "-4" if version == 4 else "-6"
    import subprocess

    listing = subprocess.run(
        ["ip", "-j", family, "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for link in json.loads(listing):
        if link["ifname"] == "lo" or link["ifname"].startswith(
            ("asgw", "asbx", "tinet", "br-", "docker")
        ):
            continue
        for info in link.get("addr_info", []):
            return str(info["local"])
    raise AssertionError("no address of this machine")


def configured(request: pytest.FixtureRequest, tmp_path: Path, provider: str, **extra: Any) -> Any:
    """A control plane's config for `provider` (Docker's image built for the session)."""
    if provider == "docker":
        image = request.getfixturevalue("sandbox_image")
        extra.update(sandbox_provider="docker", sandbox_image=image, host="0.0.0.0")
    return make_config(tmp_path / "cp", **extra)


@pytest.fixture(
    params=[
        ("process", "isolated", "auto", 0),
        ("process", "isolated", "auto", 2),
        ("process", "isolated", "gvisor", 0),
        ("process", "host", "auto", 0),
        ("docker", "isolated", "auto", 0),
        ("docker", "host", "auto", 0),
    ],
    ids=["process", "process-pooled", "process-gvisor", "process-off", "docker", "docker-off"],
)
def plane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlPlane]:
    """`process-pooled`: both tenants' sandboxes are claimed from a warm pool, parked under
    the policy `none` (control_plane/providers/process/parking.py) until their own applies."""
    provider, network, isolation, pool = request.param
    pooled = {"sandbox_template": True, "warm_pool": pool, "operator_key": OPERATOR}
    control_plane = ControlPlane(
        configured(
            request,
            tmp_path,
            provider,
            sandbox_network=network,
            sandbox_isolation=isolation,
            **(pooled if pool else {}),
        )
    ).start()
    if pool:
        wait_for(lambda: warm_pool(control_plane.url)["parked"] == pool, 180, what="the parked")
    yield control_plane
    control_plane.stop()


def test_open_reaches_the_internet_and_nothing_of_this_host_or_its_neighbours(
    plane: ControlPlane, llm: ScriptedLLM, hosts: dict[str, Listener]
) -> None:
    neighbour = idle(plane, "alice")
    off = plane.config.sandbox_network == "host"
    tried = targets(hosts, neighbour, local=off)
    if plane.config.sandbox_provider == "docker":  # its container's own address, too
        tried["neighbour-container"] = (container_address(plane, neighbour.sid), 8000)
    attacker = run(plane, llm, "mallory", probe(tried))
    seen = outcomes(attacker)
    if off:  # the protection off: the attack works
        assert seen["host-v4"] == "connected" and hosts["host"].seen, seen
        if plane.config.sandbox_provider == "process":  # and the rest of the host's
            assert seen["loopback-canary"] == "connected" and seen["neighbour"] == "connected"
        return
    assert seen.pop("internet") == "connected" and seen.pop("internet-ip") == "connected", seen
    assert hosts["web"].seen and hosts["alt"].seen
    for label, outcome in seen.items():  # refused at once, never a hang
        assert outcome.startswith("refused"), (label, outcome)
    for canary in ("host", "host6", "loopback"):
        assert not hosts[canary].seen, canary
    state = attacker.client.get(f"/api/v1/sandboxes/{attacker.sid}/network").json()
    assert state["enforced"] and state["refused"] >= 4, state
    refused = {(r["address"], r["port"]) for r in state["recent"]}
    assert ("169.254.169.254", 80) in refused and ("10.0.0.1", 80) in refused, refused
    # The neighbour's own view shows none of the attacker's refusals.
    assert neighbour.client.get(f"/api/v1/sandboxes/{neighbour.sid}/network").json()["refused"] == 0
    # Of the control plane, its side serves the sandbox routes alone: not the console, not
    # the account routes (whose keys a sandbox does not hold anyway).
    side = (
        plane.config.sandbox_subnet.network_address + 1
        if plane.config.sandbox_provider == "process"
        else "host.docker.internal"
    )
    asked = (
        "python3 -c 'import sys, urllib.request, urllib.error\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n        print(path, urllib.request.urlopen(sys.argv[1] + path).status)\n"
        "    except urllib.error.HTTPError as e:\n        print(path, e.code)' "
        f"http://{side}:{plane.config.port} / /api/v1/settings /api/v1/users/me /health"
    )
    answers = attacker.bash(asked)["stdout"]
    assert answers.split("\n")[:4] == [
        "/ 404",
        "/api/v1/settings 404",
        "/api/v1/users/me 404",
        "/health 200",
    ], answers
    # The agent was told, after its failed command, and the sandbox's /metrics counts them.
    [probed] = [
        e["observation"]
        for e in json.loads(attacker.events())["items"]
        if e["kind"] == "ObservationEvent" and e["tool_name"] == "terminal"
    ]
    assert "network policy (open) refused connections to" in json.dumps(probed), probed
    metrics = httpx.get(
        attacker.url + "/metrics", headers={"X-Session-API-Key": attacker.session}, timeout=30
    ).text
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("agent_server_network_refused_total ")
    ]
    assert counted and float(counted[0].split()[1]) >= 4, counted
    if plane.config.warm_pool:  # both were parked ones
        assert warm_pool(plane.url)["hit"] == 2


@pytest.fixture(params=["process", "process-pooled", "docker"])
def fenced(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlPlane]:
    """`process-pooled`: the sandboxes are claimed from a warm pool, where they waited under
    `none`; a claim puts them under their own policy by adding rules before that one's
    (`rules.lift`), and a change at run time replaces the whole chain."""
    pool = 2 if request.param == "process-pooled" else 0
    pooled = {"sandbox_template": True, "warm_pool": pool, "operator_key": OPERATOR}
    provider = request.param.removesuffix("-pooled")
    control_plane = ControlPlane(
        configured(request, tmp_path, provider, **(pooled if pool else {}))
    ).start()
    if pool:
        wait_for(lambda: warm_pool(control_plane.url)["parked"] == pool, 180, what="the parked")
    yield control_plane
    if pool:  # the sandboxes tried were parked ones
        assert warm_pool(control_plane.url)["hit"] >= 1
    control_plane.stop()


def test_an_allowlist_answers_and_lets_through_only_what_it_lists(
    fenced: ControlPlane, llm: ScriptedLLM, hosts: dict[str, Listener], internet: Internet
) -> None:
    policy = {
        "mode": "allowlist",
        "allow": [
            "allowed.test:80",
            "rebind.test",
            "metadata.test",
            f"{internet.names['other.test'][0]}/32:7000",
        ],
    }
    attacker = run(
        fenced,
        llm,
        "mallory",
        probe(
            {
                "listed": ("allowed.test", 80),
                "listed-other-port": ("allowed.test", 81),
                "unlisted-name": ("other.test", 7000),
                "listed-cidr": (internet.names["other.test"][0], 7000),
                "unlisted-ip": (internet.names["cdn.test"][0], 80),
                "rebinding": ("rebind.test", 80),
                "metadata-name": ("metadata.test", 80),
                "udp": (internet.names["allowed.test"][0], 9999, "udp"),
                "host-v4": (own_address(), hosts["host"].address[1]),
            }
        ),
        network_policy=policy,
    )
    seen = outcomes(attacker)
    assert seen.pop("listed") == "connected" and seen.pop("listed-cidr") == "connected", seen
    # A name it does not list, or one that points at a range no sandbox reaches (rebinding),
    # is not even resolved.
    for label in ("unlisted-name", "rebinding", "metadata-name"):
        assert seen.pop(label) == "unresolved", (label, seen)
    assert seen.pop("udp") == "sent" and not hosts["udp"].seen  # sent, dropped on the way
    for label, outcome in seen.items():
        assert outcome.startswith("refused"), (label, outcome)
    assert not hosts["host"].seen
    state = attacker.client.get(f"/api/v1/sandboxes/{attacker.sid}/network").json()
    assert state["policy"] == policy and state["refused"] >= 3, state


def test_none_leaves_the_control_plane_alone(
    fenced: ControlPlane, llm: ScriptedLLM, hosts: dict[str, Listener]
) -> None:
    """The run itself goes through the control plane (its webhook and the LLM gateway): it
    finishes; nothing else is reached."""
    attacker = run(
        fenced,
        llm,
        "mallory",
        probe({"name": ("allowed.test", 80), "ip": (hosts["web"].address[0], 80)}),
        network_policy={"mode": "none"},
    )
    assert outcomes(attacker) == {"name": "unresolved", "ip": "refused ECONNREFUSED"}
    assert not hosts["web"].seen


def test_a_policy_changed_at_run_time_holds_new_connections_at_once(
    fenced: ControlPlane, llm: ScriptedLLM, hosts: dict[str, Listener], internet: Internet
) -> None:
    tenant = idle(fenced, "alice")
    try_both = probe({"allowed": ("allowed.test", 80), "other": ("other.test", 7000)})

    def tried() -> dict[str, str]:
        return dict(line.split(" ", 1) for line in tenant.bash(try_both)["stdout"].splitlines())

    assert tried() == {"allowed": "connected", "other": "connected"}
    changed = tenant.client.patch(
        f"/api/v1/sandboxes/{tenant.sid}",
        json={"network_policy": {"mode": "allowlist", "allow": ["allowed.test"]}},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["network_policy"]["mode"] == "allowlist"
    assert tried() == {"allowed": "connected", "other": "unresolved"}
    other = internet.names["other.test"][0]
    assert "refused" in tenant.bash(probe({"other": (other, 7000)}))["stdout"]
    tenant.client.patch(
        f"/api/v1/sandboxes/{tenant.sid}", json={"network_policy": {"mode": "open"}}
    )
    assert tried() == {"allowed": "connected", "other": "connected"}
    # A bad policy is a 422 that changes nothing; another user's sandbox is not found.
    bad = tenant.client.patch(
        f"/api/v1/sandboxes/{tenant.sid}",
        json={"network_policy": {"mode": "allowlist", "allow": ["10.0.0.0/8"]}},
    )
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == [
        "body",
        "network_policy",
    ]
    stranger = fenced.client(fenced.new_user("stranger"))
    assert (
        stranger.patch(
            f"/api/v1/sandboxes/{tenant.sid}", json={"network_policy": {"mode": "none"}}
        ).status_code
        == 404
    )
    assert tried() == {"allowed": "connected", "other": "connected"}


def test_a_sandbox_cannot_take_the_control_planes_port_and_a_webhook_hands_over_nothing(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    """The control plane down (a crash, a deploy): a tenant's sandbox tries to take its port
    to receive the other tenants' webhooks. It binds only in its own namespace and receives
    nothing; whoever does receive a webhook meanwhile (here the test itself, on the
    sandboxes' gateway) gets a signature, no key that opens anything; the control plane
    starts again on its port and the webhook it missed arrives."""
    config = make_config(tmp_path / "cp", stop_sandboxes_on_exit=False)
    plane = ControlPlane(config).start()
    try:
        victim = run(plane, llm, "alice", "true")
        squatter = run(plane, llm, "mallory", "true")
    finally:
        plane.stop()
    port, gateway = config.port, str(config.sandbox_subnet.network_address + 1)
    took = squatter.bash(
        "nohup python3 -c 'import socket, sys\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f's.bind(("0.0.0.0", {port})); s.listen(); print("listening", flush=True)\n'
        'c, _ = s.accept(); print("received", c.recv(65536), flush=True)\''
        " > /tmp/squat.log 2>&1 & sleep 1; cat /tmp/squat.log"
    )
    assert "listening" in took["stdout"], took  # in its own namespace: nobody else's port
    with socket.create_server((gateway, port)) as receiver:
        receiver.settimeout(60)
        sent = httpx.post(
            f"{victim.url}/api/conversations/{victim.cid}/events",
            headers={"X-Session-API-Key": victim.session},
            timeout=30,
            json={"role": "user", "content": [{"type": "text", "text": "ping"}], "run": False},
        )
        assert sent.status_code == 200, sent.text
        connection, _ = receiver.accept()
        with connection:
            connection.settimeout(30)
            request = _http_request(connection)
    head, _, body = request.partition(b"\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    names = {name.lower() for name in headers}
    assert "x-session-api-key" not in names and victim.session.encode() not in request
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= names, names
    for value in headers.values():  # nothing in it opens the victim's agent server
        r = httpx.post(
            f"{victim.url}/api/bash/execute_bash_command",
            json={"command": "id"},
            headers={"X-Session-API-Key": value},
            timeout=30,
        )
        assert r.status_code == 401, (value, r.status_code)
    assert "received" not in squatter.bash("cat /tmp/squat.log")["stdout"]
    # The control plane comes back on its port, and the webhook it missed is delivered.
    again = ControlPlane(config.model_copy(update={"stop_sandboxes_on_exit": True})).start()
    try:
        victim.client = again.client(victim.client.headers["authorization"].split()[1])
        wait_for(lambda: '"ping"' in victim.events(), 90, what="the webhook it missed")
    finally:
        again.stop()


def _http_request(connection: socket.socket) -> bytes:
    """One HTTP request read whole (head, then as many body bytes as it says)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body
