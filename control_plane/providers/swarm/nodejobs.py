"""Short jobs on one node of a swarm: what only that node can do for a sandbox, because its
volume is there and a manager's API reaches only the manager's own volumes.

Each job is a one-replica service of the sandbox image that is never restarted, pinned to the
node, labelled with its sandbox's labels, removed once done (and any earlier one of the same
kind first, so a job whose control plane died is not left behind). Not Swarm's own job mode:
Docker 20.10 leaves a finished job's container on its node when the job is removed, and that
container would hold the volume.

- the archive job mounts the volume read-only and serves its workspace once as a tar.gz on a
  port published on the node (host mode), to a request carrying a token made for this job only
  (sandboxes of that node reach the port too); it ends after that request, or after
  `ARCHIVE_WAIT` seconds without one. It runs as root with one capability, DAC_READ_SEARCH,
  so files the agent made unreadable are archived too;
- the volume job deletes the volume through the node's Docker socket (the one mount that
  needs: it runs a fixed command, no input of a sandbox's), waiting while the sandbox's last
  task, or the archive job, still holds the volume. A container of the sandbox's service that
  has ended but is still on the node holds it too, and Swarm does not always remove it (seen
  holding the volume past a minute after the service was scaled to 0, its task long ended):
  the job removes those itself, never a running one, nor another service's.

Both are stdlib Python run by the image's `python3`, so the sandbox image needs nothing more.
"""

from __future__ import annotations

import secrets
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import docker.types
import httpx

from control_plane.providers.containers import PORT_NUMBER, VOLUME_DIR, WORKSPACE
from control_plane.sandboxes.provider import ProviderError

LABEL_JOB = "agent-server.job"
#: Seconds the archive job waits for its one request.
ARCHIVE_WAIT = 300
#: Seconds the volume job waits while the volume is still in use.
VOLUME_WAIT = 60
#: The image's own health check is not the judge of a sandbox (the control plane's health
#: check and its grace are), nor of a job: Swarm would kill a task it calls unhealthy.
NO_CHECK = docker.types.Healthcheck(test=["NONE"])
#: Task states after which a task does nothing more.
ENDED = {"complete", "shutdown", "failed", "rejected", "orphaned", "remove"}

ARCHIVE_SERVER = f"""
import hmac, http.server, os, tarfile, time
token = os.environ.pop("ARCHIVE_TOKEN").encode()
workspace = {WORKSPACE!r}
deadline = time.monotonic() + {ARCHIVE_WAIT}

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if not hmac.compare_digest(self.headers.get("X-Archive-Token", "").encode(), token):
            self.send_error(401)
            return
        self.server.served = True
        if not os.path.isdir(workspace):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.end_headers()
        with tarfile.open(fileobj=self.wfile, mode="w|gz") as tar:
            tar.add(workspace, arcname="workspace")

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("", {PORT_NUMBER}), Handler)
server.served = False
server.timeout = 1
while not server.served and time.monotonic() < deadline:
    server.handle_request()
"""

VOLUME_REMOVER = f"""
import http.client, json, socket, sys, time, urllib.parse
volume, service = sys.argv[1], sys.argv[2]

class Docker(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect("/var/run/docker.sock")

def call(method, path):
    connection = Docker("localhost")
    connection.request(method, path)
    response = connection.getresponse()
    try:
        return response.status, response.read()
    finally:
        connection.close()

def ended_holders():
    filters = {{
        "volume": [volume],
        "label": ["com.docker.swarm.service.name=" + service],
        "status": ["created", "exited", "dead"],
    }}
    query = urllib.parse.urlencode({{"all": 1, "filters": json.dumps(filters)}})
    status, body = call("GET", "/containers/json?" + query)
    return [c["Id"] for c in json.loads(body)] if status == 200 else []

deadline = time.monotonic() + {VOLUME_WAIT}
while True:
    status, body = call("DELETE", "/volumes/" + volume)
    if status in (204, 404):
        sys.exit(0)
    if status != 409 or time.monotonic() > deadline:
        sys.exit(f"removing volume {{volume}}: {{status}} {{body.decode(errors='replace')[:500]}}")
    for container in ended_holders():
        call("DELETE", "/containers/" + container + "?force=1")
    time.sleep(0.2)
"""


@dataclass(frozen=True)
class Node:
    """A node as a job needs it."""

    id: str
    hostname: str
    address: str


def api(client: docker.DockerClient) -> Any:
    """The SDK's low-level client for its service, task, secret and node calls, which its type
    stubs leave untyped: their answers are the Engine API's JSON, read as such."""
    return client.api


def host_port(port: int | None = None) -> docker.types.EndpointSpec:
    """Port 8000 published in host mode on the task's node (no routing mesh): on `port`, or
    on one the node picks."""
    config: dict[str, Any] = {"Protocol": "tcp", "TargetPort": PORT_NUMBER, "PublishMode": "host"}
    if port is not None:
        config["PublishedPort"] = port
    return docker.types.EndpointSpec(mode="vip", ports=[config])


def job_name(service_name: str, kind: str) -> str:
    return f"{service_name}-{kind}"


