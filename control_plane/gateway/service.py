"""The gateway as one service: a sandbox's model call in, the user's LLM called with the user's
key, the answer streamed back, and what it used counted.

    token -> sandbox -> user's settings -> upstream (base, checked) -> body (bounded)
          -> limits (budget, rate) -> forwarded, answered as it comes -> usage recorded

Every refusal on the way is answered in the provider's error shape (`errors`). The usage of a
call is written after its answer has ended, by a task of its own: the client never waits for
the database, and a call the client gave up half-way is counted with what it used so far.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

import httpx
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response

from control_plane.config import Config
from control_plane.crypto import Cipher
from control_plane.gateway import credentials, errors, metering, upstream
from control_plane.gateway.credentials import LLMAccess
from control_plane.gateway.limits import Caps, Limits, caps, day_of
from control_plane.gateway.metering import Meter
from control_plane.gateway.proxy import Forwarder, outbound
from control_plane.models import SandboxRow, UsageRow
from control_plane.sandboxes.rows import SandboxRows
from control_plane.settings import SettingsService, UserSettings
from control_plane.store import Database, usage
from control_plane.store.db import describe, retrying
from control_plane.telemetry.metrics import PlaneMetrics
from web.errors import PayloadTooLarge
from web.io import read_bounded

logger = logging.getLogger(__name__)

#: The largest request body forwarded (a long conversation with images stays well below).
MAX_BODY = 32 * 1024 * 1024
#: Seconds a checked token and its user's settings are used again without reading them: an
#: agent's calls come seconds apart, and two reads of the store were most of what the gateway
#: added to a call (14 of 15 ms). A deleted sandbox's token, or a changed key or limit, holds
#: that long at most; tokens remembered at most MAX_REMEMBERED.
REUSE_SECONDS = 2.0
MAX_REMEMBERED = 1024


@dataclass
class Call:
    """One forwarded call, watched for its accounting (`proxy.Observer`)."""

    sandbox: SandboxRow
    body: bytes
    """The request's (the model it names is read from it once the answer has ended)."""
    configured: str | None
    """The model of the user's settings (its provider prices the call)."""
    meter: Meter
    counted: Callable[[Call], None]

    def feed(self, chunk: bytes) -> None:
        self.meter.feed(chunk)

    def end(self) -> None:
        self.counted(self)


