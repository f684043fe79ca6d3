"""The provider's calls measured: each a span under the current one (`sandbox.<call>`) and a
latency by call and outcome (`control_plane_provider_call_seconds`).

The composition root wraps the provider it built (warm pool included) once; what calls it (the
sandbox service, the reconciler) knows nothing of it. The calls measured are those that act
on a sandbox (create, recover, pause, resume, destroy) and the health checks (inspect,
health: counted, not traced); the quick ones that only compute (a URL, a directory) are not.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from control_plane.sandboxes.provider import (
    Handle,
    Health,
    Launch,
    Liveness,
    ProviderError,
    Refused,
    SandboxProvider,
)
from control_plane.sandboxes.wrapper import Wrapper
from control_plane.telemetry import CLIENT, Telemetry


class Measured(Wrapper):
    def __init__(self, provider: SandboxProvider, telemetry: Telemetry, kind: str) -> None:
        super().__init__(provider)
        self.telemetry = telemetry
        self.kind = kind

    @contextlib.contextmanager
    def _call(self, call: str, traced: bool = True) -> Iterator[None]:
        """`traced`: a span too (the reconciler's health checks, every few seconds for every
        sandbox, would each be a trace of their own: they are counted only)."""
        started = time.perf_counter()
        outcome = "error"
        attributes = {"control_plane.provider": self.kind}
        span = (
            self.telemetry.span(f"sandbox.{call}", attributes, kind=CLIENT)
            if traced
            else contextlib.nullcontext()
        )
        with span:
            try:
                yield
                outcome = "ok"
            except Refused:
                outcome = "refused"
                raise
            except ProviderError:
                outcome = "failed"
                raise
            except BaseException as exc:
                outcome = "cancelled" if type(exc).__name__ == "CancelledError" else "error"
                raise
            finally:
                self.telemetry.metrics.provider_call(call, outcome, time.perf_counter() - started)

    async def create(self, launch: Launch) -> Handle:
        with self._call("create"):
            return await self.provider.create(launch)

    async def recover(self, launch: Launch) -> Handle | None:
        with self._call("recover"):
            return await self.provider.recover(launch)

    async def inspect(self, handle: Handle) -> Liveness:
        with self._call("inspect", traced=False):
            return await self.provider.inspect(handle)

    async def health(self, handle: Handle) -> Health:
        with self._call("health", traced=False):
            return await self.provider.health(handle)

    async def pause(self, handle: Handle) -> None:
        with self._call("pause"):
            await self.provider.pause(handle)

    async def resume(self, handle: Handle) -> Handle:
        with self._call("resume"):
            return await self.provider.resume(handle)

    async def hibernate(self, handle: Handle, root_dir: Path) -> None:
        with self._call("hibernate"):
            await self.provider.hibernate(handle, root_dir)

    async def destroy(self, sandbox_id: str, handle: Handle | None, root_dir: Path) -> Path | None:
        with self._call("destroy"):
            return await self.provider.destroy(sandbox_id, handle, root_dir)


__all__ = ["Measured"]
