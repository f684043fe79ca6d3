"""This sandbox's network as its control plane sees it: the egress policy it is held to and
what that policy refused it lately (`GET <AGENT_SERVER_NETWORK_URL>` with the sandbox's own
Bearer token, both handed over the keys pipe).

Why the agent server asks: a connection the boundary refuses fails at once (a TCP reset, an
ICMP admin-prohibited), which a program reports as "connection refused" or "network is
unreachable", the same words as for a service that is down. A model reading only that retries,
or debugs the service. Told that the sandbox's policy refused it, and what the policy allows,
it can change course. So the terminal asks under a command that failed (`NetworkNotes` in
`tools.base`), and /metrics reports the control plane's count of refusals.

What holds here:

- Advice, never a failure: every call answers within `TIMEOUT` seconds whatever the control
  plane does, and never raises into its caller. No answer, a refusal, or a body that is not
  the state means "nothing to say".
- Bounded: the answer is read up to `MAX_BODY` bytes, its lists cut to what a note shows.
- The token goes in one header of one client and nowhere else: no log line, no event, no repr
  (the config masks it in events with the server's other keys).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from agent_server import __version__, tls

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

#: Seconds one look at the state may take, all of it (connect, send, wait, read): a failed
#: command's observation, or a scrape, waits no longer for it.
TIMEOUT = 2.0
#: Bytes of an answer read at most (the control plane's answer is well under 10 KiB).
MAX_BODY = 256 * 1024
#: Seconds of slack around a command's run: `seconds_ago` is whole seconds, counted on another
#: machine's clock from a moment a little before or after the command's own.
SLACK = 1.0
#: Destinations one note lists, and rules of the allow list it shows; the rest are counted.
MAX_LISTED = 10
MAX_SHOWN_RULES = 20
#: Items of the answer's lists kept (the control plane lists 50 refusals and 256 rules at most).
MAX_RECENT = 100
MAX_RULES = 256


def _first(limit: int) -> Any:
    """Keeps a list's first `limit` items (a longer one is cut, not refused: what is kept is
    still true)."""
    return BeforeValidator(lambda value: value[:limit] if isinstance(value, list) else value)


class Refusal(BaseModel):
    """One destination the policy refused, as the control plane remembers it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    address: str = Field(max_length=64)
    protocol: str = Field(max_length=16)
    port: int = Field(ge=0, le=65535)
    seconds_ago: float = Field(ge=0)
    """Since it was last refused."""

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.protocol} {host}:{self.port}"


class Policy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    mode: Literal["open", "allowlist", "none"]
    allow: Annotated[tuple[Annotated[str, Field(max_length=512)], ...], _first(MAX_RULES)] = ()


class NetworkState(BaseModel):
    """What the control plane answers (fields it may add later are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    policy: Policy
    enforced: bool = False
    """Whether a network boundary holds the sandbox to its policy."""
    refused: int | None = Field(default=None, ge=0)
    """Connections (and datagrams) the policy refused while the sandbox ran; None where
    nothing enforces it."""
    recent: Annotated[tuple[Refusal, ...], _first(MAX_RECENT)] = ()
    """The distinct destinations refused in the last ten minutes, the latest first."""


#: What each mode lets through, as the note says it.
ALLOWS = {
    "open": "It allows the public internet; never this machine, private or link-local ranges, "
    "or other sandboxes.",
    "none": "It allows no connection beyond the control plane.",
}
NEVER = "Other hosts, this machine, private ranges and other sandboxes are never reachable."


def note(state: NetworkState, within: float) -> str | None:
    """The line for a command that ran `within` seconds: the destinations refused meanwhile
    and what the policy allows; None when none was refused in that window."""
    refused = [r for r in state.recent if r.seconds_ago <= within + SLACK]
    if not refused:
        return None
    listed = ", ".join(str(r) for r in refused[:MAX_LISTED])
    if len(refused) > MAX_LISTED:
        listed += f" and {len(refused) - MAX_LISTED} more"
    what = "1 destination" if len(refused) == 1 else f"{len(refused)} destinations"
    policy = state.policy
    return (
        f"[This sandbox's network policy ({policy.mode}) refused connections to {what} "
        f"during this command: {listed}. {_allows(policy)}]"
    )


def _allows(policy: Policy) -> str:
    if policy.mode != "allowlist":
        return ALLOWS[policy.mode]
    if not policy.allow:
        return f"Its allow list is empty. {NEVER}"
    shown = ", ".join(policy.allow[:MAX_SHOWN_RULES])
    if len(policy.allow) > MAX_SHOWN_RULES:
        shown += f" and {len(policy.allow) - MAX_SHOWN_RULES} more"
    return f"It allows only, over TCP: {shown}. {NEVER}"


class NetworkClient:
    """Asks the control plane for this sandbox's network state; one connection pool, kept.

    It is the terminal's `tools.base.NetworkNotes` (`refused`) and the source of
    agent_server_network_refused_total (`refresh`, then `last_refused`).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        import httpx  # only a server in a sandbox with a boundary pays for importing it

        self.url = url
        self.timeout = timeout
        #: The refusal count of the newest answer (None until one says it).
        self.last_refused: int | None = None
        self._asked = 0  # looks started, and the newest one whose answer was kept:
        self._kept = 0  # an older answer arriving late does not replace a newer one
        self._failing = False  # the last look failed (said once at warning level, not each time)
        self._http = httpx.AsyncClient(
            transport=transport,
            verify=tls.client_context(),
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=1),
            headers={
                "authorization": f"Bearer {token}",
                "user-agent": f"agent-server/{__version__}",
            },
            follow_redirects=False,
        )

    async def state(self) -> NetworkState | None:
        """The state now; None when the control plane gives none within the timeout."""
        self._asked += 1
        number = self._asked
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._get()
            state = None if body is None else NetworkState.model_validate_json(body)
        except TimeoutError:
            self._failed(f"no answer within {self.timeout:g} s")
            return None
        except ValidationError as exc:
            self._failed(f"not the state ({exc.error_count()} errors)")
            return None
        except Exception as exc:  # httpx's errors, and any other: advice must never fail a call
            self._failed(type(exc).__name__)
            return None
        if state is None:
            return None
        if self._failing:
            self._failing = False
            logger.info("the network state is available again")
        if number > self._kept:
            self._kept = number
            if state.refused is not None:
                self.last_refused = state.refused
        return state

    def _failed(self, why: str) -> None:
        logger.log(
            logging.DEBUG if self._failing else logging.WARNING,
            "the network state from %s is unavailable: %s",
            self.url,
            why,
        )
        self._failing = True

    async def refused(self, within: float) -> str | None:
        """`tools.base.NetworkNotes`: the note for a command that ran `within` seconds."""
        state = await self.state()
        return None if state is None else note(state, within)

    async def refresh(self) -> None:
        """Read the state so `last_refused` is current (before a scrape)."""
        await self.state()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get(self) -> bytes | None:
        """The body of a 200 answer, or None (another status, or more than MAX_BODY)."""
        async with self._http.stream(
            "GET", self.url, headers={"accept": "application/json"}
        ) as response:
            if response.status_code != 200:
                self._failed(f"answered {response.status_code}")
                return None
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY:
                    self._failed(f"over {MAX_BODY} bytes")
                    return None
            return bytes(body)


__all__ = ["NetworkClient", "NetworkState", "Policy", "Refusal", "note"]
