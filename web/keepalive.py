"""How long the services keep a client's idle connection open between its requests.

A client's pool drops an idle connection after its own expiry (httpx's, 5 s by default: the
OpenHands SDK's, the control plane's to its sandboxes, the sandboxes' webhooks). uvicorn's
default is 5 s as well, so both ran out together: a request sent on a connection in the moment
the server closed it met a reset (`Connection reset by peer`) where an answer was due. Kept
open four times as long, the client always lets go first, and the server's close only ever
ends a connection no one is about to use.
"""

from __future__ import annotations

#: Seconds (uvicorn's `timeout_keep_alive`); an idle connection costs the server a descriptor.
IDLE_SECONDS = 20
