"""Readiness: whether this control plane can do its work now, for a load balancer or an
orchestrator to send it requests or not (`GET /ready`).

`/alive` says the process answers; ready says more: its database answers (a `SELECT 1`) and its
sandbox provider can be reached (`SandboxProvider.ready`: the Docker Engine's or the Swarm
manager's ping; a process provider always can). Both are asked at once, each within
`TIMEOUT` seconds, so the answer never hangs on a server that does not answer (a PostgreSQL
host gone from the network holds a connection attempt far longer). A part that fails is named,
with why in words: the driver's first line, never the statement, and never the database URL's
password.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from control_plane.sandboxes.provider import ProviderError, SandboxProvider
from control_plane.store import Database
from control_plane.store.db import describe

#: Seconds each part has to answer.
TIMEOUT = 3.0
#: Characters of a reason at most.
MAX_REASON = 300


@dataclass(frozen=True)
class Part:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Readiness:
    parts: list[Part]

    @property
    def ready(self) -> bool:
        return all(p.ok for p in self.parts)


def _without_password(reason: str, url: str) -> str:
    password = urlsplit(url).password if "://" in url else None
    return reason.replace(password, "***") if password else reason


async def _database(db: Database) -> str:
    try:
        async with db.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise RuntimeError(f"the database does not answer: {describe(exc)}") from None
    return "answers"


async def _provider(provider: SandboxProvider) -> str:
    try:
        await provider.ready()
    except ProviderError as exc:
        raise RuntimeError(f"the sandbox provider cannot be reached: {exc}") from None
    return "reachable"


async def _within(name: str, check: Callable[[], Awaitable[str]], timeout: float) -> Part:
    try:
        return Part(name, True, await asyncio.wait_for(check(), timeout))
    except TimeoutError:
        return Part(name, False, f"no answer within {timeout:g} s")
    except RuntimeError as exc:
        return Part(name, False, str(exc))
    except Exception as exc:  # whatever else a driver raises: said, never a 500
        words = str(exc).splitlines()[0] if str(exc) else ""
        return Part(name, False, f"{type(exc).__name__}: {words}")


async def check(db: Database, provider: SandboxProvider, timeout: float = TIMEOUT) -> Readiness:
    """Both parts, asked at once, each within `timeout` seconds."""
    parts = await asyncio.gather(
        _within("database", lambda: _database(db), timeout),
        _within("sandbox_provider", lambda: _provider(provider), timeout),
    )
    return Readiness(
        [Part(p.name, p.ok, _without_password(p.detail, db.url)[:MAX_REASON]) for p in parts]
    )
