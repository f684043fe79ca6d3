"""The web console: static files under `/` (control_plane/static: HTML, CSS and ES modules, no
build step) and the security headers every answer of the control plane carries.

The console talks to `/api/v1` only, with the account key from the tab's session storage as its
Bearer header. Its Content-Security-Policy allows scripts, styles and connections from this
origin alone, no inline script or style, no plugins, no framing of it, and no form posts
elsewhere; the one frame it holds is a sandbox's web app (`frame-src 'self'`: served under
/sandbox-apps as a sandboxed document, `control_plane.app_urls`);
the scripts render whatever an event holds as text (`textContent`), never as HTML.
"""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(__file__).parent / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)

HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]


def static_files() -> StaticFiles:
    """`/` is index.html; every other file by its path."""
    return StaticFiles(directory=STATIC, html=True)


class SecurityHeaders:
    """Adds HEADERS to every HTTP answer (the API's JSON included: no answer is framable or
    sniffable as something else)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name for name, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *(h for h in HEADERS if h[0] not in present),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)
