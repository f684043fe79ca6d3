"""Docker for the tests: a daemon (started when installed but not running), and the sandbox
image built from nothing but Debian packages, since no image registry is reachable here.

The base image is made the way a distribution is: `debootstrap` a minimal Debian into a root
file system, made as slim as debian:bookworm-slim (`slim`), `docker import` it, then add
Python with apt (`debian-python.Dockerfile`). sandbox.Dockerfile is then built on it (`BASE_IMAGE`),
without Chromium (the tests never browse inside a container). Each step is cached: the root file
system's tarball and the imported image under a key of everything that makes them, and the
builds in Docker's layer cache, so only the first run of a machine pays (about 1.5 minutes on
two cores; a rebuild after a code change takes seconds). Builds use the host's network.

Whatever the host's package clients need to reach PyPI from inside a build (an intercepting
proxy's CA, an index URL, proxy variables) is plumbing of these tests: it goes into the test
base image and the build arguments, never into sandbox.Dockerfile.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "docker"
SOCKET = Path("/var/run/docker.sock")
SUITE = "bookworm"
BASE_DOCKERFILE = Path(__file__).with_name("debian-python.Dockerfile")
#: Tagged by the checkout it is built from: test sessions of other checkouts on this machine
#: build theirs beside it, never over it.
SANDBOX_IMAGE = "agent-server-test/sandbox:" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
#: Proxy variables Docker passes into every build without a matching ARG.
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
)


class Unavailable(Exception):
    """Docker cannot be used here; the message is the skip reason."""


def client(sock: Path = SOCKET) -> docker.DockerClient:
    """A client of the local daemon, its API version negotiated (the daemon may be older)."""
    return docker.DockerClient(base_url=f"unix://{sock}", version="auto", timeout=300)


def _answers(sock: Path) -> bool:
    """Whether a daemon answers `/_ping` on `sock`. A plain socket, closed whatever happens: a
    DockerClient whose version negotiation fails in its constructor, and httpcore's unix-socket
    connect when the connect fails, both leave their socket open."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(str(sock))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return conn.recv(64).split(b" ", 2)[1:2] == [b"200"]
    except OSError:
        return False


@dataclass
class Daemon:
    """The Docker daemon of the test session; `proc` is set when this session started it."""

    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def ensure(
        cls, log: Path, timeout: float = 60, sock: Path = SOCKET, args: tuple[str, ...] = ()
    ) -> Daemon:
        """`sock`, `args`: another daemon beside the system's (its own data and exec roots)."""
        if _answers(sock):
            return cls()
        if sock.exists() and not os.access(sock, os.R_OK | os.W_OK):
            raise Unavailable(f"Docker runs, but this user may not use {sock} (the docker group)")
        if shutil.which("dockerd") is None:
            raise Unavailable(
                "Docker is not installed (`.ci/run` installs Debian's docker.io; "
                "`apt-get install docker.io` here)"
            )
        if os.geteuid() != 0:
            raise Unavailable("dockerd is installed but not running, and starting it needs root")
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                ["dockerd", "--host", f"unix://{sock}", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _answers(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = log.read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"dockerd did not come up (exit {proc.poll()}):\n{tail}")
            time.sleep(0.2)
        return cls(proc)

    def stop(self) -> None:
        """Only a daemon this session started is stopped (with its containerd)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


#: gVisor as Docker runs it here: the ptrace platform (KVM hangs in a nested VM), socket calls
#: passed to the container's own network namespace (gVisor's netstack refuses to start in one
#: Docker made): ../docs/gvisor.md.
RUNSC = {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=host"]}
DAEMON_JSON = Path("/etc/docker/daemon.json")
PIDFILE = Path("/var/run/docker.pid")


def ensure_runtime(name: str = "runsc", spec: dict[str, object] = RUNSC) -> None:
    """`name` registered with the daemon, as docs/gvisor.md says to: added to its daemon.json
    (kept otherwise as it was) and the daemon told to read it again (SIGHUP: running
    containers go on)."""
    with contextlib.closing(client()) as c:
        if name in (c.info().get("Runtimes") or {}):
            return
    if not Path(str(spec["path"])).exists():
        raise Unavailable(f"{spec['path']} is not installed (`.ci/run` installs Debian's runsc)")
    if os.geteuid() != 0:
        raise Unavailable("registering a Docker runtime needs root (daemon.json)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "daemon-json.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = json.loads(DAEMON_JSON.read_text() or "{}") if DAEMON_JSON.exists() else {}
        current.setdefault("runtimes", {})[name] = spec
        DAEMON_JSON.parent.mkdir(parents=True, exist_ok=True)
        partial = DAEMON_JSON.with_suffix(".partial")
        partial.write_text(json.dumps(current, indent=2) + "\n")
        partial.replace(DAEMON_JSON)
        os.kill(int(PIDFILE.read_text().strip()), signal.SIGHUP)
    deadline = time.monotonic() + 30
    with contextlib.closing(client()) as c:
        while name not in (c.info().get("Runtimes") or {}):
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not take the {name} runtime from {DAEMON_JSON}")
            time.sleep(0.2)


def bridge_gateway(c: docker.DockerClient) -> str:
    """The host's address on Docker's default bridge (what host.docker.internal resolves to)."""
    attrs = c.networks.get("bridge").attrs
    for config in attrs["IPAM"]["Config"] or []:
        if config.get("Gateway"):
            return str(config["Gateway"])
    # A default bridge lists no gateway: it is the bridge interface's own address.
    device = (attrs.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    shown = (
        subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "dev", device], capture_output=True, text=True
        ).stdout.split()
        if shutil.which("ip")
        else []
    )
    return shown[shown.index("inet") + 1].split("/")[0] if "inet" in shown else "172.17.0.1"


# -- the host's package plumbing ----------------------------------------------------------------


def debian_mirror() -> str:
    """The host's Debian mirror, from its apt sources (deb822 or one-line form)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            uri = (
                words[1]
                if len(words) > 1 and words[0] == "URIs:"
                else words[1]
                if len(words) > 2 and words[0] == "deb" and not words[1].startswith("[")
                else ""
            )
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return "http://deb.debian.org/debian"


