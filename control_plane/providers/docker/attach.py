"""A container's attach: its keys go in on its stdin, the server's word that it serves comes out
on its stdout.

The provider attaches to a container (stdin and stdout, one stream) before it starts it and
holds that attach until the server is up: a cold start's for a second, a parked container's
until it is claimed. The keys are written on it and its writing half closed, which closes the
container's stdin (StdinOnce): no process of the container reads them again, and nothing else
ever holds them (`containers.hand_over`). The server says it serves on a descriptor that is its
stdout's twin (`container.READY_FD`, `launch.ready`), so the same stream brings that word back
at the moment it is true: nobody asks `/alive` over and over, nobody asks Docker whether the
container still runs (the stream ends when the container does).

Read as Docker multiplexes it (no TTY): frames of an 8-byte header (the stream, then the
payload's length) and the payload. Only a plain socket is read so (a unix socket, or TCP without
TLS): over TLS or SSH the provider asks `/alive` as it always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import select
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from control_plane.providers.containers import close_attach, hand_over
from launch.ready import MAX_BYTES, Ready

#: Docker's header of one frame: the stream (1: stdout), three zero bytes, the payload's length.
HEADER = 8
STDOUT = 1


class Ended(Exception):
    """The container's stream ended before its server said it serves (the container ended)."""


@dataclass
class Attach:
    """The SDK's attach object of one container (stdin and stdout), held until the server is up."""

    held: Any

    @property
    def socket(self) -> socket.socket | None:
        """The plain socket under it, which the event loop can read; None over TLS or SSH."""
        raw = getattr(self.held, "_sock", self.held)
        if isinstance(raw, socket.socket) and not isinstance(raw, ssl.SSLSocket):
            return raw
        return None

    def give(self, keys: bytes) -> None:
        """The keys written, then the writing half closed (the container's stdin ends).
        Blocking."""
        hand_over(self.held, keys)

    async def hand(self, keys: bytes) -> None:
        """`give`, from the event loop where the socket is plain (a few kilobytes on a local
        socket: no worker thread to wait for), else in a worker thread. OSError when the
        container is gone."""
        sock = self.socket
        if sock is None:
            await anyio.to_thread.run_sync(self.give, keys)
            return
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_sendall(sock, keys)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    def ended(self) -> bool | None:
        """Whether the stream has ended (its container with it): what it holds is read and
        dropped (a parked server says nothing before its keys). None when it cannot be told."""
        sock = self.socket
        if sock is None:
            return None
        try:
            while select.select([sock], [], [], 0)[0]:
                if not sock.recv(MAX_BYTES, socket.MSG_DONTWAIT):
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        return False

    async def ready(self) -> bool | None:
        """Until the server says it serves (True) or the stream ends first (`Ended`); None when
        the stream cannot be read here or says something else (its server is asked instead).
        Bounded by the caller's timeout."""
        sock = self.socket
        if sock is None:
            return None
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        frames = bytearray()
        said = bytearray()
        while True:
            chunk = await loop.sock_recv(sock, MAX_BYTES)
            if not chunk:
                raise Ended
            frames += chunk
            while len(frames) >= HEADER:
                size = int.from_bytes(frames[4:HEADER], "big")
                if len(frames) < HEADER + size:
                    break
                if frames[0] == STDOUT:
                    said += frames[HEADER : HEADER + size]
                del frames[: HEADER + size]
            start = said.find(b'{"port"')
            if start >= 0:
                with contextlib.suppress(ValueError):
                    Ready.decode(bytes(said[start:]))
                    return True
            if len(said) > MAX_BYTES or len(frames) > 2 * MAX_BYTES:
                return None

    def close(self) -> None:
        close_attach(self.held)


@dataclass
class Booting:
    """A started container on its way up (a cold start's, or a parked one), as its start found
    it: its attach, its published port, its address on the sandboxes' network."""

    attach: Attach
    port: int
    address: ipaddress.IPv4Address | None
    claimed: bool = False
    """A parked one handed its keys: it takes the sandbox's name while its server starts."""