class Jobs:
    """Runs jobs for the Swarm provider; every method blocks (called in its worker threads)."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        image: str,
        labels: dict[str, str],
        start_timeout: float,
        node_socket: str,
    ) -> None:
        self.client = client
        self.image = image
        self.labels = labels
        self.start_timeout = start_timeout
        self.node_socket = node_socket

    def archive(self, service_name: str, node: Node, volume: str) -> Iterator[bytes] | None:
        """The workspace in `volume` as gzip chunks (None when it has no workspace); the job
        is removed once the chunks are consumed (or the generator is closed)."""
        token = secrets.token_urlsafe(32)
        spec = docker.types.ContainerSpec(
            self.image,
            command=["python3", "-c", ARCHIVE_SERVER],
            user="0:0",
            env=[f"ARCHIVE_TOKEN={token}"],
            read_only=True,
            cap_drop=["ALL"],
            healthcheck=NO_CHECK,
            cap_add=["CAP_DAC_READ_SEARCH"],
            mounts=[docker.types.Mount(VOLUME_DIR, volume, type="volume", read_only=True)],
        )
        name = job_name(service_name, "archive")
        task = self._start(name, node, spec, publish=True)
        try:
            port = int(task["Status"]["PortStatus"]["Ports"][0]["PublishedPort"])
        except (KeyError, IndexError, TypeError, ValueError):
            self._remove(name)
            raise ProviderError("the archive job's port was not published") from None
        return self._download(name, f"http://{node.address}:{port}/", token)

    def _download(self, name: str, url: str, token: str) -> Iterator[bytes] | None:
        deadline = time.monotonic() + self.start_timeout
        client = httpx.Client(timeout=httpx.Timeout(60.0, connect=2.0))
        try:
            while True:
                try:
                    response = client.send(
                        client.build_request("GET", url, headers={"X-Archive-Token": token}),
                        stream=True,
                    )
                    break
                except httpx.TransportError:  # not listening yet
                    if time.monotonic() > deadline:
                        raise ProviderError(f"the archive job on {url} did not answer") from None
                    time.sleep(0.1)
        except BaseException:
            client.close()
            self._remove(name)
            raise
        if response.status_code == 404:
            response.close()
            client.close()
            self._remove(name)
            return None
        if response.status_code != 200:
            response.close()
            client.close()
            self._remove(name)
            raise ProviderError(f"the archive job answered {response.status_code}")

        def chunks() -> Iterator[bytes]:
            check = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                for chunk in response.iter_raw():
                    data = chunk
                    while data and not check.eof:  # only that it is whole: output discarded
                        check.decompress(data, 1 << 16)
                        data = check.unconsumed_tail
                    yield chunk
                if not check.eof:
                    raise ProviderError("the workspace's archive was cut short")
            finally:
                response.close()
                client.close()
                self._remove(name)

        return chunks()

    def remove_volume(self, service_name: str, node: Node, volume: str) -> None:
        spec = docker.types.ContainerSpec(
            self.image,
            command=["python3", "-c", VOLUME_REMOVER, volume, service_name],
            user="0:0",
            read_only=True,
            cap_drop=["ALL"],
            healthcheck=NO_CHECK,
            mounts=[
                docker.types.Mount("/var/run/docker.sock", self.node_socket, type="bind"),
                # over the image's VOLUME, which would leave an anonymous volume behind
                docker.types.Mount(VOLUME_DIR, None, type="tmpfs", tmpfs_size=1024**2),
            ],
        )
        name = job_name(service_name, "volume")
        try:
            task = self._start(name, node, spec, publish=False, until_ended=True)
            if task["Status"]["State"] != "complete":
                raise ProviderError(
                    f"removing the volume {volume} on {node.hostname} failed: "
                    f"{describe(task)}: {self._logs(name)}"
                )
        finally:
            self._remove(name)

    # -- the job's service -------------------------------------------------------------------

    def _start(
        self,
        name: str,
        node: Node,
        spec: docker.types.ContainerSpec,
        *,
        publish: bool,
        until_ended: bool = False,
    ) -> dict[str, Any]:
        """Create the job (an earlier one of that name removed first) and wait until its task
        runs (or has ended, `until_ended`); ProviderError when it cannot."""
        self._remove(name)
        endpoint = host_port() if publish else None
        template = docker.types.TaskTemplate(
            spec,
            restart_policy=docker.types.RestartPolicy("none"),
            placement=docker.types.Placement(constraints=[f"node.id=={node.id}"]),
        )
        labels = {**self.labels, LABEL_JOB: name}
        service = api(self.client).create_service(
            template,
            name=name,
            labels=labels,
            endpoint_spec=endpoint,
            mode=docker.types.ServiceMode("replicated", 1),
        )
        deadline = time.monotonic() + self.start_timeout
        try:
            while True:
                tasks = api(self.client).tasks(filters={"service": service["ID"]})
                task: dict[str, Any] | None = tasks[0] if tasks else None
                state = task["Status"]["State"] if task else "new"
                if task is not None and (state in ENDED if until_ended else state == "running"):
                    return task
                if task is not None and state in ENDED:
                    raise ProviderError(
                        f"the job {name} on {node.hostname} ended: "
                        f"{describe(task)}: {self._logs(name)}"
                    )
                if time.monotonic() > deadline:
                    raise ProviderError(
                        f"the job {name} on {node.hostname} is still {state} "
                        f"after {self.start_timeout:g} s"
                    )
                time.sleep(0.05)
        except BaseException:
            self._remove(name)
            raise

    def _logs(self, name: str) -> str:
        try:
            raw = b"".join(api(self.client).service_logs(name, stdout=True, stderr=True, tail="20"))
        except docker.errors.DockerException:
            return "(no log)"
        return raw[-1000:].decode(errors="replace").strip() or "(no log)"

    def _remove(self, name: str) -> None:
        try:
            api(self.client).remove_service(name)
        except docker.errors.NotFound:
            pass


def describe(task: dict[str, Any]) -> str:
    """A task's end as a person reads it: its state, the engine's error, the exit status."""
    status = task.get("Status") or {}
    words = [str(status.get("State", "unknown"))]
    if status.get("Err"):
        words.append(str(status["Err"]))
    code = (status.get("ContainerStatus") or {}).get("ExitCode")
    if code:
        words.append(f"exit status {code}")
    return ", ".join(words)