def _pip_settings() -> dict[str, str]:
    """pip's settings on this host (its config files, then PIP_* variables)."""
    found: dict[str, str] = {}
    parser = configparser.ConfigParser()
    parser.read(
        [
            "/etc/pip.conf",
            "/etc/xdg/pip/pip.conf",
            Path.home() / ".config/pip/pip.conf",
            Path.home() / ".pip/pip.conf",
        ]
    )
    for section in ("global", "install"):
        if parser.has_section(section):
            found.update(parser.items(section))
    for name, value in os.environ.items():
        if name.startswith("PIP_") and value:
            found[name[4:].lower().replace("_", "-")] = value
    return found


def _ca_bundle(pip: dict[str, str]) -> Path | None:
    for candidate in (
        pip.get("cert"),
        os.environ.get("SSL_CERT_FILE"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def plumbing(context: Path) -> None:
    """Write the test base image's build context: the host's CA bundle and a pip.conf that
    points at it (and at the host's index, when it has its own)."""
    context.mkdir(parents=True, exist_ok=True)
    pip = _pip_settings()
    bundle = _ca_bundle(pip)
    (context / "host-ca.crt").write_bytes(bundle.read_bytes() if bundle else b"")
    lines = ["[global]"]
    if bundle is not None:
        lines.append("cert = /usr/local/share/host-ca.crt")
    for key in ("index-url", "extra-index-url", "trusted-host", "default-timeout"):
        if key in pip:
            lines.append(f"{key} = {pip[key]}")
    (context / "pip.conf").write_text("\n".join(lines) + "\n")


def proxy_args() -> dict[str, str]:
    return {name: os.environ[name] for name in PROXY_VARIABLES if os.environ.get(name)}


# -- the images ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One builder at a time on this machine (parallel test sessions share the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _has(c: docker.DockerClient, tag: str) -> bool:
    try:
        c.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


#: What Debian's own slim images (debian:bookworm-slim, under the official Python image) set:
#: dpkg leaves documentation, manuals and translations out, apt keeps no packages it has
#: installed and fetches no translated descriptions. Part of the base image's key.
SLIM_RECIPE = "slim-1"
DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
"""
APT_CLEAN = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
"""


def slim(rootfs: Path) -> None:
    """debootstrap's root file system made like Debian's slim image: the packages it downloaded,
    apt's lists and caches, and what DPKG_EXCLUDES leaves out of every later install, gone."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(DPKG_EXCLUDES)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
    for pattern in (
        "var/cache/apt/archives/*.deb",
        "var/cache/apt/*.bin",
        "var/lib/apt/lists/*_*",
        "usr/share/man/*",
        "usr/share/groff/*",
        "usr/share/info/*",
        "usr/share/lintian/*",
        "usr/share/locale/*",
    ):
        for path in rootfs.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for doc in (rootfs / "usr/share/doc").glob("*/*"):
        if doc.name != "copyright":
            shutil.rmtree(doc) if doc.is_dir() and not doc.is_symlink() else doc.unlink()


def debian_image(c: docker.DockerClient, timings: dict[str, float]) -> str:
    """A minimal Debian imported from a debootstrap root file system, keyed by what makes it."""
    mirror = debian_mirror()
    key = hashlib.sha256(f"{SUITE} minbase {mirror} {SLIM_RECIPE}".encode()).hexdigest()[:16]
    tag = f"agent-server-test/debian:{SUITE}-{key}"
    if _has(c, tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise Unavailable(
            "debootstrap is not installed (`.ci/run` installs it; "
            "`apt-get install debootstrap` here)"
        )
    if os.geteuid() != 0:
        raise Unavailable("building the test base image needs root (debootstrap)")
    tarball = CACHE / f"debian-{SUITE}-{key}.tar"
    if not tarball.is_file():
        began = time.monotonic()
        rootfs = CACHE / f"rootfs-{key}"
        shutil.rmtree(rootfs, ignore_errors=True)
        result = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"debootstrap failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
        slim(rootfs)
        partial = tarball.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            tar.add(rootfs, arcname=".")
        partial.replace(tarball)
        shutil.rmtree(rootfs, ignore_errors=True)
        timings["debootstrap_s"] = time.monotonic() - began
    began = time.monotonic()
    repository, _, version = tag.partition(":")
    c.api.import_image_from_file(str(tarball), repository=repository, tag=version)
    timings["import_s"] = time.monotonic() - began
    return tag


def python_image(c: docker.DockerClient, timings: dict[str, float]) -> str:
    """The Debian image with Python, git, ripgrep and tini added with apt (Docker's cache makes
    a second build a no-op)."""
    debian = debian_image(c, timings)
    context = CACHE / "debian-python"
    plumbing(context)
    shutil.copy(BASE_DOCKERFILE, context / "Dockerfile")
    tag = "agent-server-test/python:" + debian.rpartition("-")[2]
    began = time.monotonic()
    _build(c, path=str(context), tag=tag, buildargs={"DEBIAN_IMAGE": debian, **proxy_args()})
    timings["python_image_s"] = time.monotonic() - began
    return tag


def sandbox_image(timings: dict[str, float] | None = None, *, chromium: bool = False) -> str:
    """sandbox.Dockerfile built on the test base image; its tag. `chromium`: with the file's
    default EXTRA_PACKAGES (the browser), as deployed; bench/image.py's, never the suite's."""
    timings = {} if timings is None else timings
    tag = SANDBOX_IMAGE + "-chromium" if chromium else SANDBOX_IMAGE
    with _locked(), contextlib.closing(client()) as c:
        base = python_image(c, timings)
        began = time.monotonic()
        extra = {} if chromium else {"EXTRA_PACKAGES": ""}
        _build(
            c,
            path=str(ROOT),
            dockerfile="sandbox.Dockerfile",
            tag=tag,
            buildargs={"BASE_IMAGE": base, **extra, **proxy_args()},
        )
        timings["sandbox_image_s"] = time.monotonic() - began
    return tag


def _build(c: docker.DockerClient, **kwargs: object) -> None:
    try:
        c.images.build(network_mode="host", rm=True, forcerm=True, **kwargs)  # type: ignore[arg-type]
    except docker.errors.BuildError as exc:
        log = "".join(str(part.get("stream") or part.get("error") or "") for part in exc.build_log)
        raise RuntimeError(
            f"building {kwargs.get('tag')} failed: {exc.msg}\n{log[-4000:]}"
        ) from None


# -- warm pools -----------------------------------------------------------------------------


def parked(c: docker.DockerClient, plane: str) -> dict[str, str]:
    """A deployment's parked containers (control_plane/providers/docker/pool.py): sandbox id ->
    state, in one call (a container the SDK's `list` names may be gone when it inspects it)."""
    from control_plane.providers.containers import LABEL_PLANE
    from control_plane.providers.docker.pool import PREFIX

    found = c.api.containers(all=True, filters={"label": f"{LABEL_PLANE}={plane}"})
    names = {str(f["Names"][0]).lstrip("/"): str(f["State"]) for f in found}
    return {
        name.removeprefix(PREFIX): state for name, state in names.items() if name.startswith(PREFIX)
    }


# -- clean-up -------------------------------------------------------------------------------


def remove_labelled(c: docker.DockerClient, label: str) -> None:
    """Every container and volume carrying `label` (what a failed test left behind), and the
    filesystems a disk-limited volume binds (their loop devices go with the mounts)."""
    for container in c.containers.list(all=True, filters={"label": label}):
        container.remove(force=True, v=True)
    for volume in c.volumes.list(filters={"label": label}):
        device = (volume.attrs.get("Options") or {}).get("device")
        volume.remove(force=True)
        for mount in (f"{device}/.agent-server", device) if device else ():
            if os.path.ismount(mount):
                subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
