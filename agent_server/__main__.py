"""`agent-server` / `python -m agent_server`: flags and environment -> Config -> uvicorn.

(The `agent-server` command is the top-level `cli`, which hands `agent-server acp` to the
editor bridge and everything else here.)"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from agent_server import secrecy
from agent_server.config import ENV_PREFIX, Config, ConfigError, from_env
from launch.ready import Ready
from web import config as config_kit
from web import keepalive

if TYPE_CHECKING:
    import uvicorn


@functools.cache
def parser() -> argparse.ArgumentParser:
    """Built once (a flag per setting: milliseconds of work), by the sandbox template before it
    forks; it holds no value, only the flags."""
    built = argparse.ArgumentParser(
        prog="agent-server",
        description=(
            "Hosts the agent conversations of one sandbox. Each flag overrides its variable."
        ),
    )
    config_kit.add_flags(built, Config, ENV_PREFIX)
    return built


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


def write_ready_file(path: Path, port: int) -> None:
    """Written atomically, so a reader never sees half of it (`launch.ready`)."""
    Ready(port=port, pid=os.getpid()).write(path)


def say_ready(fd: int, port: int) -> None:
    """The ready file's content on a descriptor, in one write (a pipe's reader sees all of it
    or nothing), then closed; a reader that is gone changes nothing."""
    try:
        os.write(fd, Ready(port=port, pid=os.getpid()).encode())
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def load_config(argv: list[str] | None = None) -> Config:
    return from_env(**config_kit.flags(parse_args(argv), Config, ENV_PREFIX))


def main(argv: list[str] | None = None) -> None:
    # Start-up creates ~100,000 objects that live as long as the server (modules, classes,
    # schemas, the app): the collector would walk them again and again meanwhile (about a
    # tenth of the start's time), to free nothing. Once built they are frozen, as litellm's
    # are (`agent_server.agent.llm`), so no later full collection walks them either.
    collecting = gc.isenabled()
    gc.disable()
    try:
        server = _server(argv)
        gc.freeze()
    finally:
        if collecting:
            gc.enable()
    server.run()


def _server(argv: list[str] | None) -> uvicorn.Server:
    """The configured uvicorn server over the app, not yet running."""
    try:
        secrecy.guard()
        config = load_config(argv)
        config.check()
    except (ConfigError, ValidationError) as exc:
        print(f"agent-server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    from agent_server.telemetry.logs import JsonFormatter
    from web.logs import SafeFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if config.log_format == "json"
        else SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler])
    # httpx logs each request's full URL, credentials of a webhook URL included.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if config.generated_key:
        # Printed once, on stderr only, so the operator can reach a local server.
        print(
            f"agent-server: no SESSION_API_KEY set; this run's key is {config.session_api_keys[0]}",
            file=sys.stderr,
            flush=True,
        )

    import uvicorn

    from agent_server.app import build_app
    from agent_server.websocket import WebSocketProtocol

    app = build_app(config)
    uvicorn_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        log_config=None,  # uvicorn's records go through the root handler, escaped like ours
        access_log=False,  # our own access log never prints query strings (they may hold a key)
        ws=WebSocketProtocol,  # websockets-sansio, closing a laggard with 1013 (see there)
        lifespan="on",
        # asyncio's own loop, never uvloop: uvloop starts each command (git, ripgrep, a hook,
        # /commands) with a fork() of the whole server, which holds litellm (about 200 MiB):
        # the loop stood still for 10-20 ms per command (`bench/server_commands.py`), where
        # asyncio's vfork() takes under a millisecond. The control plane runs on it too.
        loop="asyncio",
        timeout_graceful_shutdown=10,
        timeout_keep_alive=keepalive.IDLE_SECONDS,  # past the clients' own pools (see there)
        # Dead websocket peers are noticed within two intervals (about 40 s by default).
        ws_ping_interval=config.delivery.ws_ping_interval,
        ws_ping_timeout=config.delivery.ws_ping_interval,
    )
    ready_path, ready_fd = config.ready_file, config.ready_fd

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                # With --port 0 the OS picks the port: only the bound socket knows it.
                port = self.servers[0].sockets[0].getsockname()[1]
                if ready_fd is not None:
                    say_ready(ready_fd, port)
                if ready_path is not None:
                    write_ready_file(ready_path, port)

    return Server(uvicorn_config)


if __name__ == "__main__":
    main()
