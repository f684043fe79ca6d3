"""GETs to a local server from loops that wait for it, through one client.

A new httpx client (what `httpx.get` makes for each call) loads the CA bundle: about 25 ms of
CPU, paid again at every poll of a loop that asks every 20 ms, on the same two cores as the
server it waits for. No connection is kept: the server polled may be stopped and another
started on its port.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx


@functools.cache
def _client() -> httpx.Client:
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def get(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.get(url, **kwargs)`, without a client of its own."""
    return _client().get(url, **kwargs)
