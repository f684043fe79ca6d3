"""How long the services keep a client's idle connection open between its requests.

A client's pool drops an idle connection after its own expiry (httpx's, 5 s by default: the
OpenHands SDK's, the control plane's to its sandboxes, the sandboxes' webhooks). uvicorn's
default is 5 s as well, so both ran out together: a request sent on a connection in the moment
the server closed it met a reset (`Connection reset by peer`) where an answer was due. Kept
open four times as long, the client always lets go first, and the server's close only ever
ends a connection no one is about to use (`bench/keepalive.py`: of 300 clients sending their
second request 4.9-5.1 s after the first, 7 to 19 met a reset or a close at 5 s, none at 20).
The control plane's is a setting (`keep_alive_seconds`): behind a load balancer, whose idle
timeout is often a minute, it must be longer than the balancer's.
"""

from __future__ import annotations

#: Seconds (uvicorn's `timeout_keep_alive`); an idle connection costs the server a descriptor.
IDLE_SECONDS = 20
