"""Addresses: whether a listener is reachable from other hosts."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1); a name or a wildcard is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
