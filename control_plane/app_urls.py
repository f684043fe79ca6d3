"""The web apps a sandbox serves on its ports (a dev server the agent started), opened by a
person's browser through this control plane: the links, and what crosses the proxy.

A browser cannot send the account key to an iframe or a new tab, and cookies do not work
either: the app's pages are served as a CSP sandbox (an opaque origin, so that they cannot read
the console's storage, which holds the key), and Chromium sends no cookie, not even a
SameSite=None one, with the subresource requests of such a page. So the credential is in the
path: `/sandbox-apps/{sandbox id}/{port}/{capability}/…`, where the capability is
`<expiry>.<MAC>`, an HMAC (a key derived from the control plane's secret key) of the sandbox's
owner, the sandbox, the port and the expiry. It opens that one port of that one sandbox, for
CAPABILITY_SECONDS, while the sandbox is still its owner's and running; it is minted only for
the owner's account key, so another user's key, or no key, never gets one, and a capability
for one port or sandbox opens no other. The app's relative links keep it (they resolve under
the same prefix); its absolute paths (`/app.js`) leave the prefix and are not the app's: a
documented limit.

What crosses is held to the app: the target is always `http://<the sandbox's own address>:
<port>` (never a host or port taken from the request; the agent server's port is refused), the
request carries only content headers (never the account key, a cookie, a session key or the
console's origin), redirects are not followed, and the answer keeps only content headers
(no Set-Cookie, no Clear-Site-Data, no caching or security policy of its own) and gets
APP_CSP: a sandboxed document that may reach its own URL space alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from control_plane.crypto import Cipher

#: Where the apps are served, under the console's origin.
PREFIX = "/sandbox-apps"
#: How long a link opens its app.
CAPABILITY_SECONDS = 3600
#: The ports an app may be on: an unprivileged one (its agent server's is refused besides).
MIN_PORT, MAX_PORT = 1024, 65535
#: The exposed URLs an API client is given besides AGENT_SERVER: the OpenHands app server's
#: names and ports for the web apps a sandbox serves.
WORKERS = (("WORKER_1", 8011), ("WORKER_2", 8012))
CAPABILITY = re.compile(r"^([0-9]{1,12})\.([A-Za-z0-9_-]{43})$")

#: The proxied app's policy: a sandboxed document (an opaque origin: the console's storage,
#: cookies and API are not its own), framed by the console only, reaching its own URL space and
#: inline code alone (no other host: an app cannot send what it shows anywhere else).
APP_CSP = (
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads; "
    "default-src 'self' data: blob: 'unsafe-inline' 'unsafe-eval'; connect-src 'self'; "
    "frame-ancestors 'self'; base-uri 'self'; form-action 'self'"
)
#: Headers of the browser's request that reach the app; nothing else does.
REQUEST_HEADERS = frozenset(
    {
        "accept",
        "accept-language",
        "content-type",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "range",
        "user-agent",
    }
)
#: Headers of the app's answer that reach the browser; nothing else does.
RESPONSE_HEADERS = frozenset(
    {
        "content-type",
        "content-language",
        "content-range",
        "accept-ranges",
        "etag",
        "last-modified",
    }
)


class AppLinks:
    """Mints and checks the capabilities of app links (`<expiry>.<MAC>`)."""

    def __init__(self, cipher: Cipher) -> None:
        self._key = cipher.derive("sandbox-app")

    def _mac(self, owner: str, sandbox_id: str, port: int, expires: int) -> str:
        message = f"{owner}\n{sandbox_id}\n{port}\n{expires}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def mint(self, owner: str, sandbox_id: str, port: int, now: datetime) -> tuple[str, datetime]:
        """The link's path (ending in `/`) and when it stops opening the app."""
        expires = now + timedelta(seconds=CAPABILITY_SECONDS)
        stamp = int(expires.timestamp())
        capability = f"{stamp}.{self._mac(owner, sandbox_id, port, stamp)}"
        return f"{base_path(sandbox_id, port, capability)}/", expires

    def check(self, capability: str, owner: str, sandbox_id: str, port: int, now: datetime) -> bool:
        """Whether `capability` opens this port of this sandbox of `owner`'s, now."""
        found = CAPABILITY.match(capability)
        if found is None:
            return False
        stamp = int(found.group(1))
        expected = self._mac(owner, sandbox_id, port, stamp)
        return hmac.compare_digest(expected, found.group(2)) and now.timestamp() < stamp


_LOGGED = re.compile(r"^(" + re.escape(PREFIX) + r"/[^/]*/[^/]*/)([^/]*)")


def logged(path: str) -> str:
    """`path` as the access log may show it: an app link's capability (it opens the app for
    an hour) left out."""
    return _LOGGED.sub(r"\1…", path)


def base_path(sandbox_id: str, port: int, capability: str) -> str:
    return f"{PREFIX}/{sandbox_id}/{port}/{capability}"


def valid_port(port: int, agent_port: int | None) -> bool:
    return MIN_PORT <= port <= MAX_PORT and port != agent_port


def request_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """What of the browser's request goes to the app: content headers only, and no
    compression (the answer is passed on as it comes)."""
    kept = {name.lower(): value for name, value in headers if name.lower() in REQUEST_HEADERS}
    return {**kept, "accept-encoding": "identity"}


def response_headers(
    headers: Iterable[tuple[str, str]], base: str, host: str, port: int
) -> list[tuple[str, str]]:
    """What of the app's answer goes to the browser (`base`: the link's path without its
    trailing slash), with a redirect inside the app kept inside its link."""
    kept = [(n.lower(), v) for n, v in headers if n.lower() in RESPONSE_HEADERS]
    for name, value in headers:
        if name.lower() == "location":
            kept.append(("location", location(value, base, host, port)))
    return kept


def location(value: str, base: str, host: str, port: int) -> str:
    """A redirect of the app: its own paths (`/x`, `http://<its address>:<port>/x`) under its
    link; anything else (another site) as it is, for the browser to follow or not."""
    parts = urlsplit(value)
    if not parts.scheme and not parts.netloc and value.startswith("/"):
        return base + value
    if parts.scheme == "http" and parts.hostname == host and parts.port == port:
        rest = value.split(parts.netloc, 1)[1] or "/"
        return base + rest
    return value


def security_headers() -> list[tuple[str, str]]:
    """Every answer under PREFIX (the app's, or a refusal): a sandboxed document framed by the
    console alone. Its subresources are requested by an opaque origin, which a
    Cross-Origin-Resource-Policy of same-origin would refuse: the link is the credential, so
    `cross-origin` and `Access-Control-Allow-Origin: *` open nothing the link does not."""
    return [
        ("content-security-policy", APP_CSP),
        ("x-frame-options", "SAMEORIGIN"),
        ("cross-origin-resource-policy", "cross-origin"),
        ("access-control-allow-origin", "*"),
        ("referrer-policy", "no-referrer"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "private, no-store"),
    ]
