"""The web app a sandbox serves on a port, opened through the control plane (`/sandbox-apps`),
tried as an attacker would: another user, no credential, a forged, stale or borrowed link,
another port, paths that try to leave the sandbox, and what crosses the proxy each way."""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control_plane.api.test_api import wait_running
from tests.control_plane.support import (
    ControlPlane,
    ShiftedClock,
    configure_llm,
    conversation,
    make_config,
    start,
)
from tests.support.llm import ScriptedLLM, call
from tests.support.wait import wait_for

#: The sandbox's app: it answers with what it received (path and headers), a redirect to one
#: of its own paths, and headers an app must not get to set on the console's origin.
APP = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Echo(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/go"):
            self.send_response(302)
            self.send_header("Location", "/landed?from=go")
            self.end_headers()
            return
        body = json.dumps({"path": self.path, "headers": dict(self.headers.items())}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "planted=1; Path=/")
        self.send_header("Clear-Site-Data", '"storage"')
        self.send_header("Content-Security-Policy", "default-src *")
        self.send_header("Access-Control-Allow-Credentials", "true")
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Echo).serve_forever()
"""
PORT = 8011


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


@pytest.fixture
def plane(tmp_path: Path, clock: ShiftedClock) -> Iterator[ControlPlane]:
    server = ControlPlane(make_config(tmp_path / "cp"), clock).start()
    yield server
    server.stop()


class HostListener:
    """A server on this host's loopback that no request through the proxy may reach."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_an_app_opens_for_its_owner_alone_and_reaches_its_sandbox_only(
    plane: ControlPlane, clock: ShiftedClock, llm: ScriptedLLM, key: str
) -> None:
    alice_key = plane.new_user("alice")
    alice = plane.client(alice_key)
    bob = plane.client(plane.new_user("bob"))
    # Alice's agent starts the app in the background of its terminal, as a dev server.
    configure_llm(alice, llm.base_url(key), tools=["terminal"])
    command = (
        f"printf '%s' {shlex.quote(APP)} > /tmp/echo_app.py && "
        f"(python3 /tmp/echo_app.py {PORT} > /dev/null 2>&1 &)"
    )
    llm.script(key, call("terminal", command=command), call("finish", message="serving"))
    task = start(alice, "serve an app")
    assert task["status"] == "READY", task
    sid = task["sandbox_id"]
    wait_for(
        lambda: conversation(alice, task["app_conversation_id"])["execution_status"] == "finished",
        60,
        what="the run",
    )
    record = wait_running(alice, sid)

    # The owner's key mints a link; the link alone (no key) opens the app.
    minted = alice.get(f"/api/v1/sandboxes/{sid}/app-url", params={"port": PORT})
    assert minted.status_code == 200, minted.text
    link = minted.json()
    assert link["port"] == PORT and link["url"] == plane.url + link["path"]
    assert link["path"].startswith(f"/sandbox-apps/{sid}/{PORT}/") and link["path"].endswith("/")

    def opened() -> httpx.Response | None:
        r = httpx.get(link["url"] + "echo?x=1", timeout=10)
        return r if r.status_code == 200 else None

    seen = wait_for(opened, 30, what="the app to answer through the proxy")
    assert seen is not None
    assert seen.json()["path"] == "/echo?x=1"

    # Nothing of the browser's credentials, nor who it is, reaches the sandbox.
    r = httpx.post(
        link["url"] + "echo",
        content=b"{}",
        headers={
            "Authorization": f"Bearer {alice_key}",
            "Cookie": "session=alice",
            "X-Session-API-Key": record["session_api_key"],
            "Origin": plane.url,
            "Referer": plane.url + "/#/conversations",
            "X-Forwarded-For": "203.0.113.9",
            "Accept": "application/json",
            "Content-Type": "application/json",
        },
        timeout=10,
    )
    assert r.status_code == 200, r.text
    received = {k.lower(): v for k, v in r.json()["headers"].items()}
    assert received["accept"] == "application/json"
    for name in ("authorization", "cookie", "x-session-api-key", "origin", "referer"):
        assert name not in received, received
    assert "x-forwarded-for" not in received
    assert alice_key not in json.dumps(received) and record["session_api_key"] not in r.text

    # What the app answers cannot set anything on the console's origin, and runs sandboxed.
    assert "set-cookie" not in r.headers and "clear-site-data" not in r.headers
    assert "access-control-allow-credentials" not in r.headers
    csp = r.headers["content-security-policy"]
    assert csp.startswith("sandbox allow-scripts") and "allow-same-origin" not in csp
    assert "frame-ancestors 'self'" in csp and r.headers["x-frame-options"] == "SAMEORIGIN"
    # A redirect to one of its own paths stays inside the link.
    r = httpx.get(link["url"] + "go", timeout=10)
    assert r.status_code == 302 and r.headers["location"] == link["path"] + "landed?from=go"

    # Another user: no link for Alice's sandbox (as for an unknown one), and no key opens it.
    r = bob.get(f"/api/v1/sandboxes/{sid}/app-url", params={"port": PORT})
    assert r.status_code == 404, r.text
    cap = link["path"].split("/")[4]
    forged = cap[:-4] + ("AAAA" if not cap.endswith("AAAA") else "BBBB")
    for path in (
        f"/sandbox-apps/{sid}/{PORT}/{forged}/echo",
        f"/sandbox-apps/{sid}/{PORT}/{cap.split('.')[0]}.{'A' * 43}/echo",
        f"/sandbox-apps/{sid}/{PORT}/not-a-capability/echo",
    ):
        for headers in ({}, {"Authorization": f"Bearer {alice_key}"}):
            r = httpx.get(plane.url + path, headers=headers, timeout=10)
            assert r.status_code == 403, (path, r.status_code, r.text)
    # No key at all: no link.
    assert httpx.get(f"{plane.url}/api/v1/sandboxes/{sid}/app-url?port={PORT}").status_code == 401

    # A link opens the one port it was made for; the agent server's port is no app.
    assert httpx.get(link["url"].replace(f"/{PORT}/", "/8012/"), timeout=10).status_code == 403
    agent_port = record["exposed_urls"][0]["port"]
    for port in (agent_port, 80, 0, 65536, "x", "8011/../8000"):
        r = alice.get(f"/api/v1/sandboxes/{sid}/app-url", params={"port": port})
        assert r.status_code == 422, (port, r.text)

    # The target is the sandbox's own address and the link's port, whatever the path says:
    # this host's services are out of reach (a path holding a host, a port, `..` or `@`).
    host = HostListener()
    try:
        for tail in (
            f"/127.0.0.1:{host.port}/",
            f"//127.0.0.1:{host.port}/",
            f"@127.0.0.1:{host.port}/",
            f"..%2f..%2f{host.port}/",
            f"http://127.0.0.1:{host.port}/",
        ):
            r = httpx.get(plane.url + link["path"] + tail.lstrip("/"), timeout=10)
            assert r.status_code == 200 and "path" in r.json(), (tail, r.text)
        minted_for_host = alice.get(
            f"/api/v1/sandboxes/{sid}/app-url", params={"port": host.port}
        ).json()
        r = httpx.get(minted_for_host["url"], timeout=10)
        assert r.status_code == 502, r.text  # its port in the sandbox: nothing listens there
        assert host.hits == []
    finally:
        host.server.shutdown()
        host.server.server_close()

    # An API client's record lists the worker ports' links (never a browser's).
    exposed = {
        u["name"]: u
        for u in alice.get("/api/v1/sandboxes", params={"id": sid}).json()[0]["exposed_urls"]
    }
    assert exposed["WORKER_1"]["port"] == PORT and exposed["WORKER_2"]["port"] == 8012
    assert httpx.get(exposed["WORKER_1"]["url"] + "echo", timeout=10).status_code == 200
    browser = alice.get(
        "/api/v1/sandboxes", params={"id": sid}, headers={"Sec-Fetch-Mode": "cors"}
    ).json()[0]
    assert browser["exposed_urls"] is None

    # A paused sandbox serves nothing; a new link resumes it, as any access does.
    assert alice.post(f"/api/v1/sandboxes/{sid}/pause").json()["status"] == "PAUSED"
    assert httpx.get(link["url"] + "echo", timeout=10).status_code == 409
    assert alice.get(f"/api/v1/sandboxes/{sid}/app-url", params={"port": PORT}).status_code == 200
    wait_for(opened, 30, what="the app after the resume")

    # A link stops opening the app after its hour.
    clock.offset += 3601
    assert httpx.get(link["url"] + "echo", timeout=10).status_code == 403

    # A deleted sandbox's link opens nothing.
    clock.offset = 0
    assert alice.delete(f"/api/v1/sandboxes/{sid}", params={"sandbox_id": sid}).status_code == 200
    assert httpx.get(link["url"] + "echo", timeout=10).status_code == 410


