"""The TLS context of this process's HTTP clients, made once.

Reading the system's CA bundle takes 75-90 ms each time a client makes its own context (more
on a loaded host), and a server made two of them at start (its model's, its webhook's); a
context serves any number of connections and clients, and a server forked from the sandbox
template inherits the template's (it holds the public CA bundle, nothing of a sandbox).
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def client_context() -> ssl.SSLContext:
    """httpx's default context (the system's CA bundle, or SSL_CERT_FILE's)."""
    import httpx

    return httpx.create_ssl_context()
