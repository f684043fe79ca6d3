"""`agent-server acp`: the editor's side is stdin and stdout (ACP), logs go to stderr."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import cast

import acp
from acp.interfaces import Agent

from bridge.agent import BridgeAgent
from bridge.agentserver import AgentServer
from bridge.config import Config, ConfigError, load
from bridge.controlplane import ControlPlane
from bridge.service import Service


def service(config: Config) -> Service:
    return AgentServer(config) if config.target == "agent-server" else ControlPlane(config)


async def serve(config: Config) -> None:
    agent = BridgeAgent(
        service(config), config.approval, {"bridge key": config.key.get_secret_value()}
    )
    try:
        # Methods it leaves out (session/list, fork, resume, authenticate) are answered
        # "method not found" by the package's router.
        await acp.run_agent(cast(Agent, agent))
    finally:
        await agent.close()


def main(argv: list[str] | None = None) -> None:
    try:
        config = load(argv)
    except ConfigError as exc:
        print(f"agent-server acp: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is noise here
    try:
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        pass


__all__ = ["main"]
