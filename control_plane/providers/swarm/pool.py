"""The Swarm provider's parking (`parking.Parking`), for a warm pool (`providers.pool`):
parked one-replica services.

Nobody holds a Swarm task's stdin, so a parked service's Docker secret holds a one-time claim
token instead of keys, and its server (`python -m agent_server.warm --claim LIFELINE`) takes one
authenticated `POST /claim` on its published port, carrying the keys, before it serves there
(`launch.claim`: the secret and the request, the parked server's side too). The token exists in
the managers' Raft log (encrypted, as every secret), in the task's root-only secret file and in
this control plane's memory; it opens nothing but that one claim.

A parked service is named and labelled as its sandbox will be (services cannot be renamed),
plus `agent-server.parked`; the claim takes that label off first, so a service without it is a
sandbox's whatever happens next. Its lifeline is this pool asking `GET /parked` every quarter
of LIFELINE: its control plane gone, the parked server exits within LIFELINE seconds, and the
next pool's sweep removes every parked service of the deployment whose task has ended (a live
one belongs to a live control plane, which pings it).

`SwarmParking` is the Swarm provider's base: these moves are the provider's own methods, made
of its settings (a parked service is made as its sandboxes' are, `manager.start_service`), its
labels, its agent servers' address and its removal of a sandbox's every object (`remove_all`).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import secrets
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx

from control_plane.providers.containers import (
    LABEL_PLANE,
    LABEL_SANDBOX,
    VOLUME_DIR,
    ContainerProvider,
    name_of,
)
from control_plane.providers.parking import Parked
from control_plane.providers.swarm.manager import current, start_service, update
from control_plane.providers.swarm.nodejobs import ENDED, api
from control_plane.providers.swarm.settings import SwarmSettings
from control_plane.providers.swarm.spec import CLAIMED, WARM_SERVER, published
from control_plane.sandboxes.provider import Handle, Launch, ProviderError, until_up
from launch import claim

logger = logging.getLogger(__name__)

LABEL_PARKED = "agent-server.parked"
"""A parked service's label (its service's alone): the claim takes it off first."""


class SwarmParking(ContainerProvider):
    """Parked services: what the Swarm provider offers a warm pool."""

    settings: SwarmSettings
    _parked_client: httpx.AsyncClient | None = None
    """The parked servers' HTTP (their lifeline and their claim), made with the first park:
    apart from /alive's, with a longer timeout."""

    @abc.abstractmethod
    async def remove_all(self, sandbox_id: str) -> None:
        """Everything of a sandbox, its volume too (nothing to archive)."""

    @property
    def keep_interval(self) -> float:
        """A quarter of the lifeline: a parked server hears from its pool well within it."""
        return self.settings.lifeline / 4

    @property
    def _parked_http(self) -> httpx.AsyncClient:
        if self._parked_client is None:
            self._parked_client = httpx.AsyncClient(timeout=5.0)
        return self._parked_client

    async def close(self) -> None:
        await super().close()
        if self._parked_client is not None:
            await self._parked_client.aclose()
            self._parked_client = None

    async def park(self, sandbox_id: str, webhook_url: str) -> Parked:
        token = secrets.token_urlsafe(32)
        launch = Launch(
            sandbox_id=sandbox_id,
            spec_id="swarm",
            root_dir=Path(VOLUME_DIR),
            session_api_key="",
            webhook_url=webhook_url,
        )
        service_id = await self.run(
            lambda client: start_service(
                client,
                self.settings,
                launch,
                self.labels(sandbox_id),
                secret=claim.secret(token),
                server=f"{WARM_SERVER} {self.settings.lifeline:g}",
                marks={LABEL_PARKED: "true"},
            )
        )
        parked = Parked(sandbox_id, service_id, token)
        try:
            parked.handle = await self._until_parked(service_id, sandbox_id)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.discard(parked)
            raise
        return parked

    async def _until_parked(self, service_id: str, sandbox_id: str) -> Handle:
        settings = self.settings

        async def look() -> Handle | None:
            task, node = await self.run(current, service_id, frozenset())
            if task is not None and task["Status"]["State"] in ENDED:
                raise ProviderError(f"its task ended: {task['Status'].get('Err') or ''}")
            port = None if task is None else published(task)
            if node is None or port is None:
                return None
            handle = Handle(sandbox_id=sandbox_id, ref=service_id, port=port, host=node.address)
            return handle if await self._ping(handle) else None

        return await until_up(
            look,
            within=settings.placement_timeout + settings.start_timeout,
            interval=0.1,
            late="it did not answer as parked in time",
        )

    async def _ping(self, handle: Handle) -> bool:
        try:
            answer = await self._parked_http.get(self.url(handle) + claim.PARKED)
            return answer.status_code == 204
        except httpx.HTTPError:
            return False

    async def hand_over(self, parked: Parked, keys: bytes) -> str:
        """The parked label off, the keys in a secret of their own (its next task, after a
        pause, starts from them: `manager.unparked`), then the claim."""
        assert parked.handle is not None
        labels = self.labels(parked.sandbox_id)

        def unpark(client: docker.DockerClient) -> None:
            update(client, parked.ref, _unpark)
            api(client).create_secret(name_of(parked.sandbox_id) + CLAIMED, keys, labels=labels)

        await self.run(unpark)
        try:
            answer = await self._parked_http.post(
                self.url(parked.handle) + claim.CLAIM,
                content=keys,
                headers=claim.headers(parked.hold),
            )
        except httpx.HTTPError as exc:
            raise ProviderError(f"its claim failed: {exc}") from None
        if answer.status_code != 204:
            raise ProviderError(f"its claim was answered {answer.status_code}")
        return parked.ref

    async def keep(self, parked: Parked) -> bool:
        return parked.handle is not None and await self._ping(parked.handle)

    async def discard(self, parked: Parked) -> None:
        try:
            await self.remove_all(parked.sandbox_id)
        except ProviderError as exc:  # the sweep of a later start removes it
            logger.warning("warm pool: parked sandbox %s is left (%s)", parked.sandbox_id, exc)

    async def sweep(self) -> None:
        def ended(client: docker.DockerClient) -> list[str]:
            found = api(client).services(
                filters={"label": [f"{LABEL_PLANE}={self.plane}", f"{LABEL_PARKED}=true"]}
            )
            ended = []
            for service in found:  # (one just made has no task yet: not ended)
                tasks = api(client).tasks(filters={"service": service["ID"]})
                if tasks and all(t["Status"]["State"] in ENDED for t in tasks):
                    ended.append(str(service["Spec"]["Labels"].get(LABEL_SANDBOX)))
            return ended

        # All at once, and one that cannot be removed (its node busy) keeps none of the others.
        found = await self.run(ended)
        outcomes = await asyncio.gather(
            *(self.remove_all(sandbox_id) for sandbox_id in found), return_exceptions=True
        )
        left = [
            f"{sandbox_id}: {outcome}"
            for sandbox_id, outcome in zip(found, outcomes, strict=True)
            if isinstance(outcome, ProviderError)
        ]
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, ProviderError):
                raise outcome
        if left:
            raise ProviderError(f"{len(left)} of {len(found)} are left ({'; '.join(left)})")


def _unpark(spec: dict[str, Any]) -> None:
    spec.setdefault("Labels", {}).pop(LABEL_PARKED, None)
