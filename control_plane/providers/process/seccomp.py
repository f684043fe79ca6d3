"""The system calls a process sandbox's code is refused: the kernel surface Docker's default
seccomp profile closes to a container without privileges, as one filter built by libseccomp
(through `pyseccomp`, its ctypes bindings) and handed to bubblewrap (`--seccomp`) or loaded by
a server forked from the template (`core.namespaces.confine`).

Refused with EPERM: new namespaces of any kind (`unshare`, `setns`, and `clone` with a namespace
flag: no nested user namespace, in which tmpfs and cgroup mounts would work), every mount call,
kernel modules and kexec, the kernel's keyring, BPF, perf events, userfaultfd, io_uring, file
handles (`open_by_handle_at`, the container escape of 2014), the clocks, swap, reboot, quotas,
accounting, the kernel log, I/O ports and NUMA placement. `clone3`, whose flags a filter cannot
read, is answered ENOSYS, so the C library falls back on `clone`. Everything else is allowed
(ptrace included, as Docker allows it on current kernels: an agent debugs its programs).
System calls of another architecture (32-bit calls on x86-64) end the process, as a profile
that lists the native ones only does.

gVisor's sandboxes do not take it: their system calls are served by gVisor's own kernel.
"""

from __future__ import annotations

import errno
import functools
import tempfile

import pyseccomp as seccomp

#: Refused outright (EPERM), where the kernel knows them.
REFUSED = (
    # namespaces and mounts
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # the kernel itself
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "lookup_dcookie",
    "uselib",
    "vhangup",
    "iopl",
    "ioperm",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "add_key",
    "keyctl",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "mbind",
    "migrate_pages",
    "move_pages",
    "set_mempolicy",
)
#: `clone` flags that make a namespace (CLONE_NEWNS, _NEWCGROUP, _NEWUTS, _NEWIPC, _NEWUSER,
#: _NEWPID, _NEWNET, _NEWTIME).
NAMESPACE_FLAGS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
    0x00000080,
)


@functools.cache
def program() -> bytes:
    """The filter as a BPF program (what `bwrap --seccomp` reads and prctl loads), built once."""
    allowed = seccomp.SyscallFilter(seccomp.ALLOW)
    refuse = seccomp.ERRNO(errno.EPERM)
    for name in REFUSED:
        try:
            allowed.add_rule(refuse, name)
        except (ValueError, RuntimeError, OSError):  # not a system call of this kernel's ABI
            continue
    for flag in NAMESPACE_FLAGS:
        allowed.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    allowed.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        allowed.export_bpf(out)
        out.seek(0)
        return out.read()
