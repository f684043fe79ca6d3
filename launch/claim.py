"""A warm pool's one-time claim: how a parked server that nobody's stdin reaches gets its keys.

A Swarm pool's parked service (`python -m agent_server.warm --claim LIFELINE`) finds a claim
token, not keys, on its keys' descriptor: the `secret` here, in the service's Docker secret.
Its port then takes one request before the server serves there: `POST /claim` with `headers`
(the token as a Bearer credential) and the keys (`launch.keys`) as its body. `GET /parked` is
the pool's sign of life, answered 204 while the server waits.
"""

from __future__ import annotations

import hmac
import json

CLAIM = "/claim"
PARKED = "/parked"
#: The shortest token a parked server takes.
MIN_TOKEN = 16


class WeakToken(ValueError):
    """The secret holds a claim that is not a string of MIN_TOKEN characters or more."""


def secret(token: str) -> bytes:
    """What the parked server reads on its keys' descriptor."""
    return json.dumps({"claim": token}).encode()


def token_of(data: bytes) -> str:
    """The token of a `secret`: ValueError when `data` is not one, WeakToken when its token
    is too weak to guard the keys."""
    try:
        token = json.loads(data)["claim"]
    except (KeyError, TypeError):
        raise ValueError('expected {"claim": "<token>"}') from None
    if not isinstance(token, str) or len(token) < MIN_TOKEN:
        raise WeakToken(f"the claim token must be a string of {MIN_TOKEN} or more")
    return token


def headers(token: str) -> dict[str, str]:
    """The claim's headers (its body is the keys)."""
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def authorized(authorization: str, token: str) -> bool:
    """Whether a request's Authorization header carries `token` (in constant time)."""
    return hmac.compare_digest(authorization.removeprefix("Bearer ").encode(), token.encode())
