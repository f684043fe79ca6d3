"""The tests' internet: hosts in a network namespace this process makes, and the routes that
keep every sandbox's packet on this machine.

No test sends a packet off this machine. Sandboxes behind the network boundary send theirs
through this host's routing, whose default route leaves the machine; so before any sandbox
exists, the sandbox subnets of this process (`SANDBOXES`, one /16 per pytest worker) are
routed by a rule of their own into a table whose only way out is this namespace, where the
packets end. Public-looking addresses (a quarter of TEST-NET-2 per process, a documentation
range no network routes; not this machine's own, and not TEST-NET-3, where this machine's
package mirrors answer) live there and answer as "the internet":
the scripted LLM, a git daemon, a DNS server (Debian's dnsmasq) that the control plane's
resolver asks instead of this host's.

    internet = Internet.shared()          # made once per process, removed at its exit
    sock = internet.socket(port=0)        # a listening TCP socket on internet.host()
    internet.popen(["git", "daemon", ...])
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import ipaddress
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

CLONE_NEWNET = 0x40000000

_shared: Internet | None = None
_lock = threading.Lock()


#: Processes that may each have an internet at once (their address ranges are apart).
SLOTS = 4
LOCKS = Path("/run/agent-server-tests")


def claim_slot() -> int:
    """A slot no other living process holds (pytest's workers, a second session on the same
    machine), held until this process ends: its namespace, routes and subnets are this
    process's alone, and what a dead holder left is cleared by the next."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    for number in range(SLOTS):
        fd = os.open(LOCKS / f"internet-{number}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return number  # the descriptor stays open: the lock lives as long as the process
    raise RuntimeError(f"{SLOTS} processes hold a test internet already")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


class Internet:
    def __init__(self, number: int) -> None:
        self.number = number
        self.netns = f"tinet-{number}"
        self.veth = f"tinet{number}"
        self.link = ipaddress.IPv4Network(f"10.250.{number}.0/30")
        self.outside = self.link.network_address + 1  # this host's end
        self.inside = self.link.network_address + 2
        #: "Public" addresses of the test hosts: 64 of TEST-NET-2.
        self.public = (ipaddress.IPv4Network(f"198.51.100.{64 * number}/26"),)
        #: The sandbox subnets of this process: each control plane (deployment) gets a /24.
        self.sandboxes = ipaddress.IPv4Network(f"10.{240 + number}.0.0/16")
        self.table = 240 + number
        self._subnets = self.sandboxes.subnets(new_prefix=24)
        self._by_key: dict[str, ipaddress.IPv4Network] = {}
        self._holders: dict[ipaddress.IPv4Network, int] = {}
        self._dns: subprocess.Popen[bytes] | None = None
        self.names: dict[str, list[str]] = {}

    # -- made once, removed at exit -------------------------------------------------------

    @classmethod
    def shared(cls) -> Internet:
        global _shared
        with _lock:
            if _shared is None:
                made = cls(claim_slot())
                made.up()
                atexit.register(made.down)
                _shared = made
            return _shared

    def up(self) -> None:
        self.down()  # what a crashed run left, its deployments' subnets too:
        found = set(_sh("nft", "list", "tables", check=False).stdout.split())
        found.update(os.listdir("/sys/class/net"))
        for subnet in self.sandboxes.subnets(new_prefix=24):
            tag = f"{int(subnet.network_address):08x}"
            if f"as_{tag}" in found or f"asgw{tag}" in found:
                forget_subnet(subnet)
        _sh("ip", "netns", "add", self.netns)
        _sh(
            "ip",
            "link",
            "add",
            self.veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            self.netns,
        )
        _sh("ip", "address", "add", f"{self.outside}/30", "dev", self.veth)
        _sh("ip", "link", "set", self.veth, "up")
        inside = ["ip", "-n", self.netns]
        _sh(*inside, "address", "add", f"{self.inside}/30", "dev", "eth0")
        _sh(*inside, "link", "set", "lo", "up")
        _sh(*inside, "link", "set", "eth0", "up")
        # No route out of here but the link itself: sandboxes' traffic arrives masqueraded to
        # this host's end, so answers go back; whatever else is sent here ends here.
        for network in self.public:
            _sh(*inside, "address", "add", str(network), "dev", "lo")
            _sh("ip", "route", "add", str(network), "via", str(self.inside))
        # Every packet from a sandbox of this process: its own subnets as usual, anything
        # else into the namespace above, never out by this host's default route.
        _sh("ip", "route", "add", "throw", str(self.sandboxes), "table", str(self.table))
        _sh("ip", "route", "add", "default", "via", str(self.inside), "table", str(self.table))
        _sh(
            "ip",
            "rule",
            "add",
            "from",
            str(self.sandboxes),
            "lookup",
            str(self.table),
            "priority",
            str(1000 + self.number),
        )
        self.names = {
            "allowed.test": [self.host(10)],
            "other.test": [self.host(11)],
            "api.allowed.test": [self.host(12)],
            "cdn.test": [self.host(13)],
            "rebind.test": ["127.0.0.1", "10.1.2.3"],
            "metadata.test": ["169.254.169.254"],
            "mixed.test": [self.host(14), "192.168.1.1"],
            "git.test": [self.host(20)],
            "llm.test": [self.host(21)],
        }
        self._start_dns()

    def _start_dns(self) -> None:
        args = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "dnsmasq",
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--no-daemon",
            "--bind-interfaces",
            f"--listen-address={self.dns}",
            "--port=53",
            "--user=root",
            "--log-facility=/dev/null",
            "--cache-size=0",
        ]
        for name, addresses in self.names.items():
            args += [f"--host-record={name},{address}" for address in addresses]
        self._dns = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):  # up once its port answers
            if self._dns.poll() is not None:
                raise RuntimeError("dnsmasq did not start in the test internet")
            probe = _sh(
                "ip",
                "netns",
                "exec",
                self.netns,
                "sh",
                "-c",
                "grep -q ':0035 ' /proc/net/udp",
                check=False,
            )
            if probe.returncode == 0:
                return
            threading.Event().wait(0.01)
        raise RuntimeError("dnsmasq did not listen in the test internet")

    def down(self) -> None:
        if self._dns is not None:
            self._dns.kill()
            self._dns.wait(10)
            self._dns = None
        for priority in (1000 + self.number, 1100 + self.number):
            while _sh("ip", "rule", "del", "priority", str(priority), check=False).returncode == 0:
                pass
        _sh("ip", "route", "flush", "table", str(self.table), check=False)
        for network in self.public:
            _sh("ip", "route", "del", str(network), check=False)
        _sh("ip", "link", "del", self.veth, check=False)
        _sh("ip", "netns", "del", self.netns, check=False)
        for key, subnet in self._by_key.items():
            if shutil.which("docker"):
                forget_docker_network(self.docker_network(key))
            forget_subnet(subnet)

    # -- what tests use ----------------------------------------------------------------------

    def host(self, index: int = 1) -> str:
        """A public address in here (1..62)."""
        return str(self.public[0].network_address + index)

    @property
    def dns(self) -> str:
        return self.host(53)

    def subnet(self, key: str) -> ipaddress.IPv4Network:
        """The sandbox subnet of one deployment (`key`: its database), the same for every
        control plane of it, another for each other one."""
        with _lock:
            if key not in self._by_key:
                self._by_key[key] = next(self._subnets)
            return self._by_key[key]

    def hold(self, subnet: ipaddress.IPv4Network) -> None:
        """A control plane of the deployment on `subnet` runs (see `release`)."""
        with _lock:
            self._holders[subnet] = self._holders.get(subnet, 0) + 1

    def release(self, subnet: ipaddress.IPv4Network, forget: bool) -> None:
        """A control plane of it stopped; the last one's stop with `forget` (its sandboxes
        stopped with it) removes what the deployment left on this host. Left, a test's
        tables add up over a session, and nftables reads every table for some questions."""
        with _lock:
            left = self._holders.get(subnet, 1) - 1
            self._holders[subnet] = left
        if left <= 0 and forget:
            forget_subnet(subnet)

    @contextlib.contextmanager
    def contained(self, source: str) -> Iterator[None]:
        """Meanwhile, what `source` (a docker-in-docker swarm worker's address) sends is routed
        as the sandboxes' is: into this namespace, never out by this host's default route."""
        priority = str(1100 + self.number)
        _sh("ip", "rule", "add", "from", source, "lookup", str(self.table), "priority", priority)
        try:
            yield
        finally:
            _sh(
                "ip",
                "rule",
                "del",
                "from",
                source,
                "lookup",
                str(self.table),
                "priority",
                priority,
                check=False,
            )

    def docker_network(self, key: str) -> str:
        """The Docker network of one deployment (`key`, as for `subnet`): two deployments on
        one network would share its gateway's resolver, which knows only its own sandboxes."""
        return f"agent-sandboxes-t{self.number}-{self.subnet(key).network_address.packed[2]}"

    def socket(
        self, port: int = 0, host: str | None = None, kind: socket.SocketKind = socket.SOCK_STREAM
    ) -> socket.socket:
        """A socket bound (and listening, for TCP) on one of the internet's addresses."""
        with self.entered():
            sock = socket.socket(socket.AF_INET, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or self.host(), port))
        if kind == socket.SOCK_STREAM:
            sock.listen(64)
        return sock

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This thread in the internet's namespace meanwhile (a socket made there stays
        there). Network namespaces are per thread; the thread is put back after."""
        libc = ctypes.CDLL(None, use_errno=True)
        ours = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        theirs = os.open(Path("/run/netns") / self.netns, os.O_RDONLY)
        try:
            if libc.setns(theirs, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the test internet")
            try:
                yield
            finally:
                if libc.setns(ours, CLONE_NEWNET) != 0:
                    os._exit(70)  # this thread would go on in the wrong namespace
        finally:
            os.close(ours)
            os.close(theirs)

    def popen(self, argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
        """A program run in the internet's namespace."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], **kw)  # type: ignore[call-overload, no-any-return]


