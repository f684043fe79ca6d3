"""`agent-server` / `python -m agent_server`: flags and environment -> Config -> uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path

from pydantic import ValidationError

from agent_server import secrecy
from agent_server.config import ENV_PREFIX, Config, ConfigError, DeliverySettings, from_env
from core.files import write_json


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agent-server",
        description="Hosts the agent conversations of one sandbox. Each flag overrides its variable.",
    )
    parser.add_argument("--host", help="listen address (AGENT_SERVER_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (AGENT_SERVER_PORT, default 8000)")
    parser.add_argument("--state-dir", help="state directory (AGENT_SERVER_STATE_DIR)")
    parser.add_argument("--log-level", help="log level (AGENT_SERVER_LOG_LEVEL, default info)")
    parser.add_argument("--working-dir", help="default workspace (AGENT_SERVER_WORKING_DIR)")
    parser.add_argument("--webhook-url", help="control plane webhook base (AGENT_SERVER_WEBHOOK_URL)")
    parser.add_argument("--max-file-bytes", type=int,
                        help="largest workspace file moved (AGENT_SERVER_MAX_FILE_BYTES)")
    parser.add_argument("--terminal-idle-timeout", type=float,
                        help="seconds before an unused shell closes (AGENT_SERVER_TERMINAL_IDLE_TIMEOUT)")
    parser.add_argument("--chromium", help="the browser tool's Chromium (AGENT_SERVER_CHROMIUM)")
    parser.add_argument("--log-format", choices=["text", "json"],
                        help="text, or one JSON object per line (AGENT_SERVER_LOG_FORMAT)")
    parser.add_argument("--tracing", choices=["auto", "on", "off"],
                        help="auto: spans when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_"
                             "ENDPOINT); on: recorded even without one; off (AGENT_SERVER_TRACING)")
    parser.add_argument("--metrics-open", action="store_true", default=None,
                        help="GET /metrics without the session key (AGENT_SERVER_METRICS_OPEN)")
    limits = parser.add_argument_group("delivery limits")
    for name, field in DeliverySettings.model_fields.items():
        kind = int if field.annotation in (int, "int") else float
        limits.add_argument("--" + name.replace("_", "-"), type=kind, dest=name,
                            help=f"{field.description or ''} ({ENV_PREFIX}{name.upper()})")
    parser.add_argument("--ready-file", help='once serving, {"port", "pid"} is written there '
                        "atomically (AGENT_SERVER_READY_FILE); tells a supervisor the bound port")
    return parser.parse_args(argv)


def ready_file(argv: list[str] | None = None) -> Path | None:
    """--ready-file or AGENT_SERVER_READY_FILE; kept out of Config: it is the launcher's concern."""
    value = parse_args(argv).ready_file or os.environ.get("AGENT_SERVER_READY_FILE")
    return Path(value).expanduser().absolute() if value else None


def write_ready_file(path: Path, port: int) -> None:
    """Written atomically, so a reader never sees half of it."""
    write_json(path, {"port": port, "pid": os.getpid()})


def load_config(argv: list[str] | None = None) -> Config:
    args = parse_args(argv)
    return from_env(
        host=args.host,
        port=args.port,
        state_dir=args.state_dir,
        log_level=args.log_level,
        default_working_dir=args.working_dir,
        webhook_url=args.webhook_url,
        max_file_bytes=args.max_file_bytes,
        terminal_idle_timeout=args.terminal_idle_timeout,
        chromium=args.chromium,
        log_format=args.log_format,
        tracing=args.tracing,
        metrics_open=args.metrics_open,
        **{name: getattr(args, name) for name in DeliverySettings.model_fields},
    )


def main(argv: list[str] | None = None) -> None:
    try:
        secrecy.guard()
        config = load_config(argv)
        config.check()
    except (ConfigError, ValidationError) as exc:
        print(f"agent-server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    from agent_server.accesslog import SafeFormatter
    from agent_server.telemetry.logs import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if config.log_format == "json" else
                         SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler])
    # httpx logs each request's full URL, credentials of a webhook URL included.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if config.generated_key:
        # Printed once, on stderr only, so the operator can reach a local server.
        print(f"agent-server: no SESSION_API_KEY set; this run's key is {config.session_api_keys[0]}",
              file=sys.stderr, flush=True)

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
        timeout_graceful_shutdown=10,
        ws_ping_interval=20.0,  # dead websocket peers are noticed within about 40 s
        ws_ping_timeout=20.0,
    )
    ready_path = ready_file(argv)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if ready_path is not None and self.started:
                # With --port 0 the OS picks the port: only the bound socket knows it.
                write_ready_file(ready_path, self.servers[0].sockets[0].getsockname()[1])

    Server(uvicorn_config).run()


if __name__ == "__main__":
    main()
