"""A provider around a provider: every seam method asked of the wrapped one as it is.

What wraps a provider (the warm pool, `providers.pool.Pooled`; the measures, `sandboxes.
measured.Measured`) overrides the few calls it changes and inherits the rest from here, so a
new seam method is delegated in one place and a sandbox is the same sandbox whatever wraps
its provider.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from control_plane.models import DiskUsage
from control_plane.network.fence import Refusals
from control_plane.network.policy import NetworkPolicy
from control_plane.sandboxes.provider import (
    Handle,
    Health,
    Launch,
    Liveness,
    SandboxProvider,
    SandboxSpec,
)


class Wrapper(SandboxProvider):
    def __init__(self, provider: SandboxProvider) -> None:
        # (SandboxProvider.__init__ is not called: its HTTP client would be a second one.)
        self.provider = provider
        self.start_timeout = provider.start_timeout
        self.single_tenant = provider.single_tenant
        self.host_loopback = provider.host_loopback
        self.hibernates = provider.hibernates

    async def start(self) -> None:
        await self.provider.start()

    async def ready(self) -> None:
        await self.provider.ready()

    def reserve(self, spec_id: str) -> str | None:
        return self.provider.reserve(spec_id)

    async def create(self, launch: Launch) -> Handle:
        return await self.provider.create(launch)

    async def close(self) -> None:
        await self.provider.close()

    async def alive(self, handle: Handle) -> bool:
        return await self.provider.alive(handle)

    async def until_alive(
        self, handle: Handle, failure: str, still_there: Callable[[], bool] = lambda: True
    ) -> None:
        await self.provider.until_alive(handle, failure, still_there)

    def specs(self) -> list[SandboxSpec]:
        return self.provider.specs()

    async def inspect(self, handle: Handle) -> Liveness:
        return await self.provider.inspect(handle)

    async def health(self, handle: Handle) -> Health:
        return await self.provider.health(handle)

    async def pause(self, handle: Handle) -> None:
        await self.provider.pause(handle)

    async def resume(self, handle: Handle) -> Handle:
        return await self.provider.resume(handle)

    async def hibernate(self, handle: Handle, root_dir: Path) -> None:
        await self.provider.hibernate(handle, root_dir)

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        return await self.provider.destroy(sandbox_id, handle, root_dir)

    async def recover(self, launch: Launch) -> Handle | None:
        return await self.provider.recover(launch)

    def root_dir(self, sandbox_id: str, sandboxes_dir: Path) -> Path:
        return self.provider.root_dir(sandbox_id, sandboxes_dir)

    async def set_network(self, handle: Handle, policy: NetworkPolicy) -> bool:
        return await self.provider.set_network(handle, policy)

    async def refusals(self, handle: Handle) -> Refusals | None:
        return await self.provider.refusals(handle)

    def disk(self, sandbox_id: str, root_dir: Path) -> DiskUsage | None:
        return self.provider.disk(sandbox_id, root_dir)

    def inside(self, url: str) -> str:
        return self.provider.inside(url)

    @property
    def sandbox_side(self) -> str | None:
        return self.provider.sandbox_side

    def working_dir(self, root_dir: Path) -> Path:
        return self.provider.working_dir(root_dir)

    def url(self, handle: Handle) -> str:
        return self.provider.url(handle)


__all__ = ["Wrapper"]