def forget_docker_network(name: str) -> None:
    """A test deployment's Docker network, and its fence's table, once no container is on it
    (Docker refuses to remove one in use: another control plane of it still runs)."""
    found = _sh("docker", "network", "inspect", "--format", "{{.Id}}", name, check=False)
    if found.returncode != 0 or not found.stdout.strip():
        return
    if _sh("docker", "network", "rm", name, check=False).returncode == 0:
        _sh("nft", "delete", "table", "inet", f"as_d{found.stdout.strip()[:12]}", check=False)


def forget_subnet(subnet: ipaddress.IPv4Network) -> None:
    """What a control plane left on this host for a sandbox subnet (its gateway's holder, the
    subnet's unreachable route, its nftables table and DOCKER-USER rules): a test's
    deployment is gone for good."""
    tag = f"{int(subnet.network_address):08x}"
    _sh("ip", "link", "del", f"asgw{tag}", check=False)
    _sh("ip", "route", "del", "unreachable", str(subnet), check=False)
    _sh("nft", "delete", "table", "inet", f"as_{tag}", check=False)
    listing = _sh("nft", "-a", "list", "chain", "ip", "filter", "DOCKER-USER", check=False).stdout
    for line in listing.splitlines():
        if f'comment "as_{tag}"' in line and "# handle " in line:
            handle = line.rsplit("# handle ", 1)[1].strip()
            _sh(
                "nft",
                "delete",
                "rule",
                "ip",
                "filter",
                "DOCKER-USER",
                "handle",
                handle,
                check=False,
            )


class Listener:
    """A host that records who reached it: TCP connections accepted (and answered with a line,
    then closed) or UDP datagrams received, on one socket, served by a thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.address = sock.getsockname()
        self.seen: list[tuple[str, int]] = []
        self._tcp = sock.type == socket.SOCK_STREAM
        sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="test host")
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                if self._tcp:
                    connection, peer = self.sock.accept()
                    with connection:
                        connection.sendall(b"hello from the test internet\n")
                else:
                    _, peer = self.sock.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            self.seen.append((str(peer[0]), int(peer[1])))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
