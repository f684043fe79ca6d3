"""Two tenants of one control plane, the second trying to read the first's files and keys as a
tenant can: with its own account key only, through its own agent (a terminal command, as a
prompt-injected agent would run it) and its own sandbox's `/api/bash` (with the session key
the control plane gives it)."""

from __future__ import annotations

import json
import shlex
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from tests.control_plane.support import ControlPlane, configure_llm, conversation, start
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for


@dataclass
class Tenant:
    client: httpx.Client
    cid: str
    sid: str
    url: str
    session: str
    """Its sandbox's session key."""

    def events(self) -> str:
        """Everything its conversation's events say, as stored by the control plane."""
        r = self.client.get(f"/api/v1/conversation/{self.cid}/events/search", params={"limit": 100})
        assert r.status_code == 200, r.text
        return json.dumps(r.json())

    def bash(self, command: str) -> dict[str, Any]:
        r = httpx.post(
            self.url + "/api/bash/execute_bash_command",
            json={"command": command},
            headers={"X-Session-API-Key": self.session},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result


@dataclass
class Victim(Tenant):
    secret: str
    """A secret of its settings (it reaches its conversation's state)."""
    llm_key: str
    note: str
    """What its agent wrote in its workspace (notes.txt)."""


def run(
    plane: ControlPlane,
    llm: ScriptedLLM,
    name: str,
    command: str,
    llm_host: str | None = None,
    **settings: Any,
) -> Tenant:
    """A user whose agent runs `command` in the terminal, to the end of the run."""
    client = plane.client(plane.new_user(name))
    script = f"{name}-{uuid.uuid4().hex[:8]}"
    configure_llm(client, llm.base_url(script, host=llm_host), tools=["terminal"], **settings)
    llm.script(script, call("terminal", command=command), call("finish", message="done"))
    task = start(client, "go")
    assert task["status"] == "READY", task
    cid, sid = task["app_conversation_id"], task["sandbox_id"]
    wait_for(
        lambda: conversation(client, cid)["execution_status"] == "finished",
        60,
        what=f"{name}'s run",
    )
    wait_for(
        lambda: '"tool_name": "finish"' in Tenant(client, cid, sid, "", "").events(),
        30,
        what=f"{name}'s events",
    )
    sandbox = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
    return Tenant(client, cid, sid, sandbox["exposed_urls"][0]["url"], sandbox["session_api_key"])


def idle(plane: ControlPlane, name: str) -> Tenant:
    """A user with a running sandbox and no conversation (a neighbour to be reached)."""
    client = plane.client(plane.new_user(name))
    sid = client.post("/api/v1/sandboxes", json={}).json()["id"]

    def running() -> dict[str, Any] | None:
        found: dict[str, Any] = client.get("/api/v1/sandboxes", params={"id": sid}).json()[0]
        assert found["status"] in ("STARTING", "RUNNING"), found
        return found if found["status"] == "RUNNING" else None

    sandbox = wait_for(running, 60, what=f"{name}'s sandbox")
    return Tenant(client, "", sid, sandbox["exposed_urls"][0]["url"], sandbox["session_api_key"])


def victim(plane: ControlPlane, llm: ScriptedLLM, llm_host: str | None = None) -> Victim:
    secret, llm_key, note = (
        f"{what}-{uuid.uuid4().hex}" for what in ("a-secret", "sk-a", "a-note")
    )
    tenant = run(
        plane,
        llm,
        "alice",
        f"echo {note} > notes.txt",
        llm_host,
        llm_api_key=llm_key,
        secrets={"A_SECRET": secret},
    )
    return Victim(**tenant.__dict__, secret=secret, llm_key=llm_key, note=note)


def reads(paths: list[str]) -> str:
    """One shell command reading each path (its exit status said after it), then every
    process's environment it can see."""
    steps = [
        f"head -c 3000 {shlex.quote(p)} | tr -c '[:print:]\\n' .; "
        f'echo " [read {p}: ${{PIPESTATUS[0]}}]"'
        for p in paths
    ]
    return "; ".join([*steps, "cat /proc/[0-9]*/environ | tr '\\0' '\\n'", "echo [environ read]"])


def attempts(tenant: Tenant, paths: list[str]) -> dict[str, dict[str, Any]]:
    """Each path read through the tenant's own /api/bash: its exit code and output."""
    return {path: tenant.bash(f"cat {shlex.quote(path)}") for path in paths}


#: What the agent runs: each target tried once (a name is resolved first), one line each:
#: `<label> connected`, `<label> refused <errno name>`, `<label> unresolved`, or
#: `<label> timed out` (what a boundary must never make a client do).
PROBE = r"""
import errno, socket, sys, time
for label, host, port, kind in [t.split(",") for t in sys.argv[1:]]:
    udp = kind == "udp"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        address = host if family == socket.AF_INET6 else socket.gethostbyname(host)
    except OSError:
        print(label, "unresolved"); continue
    s = socket.socket(family, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        if udp:
            s.sendto(b"probe", (address, int(port))); print(label, "sent")
        else:
            s.connect((address, int(port))); print(label, "connected")
    except socket.timeout:
        print(label, "timed out")
    except OSError as e:
        print(label, "refused", errno.errorcode.get(e.errno, e.errno)); failed = True
    finally:
        s.close()
sys.exit(1 if "failed" in globals() else 0)  # a command that failed, as a client's would
"""


def probe(targets: dict[str, tuple[str, int] | tuple[str, int, str]]) -> str:
    """The terminal command trying `targets` (label -> host, port[, "udp"])."""
    args = " ".join(
        f"{label},{t[0]},{t[1]},{t[2] if len(t) > 2 else 'tcp'}" for label, t in targets.items()
    )
    return f"python3 - {args} <<'EOF'\n{PROBE}\nEOF"


def outcomes(tenant: Tenant) -> dict[str, str]:
    """The probe's lines, from the terminal observation its conversation stored."""
    items = json.loads(tenant.events())["items"]
    texts = [
        c["text"]
        for e in items
        if e["kind"] == "ObservationEvent" and e["tool_name"] == "terminal"
        for c in e["observation"]["content"]
    ]
    found = {}
    for line in "\n".join(texts).splitlines():
        label, _, outcome = line.partition(" ")
        if outcome and not label.startswith("["):
            found[label] = outcome
    return found
