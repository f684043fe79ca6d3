"""A sandbox's credential towards the gateway: where its model client put it, whose it is, and
the user's real key put in its place.

A sandbox is given a token of its own (`crypto.sandbox_token`) as its LLM API key, so its model
client sends the token wherever that provider's client sends a key: `Authorization: Bearer`
(OpenAI and the OpenAI-compatible), `x-api-key` (Anthropic), `api-key` (Azure),
`x-goog-api-key` or a `key` query parameter (Google). The gateway looks in each place, checks
the token (constant time) against the sandbox it names, which must not be ERROR or MISSING, and
forwards the request with every credential place emptied and the user's key written into the
one the token came in: the upstream sees the request the client would have sent with the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.crypto import Cipher, sandbox_token, token_matches, token_sandbox
from control_plane.gateway.errors import Kind, Refusal
from control_plane.models import SandboxRow
from control_plane.sandboxes.rows import SandboxRows

#: The gateway's path on a control plane: a sandbox's LLM base URL is its control plane's
#: address (as the sandbox reaches it) with this after it.
GATEWAY_PATH = "/api/v1/llm"
#: The headers a key travels in, as the providers' clients send it.
KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
#: The query parameter Google's API also takes a key in.
KEY_PARAM = "key"


@dataclass(frozen=True)
class Credential:
    place: str
    """A header of KEY_HEADERS, or KEY_PARAM for the query parameter."""
    token: str


@dataclass(frozen=True)
class LLMAccess:
    """What a sandbox is given for its model client instead of the user's key and base URL."""

    base_url: str
    api_key: str


def access(control_plane_url: str, cipher: Cipher, sandbox: SandboxRow) -> LLMAccess:
    """The gateway as `sandbox` reaches it, and its token (`control_plane_url`: this control
    plane's address as the sandbox's processes see it)."""
    return LLMAccess(
        control_plane_url.rstrip("/") + GATEWAY_PATH,
        sandbox_token(cipher, sandbox.id, sandbox.session_key_hash),
    )


def find(headers: dict[str, str], query: list[tuple[str, str]]) -> Credential | None:
    """The first place holding a credential (`headers` by lowercase name)."""
    for name in KEY_HEADERS:
        value = headers.get(name, "").strip()
        if name == "authorization":
            scheme, _, value = value.partition(" ")
            value = value.strip() if scheme.lower() == "bearer" else ""
        if value:
            return Credential(name, value)
    for name, value in query:
        if name == KEY_PARAM and value:
            return Credential(KEY_PARAM, value)
    return None


async def sandbox_of(
    sandboxes: SandboxRows, cipher: Cipher, credential: Credential | None
) -> SandboxRow:
    """The live sandbox whose token `credential` is; Refusal (401) for anything else. Every
    failure says the same, so a prober learns nothing of which part was wrong."""
    refused = Refusal(
        Kind.AUTHENTICATION,
        "The LLM gateway takes the sandbox's own token as "
        "the API key; this one is not a live sandbox's.",
    )
    sandbox_id = None if credential is None else token_sandbox(credential.token)
    if credential is None or sandbox_id is None:
        raise refused
    row = await sandboxes.get(sandbox_id)
    if (
        row is None
        or row.status.terminal
        or not token_matches(cipher, credential.token, row.id, row.session_key_hash)
    ):
        raise refused
    return row


def swapped(
    headers: list[tuple[str, str]],
    query: list[tuple[str, str]],
    credential: Credential,
    key: str | None,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """`headers` and `query` with no credential of the sandbox's left and `key` (the user's;
    None: the upstream takes none) where the token was."""
    headers = [(n, v) for n, v in headers if n.lower() not in KEY_HEADERS]
    query = [(n, v) for n, v in query if n != KEY_PARAM]
    if key is not None:
        if credential.place == KEY_PARAM:
            query.append((KEY_PARAM, key))
        else:
            headers.append(
                (credential.place, f"Bearer {key}" if credential.place == "authorization" else key)
            )
    return headers, query