@pytest.mark.parametrize(
    "path",
    [
        "/sandbox-apps",
        "/sandbox-apps/",
        "/sandbox-apps/x",
        "/sandbox-apps/x/1",
        "/sandbox-apps/x/8011/",
        "/sandbox-apps/x/99999999/c/",
        "/sandbox-apps/x/-1/c/",
        "/sandbox-apps/%00/8011/1.x/",
        "/sandbox-apps/" + "a" * 5000 + "/8011/1.x/",
        "/sandbox-apps/x/8011/99999999999999999999." + "A" * 43 + "/",
        "/sandbox-apps/x/8011/1." + "A" * 43 + "/%ff%fe",
    ],
)
def test_bad_app_paths_are_refused_never_a_500(control_plane: ControlPlane, path: str) -> None:
    for method in ("GET", "POST", "OPTIONS", "DELETE"):
        r = httpx.request(method, control_plane.url + path, timeout=10)
        assert 300 <= r.status_code < 500, (method, path, r.status_code, r.text)
        # Refused by the app proxy, in its sandboxed document (not the console's 404).
        assert r.headers["content-security-policy"].startswith("sandbox "), (method, path)


def test_a_host_sharing_sandbox_has_no_app_links(tmp_path: Path) -> None:
    """Without a network of its own a sandbox's port is this host's: no link is made for it (a
    loopback target would be this host's services, not the sandbox's app)."""
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_network="host")).start()
    try:
        client = plane.client(plane.new_user("carol"))
        sid = client.post("/api/v1/sandboxes", json={}).json()["id"]
        record = wait_running(client, sid)
        assert [u["name"] for u in record["exposed_urls"]] == ["AGENT_SERVER"]
        r = client.get(f"/api/v1/sandboxes/{sid}/app-url", params={"port": PORT})
        assert r.status_code == 409, r.text
    finally:
        plane.stop()
