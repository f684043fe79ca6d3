"""The sandbox template process this control plane keeps (`agent_server.template`), and asking
it for a sandbox's server.

Started with the process provider when it isolates as root (the template enters namespaces:
root's right), it loads for seconds and then forks each server in moments. Until it is ready,
or when it has died, a sandbox's server is spawned as before: the template only makes starts
faster and sandboxes smaller, never possible. It ends with this control plane (its stdin is a
pipe only we hold), and no sandbox ends with it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

from control_plane.sandboxes.provider import ProviderError
from core import processes

logger = logging.getLogger(__name__)

SOCKET = "template.sock"
LOG = "template.log"
#: A fork answers in milliseconds; this is for a template that hangs.
ANSWER_TIMEOUT = 30.0


class TemplateError(ProviderError):
    """The template could not fork this server (the caller spawns it instead)."""


class Template:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / SOCKET
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Starts loading; `ready` says when it answers."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket.unlink(missing_ok=True)
        with open(self.directory / LOG, "ab") as log:
            os.chmod(self.directory / LOG, 0o600)
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-m", "agent_server.template", "--socket", str(self.socket)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=processes.child_env(quiet=False),
            )

    def revive(self) -> None:
        """A template that died (crashed, killed) is started again; it is spawned around
        meanwhile."""
        if self._process is not None and self._process.poll() is not None:
            logger.warning(
                "the sandbox template exited with status %s; starting it again",
                self._process.returncode,
            )
            self.close()
            self.start()

    @property
    def ready(self) -> bool:
        return self._process is not None and self._process.poll() is None and self.socket.exists()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def fork(
        self,
        *,
        enter: int,
        uid: int,
        cwd: Path,
        env: dict[str, str],
        argv: list[str],
        fds: list[int],
        cgroups: list[Path],
        seccomp: bytes | None = None,
    ) -> int:
        """The host pid of a server forked into the namespaces of `enter` and into `cgroups`,
        held to the `seccomp` filter (a BPF program); `fds` are its stdin, its output, its
        lifeline and the pipe it says it is ready on."""
        request = json.dumps(
            {
                "enter": enter,
                "uid": uid,
                "cwd": str(cwd),
                "env": env,
                "argv": argv,
                "cgroups": [str(g / "cgroup.procs") for g in cgroups],
                "seccomp": base64.b64encode(seccomp or b"").decode(),
            }
        ).encode()
        try:
            answer = await asyncio.wait_for(self._ask(request, fds), ANSWER_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise TemplateError(f"the sandbox template did not answer: {exc!r}") from None
        pid = answer.get("pid")
        if isinstance(pid, int):
            return pid
        raise TemplateError(f"the sandbox template could not fork: {answer.get('error')}")

    async def _ask(self, request: bytes, fds: list[int]) -> dict[str, object]:
        """On this loop, not a thread: a start waits for no thread's turn at the lock."""
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
            connection.setblocking(False)
            await loop.sock_connect(connection, str(self.socket))
            # A few KiB into a new connection's empty buffer: sent at once, never blocking.
            socket.send_fds(connection, [request], fds)
            answer = json.loads(await loop.sock_recv(connection, 64 * 1024) or b"{}")
        return answer if isinstance(answer, dict) else {}

    def close(self) -> None:
        """Ends the template (its stdin closed, then a signal); sandboxes it forked go on."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.socket.unlink(missing_ok=True)