class Gateway:
    """Forwards sandboxes' model calls (`forward`) and reports what they used (`report`)."""

    def __init__(
        self,
        db: Database,
        cipher: Cipher,
        settings: SettingsService,
        config: Config,
        control_plane_url: Callable[[], str],
        *,
        host_loopback: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: PlaneMetrics | None = None,
    ) -> None:
        """`control_plane_url`: this control plane as sandboxes reach it (asked each time: the
        sandbox service knows it); `host_loopback`: this machine's loopback is an upstream a
        user may name (the provider's, `SandboxProvider.host_loopback`); `transport`: the
        upstream's (httpx's own, over the network, unless given: the seam of outbound HTTP)."""
        self.db, self.cipher, self.settings, self.config = db, cipher, settings, config
        self.control_plane_url = control_plane_url
        self.limits = Limits(db, config)
        self.sandbox_rows = SandboxRows(db)
        self.targets = upstream.Targets(loopback=host_loopback)
        self.forwarder = Forwarder(transport)
        self._recording: set[asyncio.Task[None]] = set()
        self._checked: dict[str, tuple[float, SandboxRow, UserSettings]] = {}
        self.metrics = metrics or PlaneMetrics()

    def access(self, sandbox: SandboxRow) -> LLMAccess:
        """What `sandbox` is given for its model client: the gateway's URL and its token."""
        return credentials.access(self.control_plane_url(), self.cipher, sandbox)

    def forget(self, user_id: str) -> None:
        """The user's settings read afresh at the next call of any of their sandboxes: a run
        started again because they were just changed (`POST /app-conversations/{id}/llm`) must
        not meet the ones remembered for REUSE_SECONDS (this control plane's; another's are
        that old at most)."""
        self._checked = {k: v for k, v in self._checked.items() if v[1].user_id != user_id}

    def caps(self, settings: UserSettings) -> Caps:
        """The limits that hold for a user with `settings`."""
        return caps(self.config, settings)

    async def forward(self, request: Request, path: str) -> Response:
        """The answer to a sandbox's call to `path` (below the gateway): the upstream's, or a
        refusal shaped as the provider the client speaks to would have shaped it."""
        anthropic = errors.anthropic_shaped(path, request.headers)
        try:
            answer = await self._forward(request, path)
            self.metrics.llm_request("forwarded")
            return answer
        except errors.Refusal as refusal:
            self.metrics.llm_request(refusal.kind.name.lower())
            return errors.response(refusal, anthropic)
        except SQLAlchemyError as exc:  # the database away: the client may try again
            self.metrics.llm_request("unavailable")
            logger.warning("LLM gateway: storage failed (%s)", describe(exc))
            return errors.response(
                errors.Refusal(
                    errors.Kind.UNAVAILABLE,
                    "The LLM gateway cannot check this call now (its "
                    "database is unavailable); try again shortly.",
                    {"Retry-After": "5"},
                ),
                anthropic,
            )

    async def _forward(self, request: Request, path: str) -> Response:
        query = list(request.query_params.multi_items())
        found = credentials.find(dict(request.headers), query)
        sandbox, settings = await self._caller(found)
        assert found is not None  # (no credential is refused above)
        base = await upstream.base_for(settings.llm_base_url, settings.llm_model)
        await self.targets.check(base)
        try:
            body = await read_bounded(request, MAX_BODY)
        except PayloadTooLarge:
            raise errors.Refusal(
                errors.Kind.TOO_LARGE,
                (f"The LLM gateway forwards request bodies of at most {MAX_BODY // 2**20} MiB."),
            ) from None
        await self.limits.admit(sandbox.user_id, settings)
        headers, query = credentials.swapped(
            outbound(request.headers.items()), query, found, settings.llm_api_key
        )
        url = upstream.join(base, path, urlencode(query))

        def observe(answer: httpx.Response) -> Call:
            return Call(
                sandbox,
                body,
                settings.llm_model,
                Meter(answer.headers.get("content-type", "")),
                self._count,
            )

        return await self.forwarder.send(request.method, url, headers, body, observe)

    async def _caller(
        self, found: credentials.Credential | None
    ) -> tuple[SandboxRow, UserSettings]:
        """The live sandbox of the token and its user's settings, read at most every
        REUSE_SECONDS for one token (only a token once checked is remembered)."""
        now = time.monotonic()
        remembered = self._checked.get(found.token) if found is not None else None
        if remembered is not None and remembered[0] > now:
            return remembered[1], remembered[2]
        sandbox = await credentials.sandbox_of(self.sandbox_rows, self.cipher, found)
        settings = await self.settings.get(sandbox.user_id)
        assert found is not None
        if len(self._checked) >= MAX_REMEMBERED:
            self._checked = {k: v for k, v in self._checked.items() if v[0] > now}
            if len(self._checked) >= MAX_REMEMBERED:
                self._checked.pop(next(iter(self._checked)))
        self._checked[found.token] = (now + REUSE_SECONDS, sandbox, settings)
        return sandbox, settings

    def _count(self, call: Call) -> None:
        """Record `call` in a task of its own: its answer has ended, and nobody waits."""
        task = asyncio.get_running_loop().create_task(self._record(call))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    async def _record(self, call: Call) -> None:
        """Count one call: a request, its tokens and its price, on today's row."""
        used = call.meter.finish()
        try:
            price = await asyncio.to_thread(_price, used, call)
        except Exception:  # litellm itself failed (its import): the call still counts
            logger.exception(
                "LLM gateway: a call of sandbox %s could not be priced", call.sandbox.id
            )
            price = 0.0
        self.metrics.llm_usage(call.configured, used.prompt_tokens, used.completion_tokens, price)
        try:  # an add is not idempotent, but each failure that passes (`transient`: locked,
            # the server away) comes before its commit: tried again, it counts once
            await retrying(
                lambda: usage.add(
                    self.db,
                    call.sandbox.user_id,
                    call.sandbox.id,
                    day_of(self.db.now()),
                    prompt_tokens=used.prompt_tokens,
                    completion_tokens=used.completion_tokens,
                    cost_usd=price,
                ),
                f"LLM usage of sandbox {call.sandbox.id}",
            )
        except SQLAlchemyError:
            logger.error("LLM gateway: a call of sandbox %s was not counted", call.sandbox.id)

    async def report(
        self, user_id: str, days: int, limit: int
    ) -> tuple[list[UsageRow], str, tuple[int, int, int, float]]:
        """The user's rows of the last `days` days (today included; `limit` at most), today,
        and today's totals over every sandbox."""
        now = self.db.now()
        today, first = day_of(now), day_of(now - timedelta(days=days - 1))
        return (
            await usage.since(self.db, user_id, first, limit),
            today,
            await usage.day_total(self.db, user_id, today),
        )

    async def close(self) -> None:
        """Counts still being written are finished first (briefly), then the connections go."""
        if self._recording:
            await asyncio.wait(list(self._recording), timeout=5)
        for task in list(self._recording):
            task.cancel()
        await self.forwarder.close()


def _price(used: metering.Usage, call: Call) -> float:
    """Blocking, so in a thread, off every request's way: the request body parsed again (a
    long conversation's is megabytes), and litellm (imported the first time)."""
    provider = upstream.provider_of(call.configured)[0] if call.configured else None
    return metering.cost(used, _model(call.body) or call.configured, provider)


def _model(body: bytes) -> str | None:
    """The model a JSON request body names (None for any other body)."""
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return None
    return model if isinstance(model, str) else None
