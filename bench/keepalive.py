"""How often a kept-alive request meets a reset, by the server's idle timeout (prints JSON).

    .venv/bin/python bench/keepalive.py [--clients 200]

Each client (an httpx client, its pool at httpx's default expiry of 5 s) sends a request,
waits between 4.90 and 5.10 s, the moment its pool and uvicorn's default both give the
connection up, and sends another on it. Against uvicorn's default idle timeout (5 s) a few of
them are reset or find the connection closed unanswered; against the services' own
(`web.keepalive.IDLE_SECONDS`) the client lets go first and none is.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from web.keepalive import IDLE_SECONDS  # noqa: E402


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def serve(idle: int) -> tuple[uvicorn.Server, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = Starlette(routes=[Route("/", ok)])
    config = uvicorn.Config(app, log_level="error", loop="asyncio", timeout_keep_alive=idle)
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, sock.getsockname()[1]


def outcomes(idle: int, clients: int) -> Counter[str]:
    server, port = serve(idle)
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def client(i: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as c:
            c.get("/")
            time.sleep(4.90 + 0.20 * i / clients)
            try:
                c.get("/")
                outcome = "answered"
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
        with lock:
            seen[outcome] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    server.should_exit = True
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    args = parser.parse_args()
    rows = {
        f"idle timeout {idle} s": dict(outcomes(idle, args.clients)) for idle in (5, IDLE_SECONDS)
    }
    print(json.dumps({"clients": args.clients, "second request": rows}, indent=1))


if __name__ == "__main__":
    main()
