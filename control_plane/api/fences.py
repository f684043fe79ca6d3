"""POST /api/v1/network/fences: a swarm node's fence reports its node's sandboxes and is
answered their policies (`control_plane.sandboxes.fences`), with the deployment's fence token
as `Authorization: Bearer` (no account key, no sandbox's)."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.requests import Request
from starlette.responses import Response

from control_plane.api.io import body, services
from control_plane.api.paths import MADE_ID
from control_plane.network.fence import Refusal
from control_plane.network.policy import NetworkPolicy
from control_plane.sandboxes.fences import reported
from web.errors import Unauthorized
from web.io import doc, reply

SandboxId = Annotated[str, StringConstraints(pattern=MADE_ID)]


class RefusalReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    address: ipaddress.IPv4Address
    protocol: Annotated[str, StringConstraints(max_length=8)]
    port: int = Field(ge=0, le=65535)
    seconds_ago: int = Field(ge=0, le=86400)


class SandboxReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    address: ipaddress.IPv4Address
    refused: int = Field(ge=0, le=2**63 - 1)
    recent: list[RefusalReport] = Field(default_factory=list, max_length=100)
    holds: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")] | None = None
    """The digest of the policy the fence holds it to (None: not let in yet)."""
    runtime: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")] | None
    ) = None
    """The OCI runtime its container runs on, as the node's Docker says (`runsc`: gVisor)."""


class FenceReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    sandboxes: dict[SandboxId, SandboxReport] = Field(max_length=1000)


class FenceAnswer(BaseModel):
    policies: dict[str, NetworkPolicy | None]
    """Each sandbox's policy; null: not a live sandbox of this deployment (let it out)."""


@doc(
    summary="A swarm node's fence: its sandboxes reported, their policies answered (the "
    "deployment's fence token)",
    body=FenceReport,
    response=FenceAnswer,
    errors=(401,),
)
async def report(request: Request) -> Response:
    svc = services(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if svc.fences is None or scheme.lower() != "bearer" or not svc.fences.authentic(token.strip()):
        raise Unauthorized("the deployment's fence token is required", scheme="Bearer")
    given = await body(request, FenceReport)
    sandboxes = {
        sid: reported(
            str(r.address),
            r.refused,
            [Refusal(str(x.address), x.protocol, x.port, x.seconds_ago) for x in r.recent],
            r.holds,
            r.runtime,
        )
        for sid, r in given.sandboxes.items()
    }
    return reply(FenceAnswer(policies=await svc.fences.report(sandboxes)))
