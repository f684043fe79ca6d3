"""`python -m agent_server.warm [--claim LIFELINE] [agent-server flags]`: a warm pool's parked
server (control_plane/providers/pool.py, swarm/pool.py).

It loads what a start and a first model call need (`template.preload`), then is `agent-server`
with the same flags. The start it is claimed for pays for none of the imports.

- Without `--claim` (a Docker container): the keys come on the pipe AGENT_SERVER_KEYS_FD names
  (the container's stdin, held by the control plane), as for any server; the pipe closing
  unused (its control plane gone) ends it, as a server ends whose keys never come.
- With `--claim` (a Swarm service, whose stdin nobody holds): that pipe holds a one-time claim
  token instead (`{"claim": ...}`, from the service's Docker secret), and the server's port
  takes one request before the server listens on it: `POST /claim` with
  `Authorization: Bearer <token>` and the keys as its body (the JSON object the pipe would hold;
  the request's shape and the secret's are `launch.claim`, the pool's too).
  A wrong token is 403 and keys that are not the pipe's JSON object 422, both changing
  nothing; the right one is 204, and the server starts with those keys. `GET /parked` (204) is the
  pool's lifeline: with no request for LIFELINE seconds (its control plane gone) the parked server
  exits.
"""

from __future__ import annotations

import os
import socket
import sys

from agent_server.__main__ import main, parse_args
from agent_server.template import preload
from launch import claim
from launch import keys as launch_keys
from launch.env import KEYS_FD
from launch.keys import MAX_BYTES

#: A claim's request line and headers; its body is at most the keys' MAX_BYTES.
MAX_HEAD = 8 * 1024


def claimed(port: int, token: str, lifeline: float) -> bytes | None:
    """The keys of the first request with `token` on `port` (None: no request for `lifeline`
    seconds). One connection at a time, each answered and closed."""
    with socket.create_server(("0.0.0.0", port), reuse_port=False) as listener:
        listener.settimeout(lifeline)
        while True:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                return None
            with connection:
                connection.settimeout(2)  # a claim comes whole at once; a slow peer waits
                try:
                    keys = _answer(connection, token)
                except (OSError, ValueError):
                    continue
                if keys is not None:
                    return keys


def _answer(connection: socket.socket, token: str) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(MAX_HEAD)
        if not chunk or len(data) > MAX_HEAD:
            raise ValueError("no request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    method, _, rest = line.partition(" ")
    path = rest.partition(" ")[0]
    if (method, path) == ("GET", claim.PARKED):
        connection.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        return None
    if (method, path) != ("POST", claim.CLAIM):
        connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        return None
    if not claim.authorized(headers.get("authorization", ""), token):
        connection.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        return None
    length = int(headers.get("content-length", "-1"))
    if not 0 < length <= MAX_BYTES:
        raise ValueError("no keys")
    while len(body) < length:
        chunk = connection.recv(length - len(body))
        if not chunk:
            raise ValueError("cut short")
        body += chunk
    try:
        launch_keys.decode(body)
    except ValueError:  # said, and still parked
        connection.sendall(b"HTTP/1.1 422 Unprocessable Entity\r\nContent-Length: 0\r\n\r\n")
        return None
    connection.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
    return body


def claim_token(named: str) -> str:
    """The token on the descriptor `named` (`launch.claim.secret`); a clear exit otherwise."""
    try:
        with os.fdopen(int(named), "rb") as pipe:
            return claim.token_of(pipe.read(MAX_BYTES))
    except claim.WeakToken as exc:
        raise SystemExit(f"agent_server.warm: {exc}") from None
    except (ValueError, OSError):
        raise SystemExit(
            f'agent_server.warm: {KEYS_FD} must name a descriptor holding {{"claim": "<token>"}}'
        ) from None


def run(args: list[str]) -> None:
    lifeline: float | None = None
    if args[:1] == ["--claim"]:
        lifeline, args = float(args[1]), args[2:]
    preload()
    if lifeline is not None:
        token = claim_token(os.environ.pop(KEYS_FD, ""))
        port = parse_args(args).port
        if not port:
            raise SystemExit("agent_server.warm: --claim needs --port")
        keys = claimed(port, token, lifeline)
        if keys is None:
            raise SystemExit(0)
        read, write = os.pipe()
        os.write(write, keys)
        os.close(write)
        os.environ[KEYS_FD] = str(read)
    main(args)


if __name__ == "__main__":
    run(sys.argv[1:])
