"""A sandbox's egress policy as the service keeps it: stored on its row, held by its provider.

A change is stored and applied under the sandbox's guard (a start in progress is waited for,
and then meets the new policy), at once: new connections meet it, open ones go on. What its
policy refused is read from the provider (the kernel's counters), never stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.crypto import token_matches, token_sandbox
from control_plane.models import SandboxRow, SandboxStatus, ensure_usable
from control_plane.network.fence import Refusal
from control_plane.network.policy import NetworkPolicy
from control_plane.sandboxes.provider import ProviderError
from control_plane.sandboxes.service import SandboxService
from control_plane.sandboxes.starts import handle_of
from control_plane.store import sandboxes as rows
from web.errors import Unavailable


@dataclass(frozen=True)
class Egress:
    """What one sandbox may reach, and what it was refused."""

    policy: NetworkPolicy
    enforced: bool
    """Whether a network boundary holds the sandbox to it (False: its provider shares this
    host's network, or it is not running)."""
    refused: int | None
    """Connections its policy refused (None where nothing enforces it)."""
    recent: tuple[Refusal, ...] = ()
    """What it tried lately and was refused."""


class SandboxEgress:
    def __init__(self, sandboxes: SandboxService) -> None:
        self.sandboxes = sandboxes

    async def change(self, row: SandboxRow, policy: NetworkPolicy) -> SandboxRow:
        """Store `policy` as the sandbox's and hold it to it from now on. Conflict or Gone for
        a sandbox that runs nothing any more; Unavailable when the rules could not be set
        (the stored policy is then applied by its next start)."""
        service = self.sandboxes
        async with service.guard(row.id):
            current = await service.current(row.id)
            ensure_usable(current.id, current.status, "its network policy cannot be changed")
            await rows.set_fields(service.db, row.id, network_policy=policy.model_dump(mode="json"))
            handle = handle_of(current)
            if handle is not None and current.status in (
                SandboxStatus.RUNNING,
                SandboxStatus.PAUSED,
            ):
                try:
                    await service.provider.set_network(handle, policy)
                except ProviderError as exc:
                    raise Unavailable(
                        f"the sandbox's network rules could not be changed: {exc}"
                    ) from None
            return await service.current(row.id)

    async def by_token(self, sandbox_id: str, token: str) -> SandboxRow | None:
        """The sandbox, when `token` is its own (what its agent server asks with)."""
        if token_sandbox(token) != sandbox_id:
            return None
        row = await rows.get(self.sandboxes.db, sandbox_id)
        if row is None or not token_matches(
            self.sandboxes.cipher, token, row.id, row.session_key_hash
        ):
            return None
        return row

    async def state(self, row: SandboxRow) -> Egress:
        handle = handle_of(row)
        live = row.status in (SandboxStatus.RUNNING, SandboxStatus.PAUSED)
        refusals = (
            await self.sandboxes.provider.refusals(handle) if handle is not None and live else None
        )
        if refusals is None:
            return Egress(row.network, enforced=False, refused=None)
        return Egress(row.network, enforced=True, refused=refusals.count, recent=refusals.recent)
