"""A sandbox's namespaces, as bubblewrap made them: joined by a forked server, and what runs in
them found again.

A sandbox's server may be forked from a template process that has already imported the server
(`agent_server.template`): the fork is born in the sandbox's pid namespace and enters the others
bubblewrap built for it (its mounts, its ipc and host name) the way `nsenter` does, and drops to the
sandbox's user with what `setpriv` is told for a spawned server (no groups, no capabilities, not
even in the bounding set, no new privileges). bubblewrap still makes the sandbox; this only goes in.

Whatever runs in a sandbox shares its pid namespace, and only it does: that, not a process
group or session (a fork of the template is in neither of bubblewrap's), names the sandbox's
processes for signals.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

#: The kinds a sandbox has of its own (bubblewrap's, and the network namespace the control
#: plane made for it), the mount namespace last: once in it, /proc is the sandbox's.
FLAGS = {
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "cgroup": 0x02000000,
    "net": 0x40000000,
    "pid": 0x20000000,
    "mnt": 0x00020000,
}
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


class Entry:
    """The namespaces of a process that differ from ours, opened (so the process may go while
    they are used, and a pid reused meanwhile names nothing here); closed with `close`."""

    def __init__(self, pid: int) -> None:
        self.fds: dict[str, int] = {}
        try:
            for kind in FLAGS:
                if namespace(pid, kind) != namespace(os.getpid(), kind):
                    self.fds[kind] = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def children(self) -> Iterator[None]:
        """Processes forked meanwhile are born in the pid namespace (this process stays in
        its own, and its later children are born in it again). Root's right."""
        fd = self.fds.get("pid")
        if fd is None:
            yield
            return
        ours = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(_libc().setns(fd, FLAGS["pid"]), "setns(pid)")
            try:
                yield
            finally:
                if _libc().setns(ours, FLAGS["pid"]) != 0:
                    # Every later child would be born in that sandbox: nothing may fork here.
                    os._exit(70)
        finally:
            os.close(ours)

    def join(self) -> None:
        """This process into the namespaces but the pid one (`children` is how a process is
        born there): a single-threaded process, as a fresh fork is. The working directory is
        then the mount namespace's root."""
        libc = _libc()
        for kind, fd in self.fds.items():
            if kind != "pid":
                _check(libc.setns(fd, FLAGS[kind]), f"setns({kind})")

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def drop_to(uid: int) -> None:
    """Root to `uid` for good: the bounding set emptied, no supplementary groups, the ids
    changed (which clears the permitted and effective sets), the inheritable set cleared, and
    no execve may grant privileges again."""
    libc = _libc()
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for capability in range(last + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def confine(program: bytes) -> None:
    """The seccomp filter `program` (a BPF program, 8 bytes an instruction, as libseccomp
    exports it and `bwrap --seccomp` reads it) on this process and all it starts: what a
    spawned server gets from bubblewrap. After `drop_to` (no new privileges), single-threaded."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        _libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


def namespace(pid: int, kind: str = "pid") -> str | None:
    """The namespace of that kind process `pid` is in (`pid:[4026531836]`); None when gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def members(pid_namespace: str) -> list[int]:
    """The processes in that pid namespace (host pids)."""
    found = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() and namespace(int(entry.name)) == pid_namespace:
                found.append(int(entry.name))
    return found


def signal_all(pid_namespace: str, sig: int) -> list[int]:
    """`sig` to every process in the namespace; those it reached."""
    reached = []
    for pid in members(pid_namespace):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            reached.append(pid)
    return reached
