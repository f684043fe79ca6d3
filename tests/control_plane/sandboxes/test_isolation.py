"""Process sandboxes isolated by bubblewrap, tried as a second tenant would: with nothing but
its own account, tenant B's agent and B's own /api/bash read for tenant A's workspace file, A's
conversation state (A's secret and LLM key), this control plane's secret key and database, and
every process's environment. Isolated, every read fails and nothing of A reaches B's events;
with isolation off (a shared host accepted), the same reads succeed: the test can fail.

Also what must keep working inside bubblewrap (pause, resume, a daemon swept on delete) and
what an unisolated control plane refuses (a second user, unless a shared host is accepted).

Each isolated case runs twice: with the server spawned by bubblewrap, and forked from the
control plane's template into the sandbox bubblewrap made (`agent_server.template`), which must
be as isolated, and which a crash of the template leaves running."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from control_plane.config import Config, from_env
from control_plane.providers.process import gvisor
from control_plane.providers.process.isolation import IsolationUnavailable, choose
from control_plane.providers.process.spawn import spawn, wait
from core import processes
from tests.control_plane.support import (
    ControlPlane,
    configure_llm,
    conversation,
    make_config,
    sandbox_pid,
    server_of,
    start,
    template_socket,
    wait_for,
)
from tests.control_plane.tenants import attempts, reads, run, victim
from tests.support.llm import ScriptedLLM, call

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["spawned", "forked", "gvisor"])
def isolated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlPlane]:
    forked = request.param == "forked"
    if request.param != "spawned" and os.geteuid() != 0:
        pytest.fail(
            "the template forks into a sandbox's namespaces, and runsc starts its "
            "sandboxes, as root only: run as root"
        )
    plane = ControlPlane(
        make_config(
            tmp_path / "cp",
            sandbox_template=forked,
            sandbox_isolation=request.param == "gvisor" and "gvisor" or "auto",
        )
    ).start()
    if forked:
        wait_for(template_socket(plane).exists, 180, what="the sandbox template")
    yield plane
    plane.stop()


def on_gvisor(plane: ControlPlane) -> bool:
    return plane.config.sandbox_isolation == "gvisor"


def forked(plane: ControlPlane, server: int) -> bool:
    """Whether the server was forked from the template (its command line is the template's)."""
    return str(template_socket(plane)).encode() in Path(f"/proc/{server}/cmdline").read_bytes()


def test_a_tenant_reads_nothing_of_another(isolated: ControlPlane, llm: ScriptedLLM) -> None:
    gvisor = on_gvisor(isolated)
    specs = isolated.client(isolated.new_user("admin")).get("/api/v1/sandbox-specs/search").json()
    said = "on gVisor: a kernel of its own" if gvisor else "isolated by bubblewrap"
    assert said in specs["items"][0]["description"], specs
    assert specs["items"][0]["working_dir"] == "/workspace/project"

    state = isolated.config.state_dir
    a = victim(isolated, llm)
    a_root = state / "sandboxes" / a.sid
    targets = [
        str(a_root / "workspace" / a.cid / "notes.txt"),
        *map(str, (a_root / "state" / "conversations").glob("*/meta.json")),
        str(state / "secret.key"),
        str(state / "control-plane.db"),
    ]
    assert len(targets) == 4 and a.note in Path(targets[0]).read_text()  # they are there
    assert a.secret in Path(targets[1]).read_text()
    assert a.llm_key not in Path(targets[1]).read_text()  # the gateway's token instead (issue 36)
    fernet = (state / "secret.key").read_text().strip()

    b = run(isolated, llm, "bob", reads(targets))
    told = b.events()
    assert "[environ read]" in told  # the command ran to its end
    for target in targets:
        assert f"[read {target}: 1]" in told, told
    for leak in (a.secret, a.llm_key, a.note, a.session, fernet, "SQLite format 3", b.session):
        assert leak not in told
    # find, not ls: Debian's runsc rejects the statx flag coreutils' ls passes (docs/gvisor.md)
    listed = b.bash(f"find {state / 'sandboxes'} -mindepth 1 -maxdepth 1 -printf '%f\\n'")
    assert listed["stdout"].split() == [b.sid], listed
    for target, result in attempts(b, targets).items():
        assert result["exit_code"] != 0 and "No such file" in result["stderr"], (target, result)
        assert not result["stdout"]
    environ = b.bash("cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ls /proc")
    for leak in (a.secret, a.llm_key, a.session, b.session):
        assert leak not in environ["stdout"]
    # Nor does bubblewrap's (or runsc's) environment hold a key (read from outside, as root):
    # it came over a pipe to the agent server alone.
    if os.geteuid() == 0:
        launcher = sandbox_pid(isolated, b.sid)
        for pid in [launcher, *processes.children(launcher)]:
            assert b.session.encode() not in Path(f"/proc/{pid}/environ").read_bytes()

    # The server holds no privilege: no capability, none to gain, and it is the sandbox's user
    # (on gVisor as its kernel says: the server is no process of the host's).
    if gvisor:
        status_text = b.bash("cat /proc/$PPID/status")["stdout"]
        # The agent's own terminal command sees gVisor's kernel, not the host's.
        kernel = run(isolated, llm, "dave", "cat /proc/version; dmesg | head -1").events()
        assert "Starting gVisor" in kernel and "Linux version 4.4.0" in kernel, kernel
        assert "Linux version" in Path("/proc/version").read_text()  # the host's, not that
    else:
        server = server_of(isolated, b.sid)
        assert forked(isolated, server) == isolated.config.sandbox_template
        status_text = Path(f"/proc/{server}/status").read_text()
    status = dict(line.split(":\t", 1) for line in status_text.splitlines() if ":\t" in line)
    if gvisor:  # its /proc says nothing of it: the kernel's answer to the server's child
        no_new_privs = b.bash(
            "python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'"
        )["stdout"]
        assert no_new_privs.strip() == "1", no_new_privs
    else:
        assert status["NoNewPrivs"].strip() == "1"
    # (gVisor's /proc has no ambient set: it has no ambient capabilities to give)
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")[: 4 if gvisor else 5]:
        assert int(status[capabilities], 16) == 0, (capabilities, status[capabilities])
    assert status["Uid"].split()[:3] == [str((state / "sandboxes" / b.sid).stat().st_uid)] * 3

    # Each sandbox is a uid of its own, its directory its alone; the control plane's state too.
    a_uid, b_uid = a_root.stat().st_uid, (state / "sandboxes" / b.sid).stat().st_uid
    if os.geteuid() == 0:
        low, high = isolated.config.sandbox_uids
        assert a_uid != b_uid and low <= a_uid <= high and low <= b_uid <= high
        assert int(b.bash("id -u")["stdout"]) == b_uid
    assert stat.S_IMODE(a_root.stat().st_mode) == 0o700
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_without_isolation_the_same_reads_succeed(tmp_path: Path, llm: ScriptedLLM) -> None:
    plane = ControlPlane(
        make_config(tmp_path / "cp", sandbox_isolation="off", shared_host=True)
    ).start()
    try:
        state = plane.config.state_dir
        a = victim(plane, llm)
        a_root = state / "sandboxes" / a.sid
        targets = [
            str(a_root / "workspace" / a.cid / "notes.txt"),
            *map(str, (a_root / "state" / "conversations").glob("*/meta.json")),
            str(state / "secret.key"),
            str(state / "control-plane.db"),
        ]
        b = run(plane, llm, "bob", reads(targets))
        told = b.events()
        for target in targets:
            assert f"[read {target}: 0]" in told, told
        for leak in (a.secret, a.note, "SQLite format 3"):
            assert leak in told
        assert a.llm_key not in told  # no sandbox was ever given it (issue 36)
        results = attempts(b, targets)
        assert all(result["exit_code"] == 0 for result in results.values()), results
        assert a.secret in results[targets[1]]["stdout"]
    finally:
        plane.stop()


def test_pause_resume_and_delete_reach_everything_inside(
    isolated: ControlPlane, llm: ScriptedLLM
) -> None:
    """Inside bubblewrap the pid the control plane keeps is bubblewrap's, leading the group: a
    pause stops the agent server in the sandbox, resume continues it, and a delete ends a daemon
    that left the server's session (the sandbox's pid namespace goes with it). On gVisor the
    pid is runsc's: its kernel pauses every task (runsc says so), and a delete leaves nothing
    of runsc's."""
    mark = f"daemon-{uuid.uuid4().hex}"
    tenant = run(
        isolated,
        llm,
        "carol",
        f"setsid -f bash -c 'sleep infinity; :' {mark} </dev/null >/dev/null 2>&1",
    )
    pid = sandbox_pid(isolated, tenant.sid)
    if on_gvisor(isolated):
        wait_for(
            lambda: mark in tenant.bash(f"pgrep -af {mark} || true")["stdout"],
            10,
            what="the daemon",
        )
        runsc = [pid, *processes.children(pid)]  # runsc, its gofer and its sandbox
        bundle = gvisor.bundle_from(pid)
        assert bundle is not None and len(runsc) == 3
        # As an operator asks runsc: in the sandbox's network namespace (docs/gvisor.md).
        state = [
            "nsenter",
            f"--net=/proc/{pid}/ns/net",
            "--",
            shutil.which("runsc") or "runsc",
            "--root",
            str(bundle / "state"),
            "state",
            gvisor.CONTAINER,
        ]
    else:
        daemon = wait_for(lambda: processes.with_argument(mark), 10, what="the daemon")
        server = server_of(isolated, tenant.sid)
        assert server != pid  # bubblewrap's leads the group; the server runs in its namespace

    r = tenant.client.post(f"/api/v1/sandboxes/{tenant.sid}/pause")
    assert r.status_code == 200 and r.json()["status"] == "PAUSED", r.text
    assert processes.state(pid) == "T"
    if on_gvisor(isolated):
        assert json.loads(subprocess.check_output(state))["status"] == "paused"
    else:
        assert processes.state(server) == "T"
    r = tenant.client.post(f"/api/v1/sandboxes/{tenant.sid}/resume")
    assert r.status_code == 200, r.text
    wait_for(
        lambda: (
            tenant.client.get("/api/v1/sandboxes", params={"id": tenant.sid}).json()[0]["status"]
            == "RUNNING"
        ),
        30,
        what="RUNNING again",
    )
    if on_gvisor(isolated):
        assert json.loads(subprocess.check_output(state))["status"] == "running"
    else:
        assert processes.state(server) in ("S", "R")
    assert tenant.bash("echo back")["stdout"] == "back\n"

    r = tenant.client.delete(f"/api/v1/sandboxes/{tenant.sid}", params={"sandbox_id": tenant.sid})
    assert r.status_code == 200, r.text
    if on_gvisor(isolated):
        wait_for(
            lambda: all(processes.state(p) in (None, "Z") for p in runsc),
            10,
            what="runsc's processes to be gone",
        )
        assert not bundle.exists()
    else:
        wait_for(lambda: not processes.with_argument(mark), 10, what="the daemon to be gone")
        assert all(
            processes.state(p) in (None, "Z") for p in (pid, server, *(p.pid for p in daemon))
        )


def test_a_module_planted_in_the_sandbox_never_runs_in_its_server(
    isolated: ControlPlane, llm: ScriptedLLM
) -> None:
    """The agent writes `playwright.py` into its sandbox's directory, the server's working
    directory (where `python -m` looks first); the next conversation in that sandbox has the
    browser, whose first use imports Playwright: the server imports the real one, and the
    planted code, which would run with the server's keys in reach, never runs."""
    client = isolated.client(isolated.new_user("mallory"))
    script = f"mallory-{uuid.uuid4().hex[:8]}"
    configure_llm(client, llm.base_url(script), tools=["terminal"])
    planted = (
        "import os, pathlib; pathlib.Path(os.environ['HOME']).parent.joinpath('hijacked')"
        ".write_text('ran'); raise ImportError('planted')"
    )
    llm.script(
        script,
        call("terminal", command=f"printf '%s' \"{planted}\" > $HOME/../playwright.py"),
        call("finish", message="planted"),
    )
    first = start(client, "go")
    assert first["status"] == "READY", first
    root = isolated.config.state_dir / "sandboxes" / first["sandbox_id"]
    wait_for(lambda: (root / "playwright.py").exists(), 60, what="the planted module")

    configure_llm(client, llm.base_url(script), tools=["terminal", "browser_tool_set"])
    llm.script(script, call("browser_navigate", url="about:blank"), call("finish", message="done"))
    second = start(client, "browse", sandbox_id=first["sandbox_id"])
    assert second["status"] == "READY" and second["sandbox_id"] == first["sandbox_id"], second
    wait_for(
        lambda: (
            conversation(client, second["app_conversation_id"])["execution_status"].upper()
            in ("FINISHED", "ERROR", "STUCK")
        ),
        120,
        what="the browsing run",
    )
    assert len(llm.timings[script]) == 4  # the browser was asked for after the module was there
    assert not (root / "hijacked").exists()


@pytest.mark.parametrize("template", [False, True], ids=["spawned", "forked"])
def test_a_sandbox_has_its_own_tmp_and_shm_and_the_terminal_says_its_user(
    tmp_path: Path, llm: ScriptedLLM, template: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TMPDIR of the control plane's (systemd's, a CI's) names a directory the sandbox has not
    got; the sandbox's temporary files go to its own /tmp, and its commands run. Their
    observations name the sandbox's user, not the template's root. Its /dev/shm is its own."""
    (tmp_path / "cp-tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "cp-tmp"))
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_template=template)).start()
    try:
        if template:
            wait_for(template_socket(plane).exists, 180, what="the sandbox template")
        tenant = run(plane, llm, "alice", "echo ran; echo $TMPDIR")
        [observation] = [
            e["observation"]
            for e in json.loads(tenant.events())["items"]
            if e["kind"] == "ObservationEvent" and e["tool_name"] == "terminal"
        ]
        assert observation["exit_code"] == 0, observation
        assert observation["content"][0]["text"].split("\n")[:2] == ["ran", "/tmp"], observation
        user = tenant.bash("id -un")["stdout"].strip()
        assert observation["metadata"]["username"] == user != "root"
        # Its own /dev/shm: multiprocessing's locks work, and it is bounded (64 MiB).
        shm = tenant.bash(
            "python3 -c 'import multiprocessing; multiprocessing.Lock(); "
            'print("locked")\'; dd if=/dev/zero of=/dev/shm/fill bs=1M count=100'
        )
        assert shm["stdout"].strip() == "locked", shm
        assert "No space left on device" in shm["stderr"], shm
    finally:
        plane.stop()


#: What an agent's command tries of the kernel surface Docker's default profile closes: a
#: nested user or network namespace (where tmpfs and cgroup mounts work), by unshare and by
#: clone, a mount, the kernel's keyring; then what /proc says of its seccomp.
KERNEL_SURFACE = textwrap.dedent("""\
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    def tried(name, result):
        print(name, "refused" if result == -1 and ctypes.get_errno() == 1 else "allowed")
    tried("unshare(user)", libc.unshare(0x10000000))
    tried("unshare(net)", libc.unshare(0x40000000))
    pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
    if pid == 0:
        os._exit(0)
    tried("clone(user)", pid)
    tried("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
    tried("keyctl", libc.syscall(250, 0, 0, 0, 0, 0))
    print(open("/proc/self/status").read().split("Seccomp:")[1].split()[0])
    """)


@pytest.mark.parametrize("template", [False, True], ids=["spawned", "forked"])
def test_a_sandbox_cannot_reach_the_kernel_surface_a_container_cannot(
    tmp_path: Path, llm: ScriptedLLM, template: bool
) -> None:
    """Issue 41: without a filter, an agent's command made user and network namespaces and
    mounted tmpfs and cgroup2 in them. Now refused as in a Docker container (`Seccomp: 2`),
    for a server bubblewrap spawned and one forked from the template alike."""
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_template=template)).start()
    try:
        if template:
            wait_for(template_socket(plane).exists, 180, what="the sandbox template")
        tenant = run(plane, llm, "mallory", "echo ready")
        server = server_of(plane, tenant.sid)
        assert forked(plane, server) == template
        tried = tenant.bash(f"python3 -c {shlex.quote(KERNEL_SURFACE)}")
        assert tried["stdout"].splitlines() == [
            "unshare(user) refused",
            "unshare(net) refused",
            "clone(user) refused",
            "mount refused",
            "keyctl refused",
            "2",
        ], tried
        assert (
            tenant.bash("git --version; python3 -c 'import os; print(os.fork() > 0)'")["exit_code"]
            == 0
        )
    finally:
        plane.stop()


def test_a_crashed_template_takes_no_sandbox_down(tmp_path: Path, llm: ScriptedLLM) -> None:
    """The template killed: a sandbox it forked goes on (it left the template's session, and
    the sandbox is bubblewrap's), the next start is spawned, and a new template takes over."""
    if os.geteuid() != 0:
        pytest.fail("the template forks into a sandbox's namespaces as root only: run as root")
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_template=True)).start()
    try:
        wait_for(template_socket(plane).exists, 180, what="the sandbox template")
        first = run(plane, llm, "dave", "echo one")
        assert forked(plane, server_of(plane, first.sid))
        [template] = [
            p.pid
            for p in processes.with_argument(str(template_socket(plane)))
            if p.ppid == os.getpid()
        ]
        os.killpg(template, signal.SIGKILL)
        wait_for(lambda: processes.state(template) in (None, "Z"), 10, what="the template gone")
        assert first.bash("echo still here")["stdout"] == "still here\n"

        second = run(plane, llm, "erin", "echo two")  # spawned: no template is ready
        assert not forked(plane, server_of(plane, second.sid))
        wait_for(template_socket(plane).exists, 180, what="a new template")
        third = run(plane, llm, "frank", "echo three")
        assert forked(plane, server_of(plane, third.sid))
        assert first.bash("echo and still")["stdout"] == "and still\n"
    finally:
        plane.stop()


def test_an_unisolated_host_serves_one_user_unless_shared(
    tmp_path: Path, llm: ScriptedLLM, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="control_plane.providers.process.isolation")
    plane = ControlPlane(make_config(tmp_path / "cp", sandbox_isolation="off")).start()
    try:
        said = [r.getMessage() for r in caplog.records if r.name.endswith("isolation")]
        assert len(said) == 1 and "isolation is off" in said[0], said
        first, second = (plane.client(plane.new_user(name)) for name in ("first", "second"))
        for client in (first, second):
            configure_llm(client, llm.base_url(key))
        assert first.post("/api/v1/sandboxes", json={}).status_code == 201
        r = second.post("/api/v1/sandboxes", json={})
        assert r.status_code == 403 and "CONTROL_PLANE_SHARED_HOST" in r.json()["detail"], r.text
        llm.script(key, call("finish", message="done"))
        task_id = second.post("/api/v1/app-conversations", json={}).json()["id"]
        task = wait_for(
            lambda: (
                (
                    t := second.get(
                        "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
                    ).json()[0]
                )["status"]
                in ("READY", "ERROR")
                and t
            ),
            30,
        )
        assert task["status"] == "ERROR" and "not isolated" in task["detail"], task
        assert second.get("/api/v1/sandboxes/search").json()["items"] == []
    finally:
        plane.stop()


@pytest.mark.parametrize("kind", ["bubblewrap", "gvisor"])
def test_what_a_bound_path_holds_of_the_control_plane_is_covered(tmp_path: Path, kind: str) -> None:
    """A state directory under a path the sandbox sees (here the virtual environment) is
    covered by an empty tmpfs: without that, its key is read."""
    hidden = Path(tempfile.mkdtemp(prefix="state-", dir=sys.prefix))
    try:
        (hidden / "secret.key").write_text("the-key\n")
        # Readable by anyone (a sandbox on gVisor runs as its own uid): only the cover hides it.
        hidden.chmod(0o755)
        (hidden / "secret.key").chmod(0o644)
        root = tmp_path / "sandbox"
        (root / "workspace").mkdir(parents=True)
        uids = Config().sandbox_uids
        for covered, expected in ((True, "No such file"), (False, "the-key")):
            isolation = (
                gvisor.choose(hidden=[hidden] if covered else [], uids=uids)
                if kind == "gvisor"
                else choose("bubblewrap", hidden=[hidden] if covered else [], uids=uids)
            )
            assert isolation is not None
            command = isolation.command(
                root,
                ["cat", str(hidden / "secret.key")],
                uids[0] if kind == "gvisor" else None,
                {"PATH": os.defpath},
            )
            out = tmp_path / f"{covered}.out"
            with open(out, "wb") as output:
                pid = spawn(command.argv, command.env, output=output.fileno(), files=command.files)
            assert wait(pid, 30) == (1 if covered else 0)
            assert expected in out.read_text()
    finally:
        shutil.rmtree(hidden)


def test_required_isolation_that_cannot_be_had_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no bubblewrap to be found
    uids = Config().sandbox_uids
    with pytest.raises(IsolationUnavailable, match="bubblewrap is not installed"):
        choose("bubblewrap", hidden=[], uids=uids)
    caplog.set_level(logging.INFO, logger="control_plane.providers.process.isolation")
    assert choose("auto", hidden=[], uids=uids) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert "NOT isolated (bubblewrap is not installed" in line and "SHARED_HOST" in line


def test_gvisor_that_cannot_be_had_refuses_to_start_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked for, gVisor is had or the control plane does not start: nothing weaker instead."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no runsc, no tini
    with pytest.raises(
        IsolationUnavailable,
        match=r"runsc and tini not installed "
        r"\(Debian: apt-get install runsc tini\)",
    ):
        gvisor.choose(hidden=[], uids=Config().sandbox_uids)


@pytest.mark.parametrize(
    "asked",
    [
        {"CONTROL_PLANE_SANDBOX_ISOLATION": "gvisor"},
        {"CONTROL_PLANE_SANDBOX_ISOLATION": "bubblewrap"},
    ],
)
def test_a_control_plane_that_cannot_have_its_isolation_says_why_in_one_line(
    tmp_path: Path, asked: dict[str, str]
) -> None:
    """As an operator starts it: the reason is the one error line, no traceback over it."""
    env = {
        **os.environ,
        **asked,
        "PATH": "/nonexistent",  # no runsc, tini, bubblewrap
        "CONTROL_PLANE_STATE_DIR": str(tmp_path / "state"),
        "CONTROL_PLANE_PORT": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "control_plane"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
    kind = asked["CONTROL_PLANE_SANDBOX_ISOLATION"]
    assert errors[0].startswith(
        f"ERROR:    control-plane cannot start: CONTROL_PLANE_SANDBOX_ISOLATION={kind}, but "
    ), done.stderr
    assert "not installed" in errors[0] and "Traceback" not in done.stderr
    assert errors[1:] == ["ERROR:    Application startup failed. Exiting."]


@pytest.mark.parametrize(
    "value", ["100-200", "2000000000-1900000000", "1-2-3", "x", "4294967000-4294967100"]
)
def test_a_uid_range_is_checked(value: str) -> None:
    with pytest.raises(ValidationError):
        from_env({"CONTROL_PLANE_SANDBOX_UIDS": value})
    assert from_env({"CONTROL_PLANE_SANDBOX_UIDS": "200000-265535"}).sandbox_uids == (
        200000,
        265535,
    )


def test_a_uid_a_running_process_has_is_never_given_to_a_new_sandbox(tmp_path: Path) -> None:
    """A process of another control plane's sandbox (its directory elsewhere) runs as one uid
    of a range of two: every sandbox directory made here gets the other one."""
    first = 61_000 + os.getpid() % 1000 * 2
    isolation = choose("bubblewrap", hidden=[], uids=(first, first + 1))
    assert isolation is not None
    stranger = subprocess.Popen(
        ["setpriv", f"--reuid={first}", f"--regid={first}", "--clear-groups", "sleep", "60"]
    )
    try:
        wait_for(
            lambda: Path(f"/proc/{stranger.pid}/status").read_text().count(f"\t{first}\t") > 0,
            10,
            what="the stranger running as its uid",
        )
        for n in range(20):
            root = tmp_path / "sandboxes" / f"s{n}"
            root.mkdir(parents=True)
            assert isolation.own(root) == first + 1
            root.rmdir()
    finally:
        stranger.kill()
        stranger.wait()
