"""The terminal tool against a real bash: what a user of the shell would check."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from events.tools.terminal import TerminalAction, TerminalObservation
from tools.base import ToolContext, ToolError
from tools.terminal import TerminalTool

Make = Callable[..., TerminalTool]


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    """Terminal tools in a fresh working directory; all closed after the test."""
    made: list[TerminalTool] = []

    def factory(
        idle_timeout: float = 600.0, secrets: dict[str, str] | None = None, **params: Any
    ) -> TerminalTool:
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        ctx = ToolContext(
            conversation_id="test",
            working_dir=work,
            state_dir=tmp_path / "state",
            secrets=secrets or {},
            env={"GIT_AUTHOR_NAME": "Ada"},
            idle_timeout=idle_timeout,
        )
        tool = TerminalTool(ctx, {"no_output_timeout": 5, **params})
        made.append(tool)
        return tool

    yield factory
    for tool in made:
        await tool.close()


async def run(tool: TerminalTool, command: str, **fields: Any) -> TerminalObservation:
    return await tool.run(TerminalAction(command=command, **fields))


def alive(pid: int) -> bool:
    """A zombie is dead: only its parent has yet to notice."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def pids_running(*argv: str) -> list[int]:
    """Live processes whose command line is exactly `argv`."""
    wanted = ("\0".join(argv) + "\0").encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(entry.path, "cmdline").read_bytes() == wanted and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def eventually(check: Callable[[], bool], within: float = 5.0) -> bool:
    for _ in range(int(within / 0.05)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


def memory(field: str) -> int:
    """A memory figure of this process, in bytes, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def unique_sleep() -> str:
    """A duration no other test (or program) uses, so its processes can be told apart."""
    return f"1000.{secrets.randbelow(10**9)}"


async def shell_pid(tool: TerminalTool) -> int:
    return int((await run(tool, "echo $$")).text.splitlines()[0])


# -- commands and the state they leave ----------------------------------------------------


async def test_output_and_exit_codes(make: Make) -> None:
    tool = make()
    hi = await run(tool, "echo hi")
    assert hi.text.splitlines()[0] == "hi"
    assert hi.exit_code == 0 and hi.metadata.exit_code == 0 and not hi.is_error
    assert "exit code 0" in hi.text
    failed = await run(tool, "ls /no/such/dir")
    assert failed.exit_code == 2
    assert "No such file or directory" in failed.text
    assert (await run(tool, "(exit 7)")).exit_code == 7


async def test_cwd_environment_and_functions_persist(make: Make, tmp_path: Path) -> None:
    tool = make()
    await run(tool, "mkdir -p sub/dir && cd sub/dir")
    await run(tool, "export GREETING=hello")
    await run(tool, 'greet() { echo "$GREETING, $1"; }')
    obs = await run(tool, "pwd; greet world")
    assert obs.text.splitlines()[:2] == [str(tmp_path / "work/sub/dir"), "hello, world"]
    assert obs.metadata.working_dir == str(tmp_path / "work/sub/dir")


async def test_virtualenv_activation_persists(make: Make) -> None:
    tool = make()
    await run(
        tool,
        "mkdir -p venv/bin && printf 'export VIRTUAL_ENV=$PWD/venv\\n"
        'PATH=$VIRTUAL_ENV/bin:$PATH\\nPS1="(venv) $PS1"\\n\' > venv/bin/activate',
    )
    await run(tool, 'ln -s "$(command -v python3)" venv/bin/python && source venv/bin/activate')
    obs = await run(tool, "echo $VIRTUAL_ENV")
    assert obs.text.splitlines()[0].endswith("/venv")
    assert "(venv)" not in obs.text  # a changed PS1 must not leak into the output
    assert obs.metadata.py_interpreter_path is not None
    assert obs.metadata.py_interpreter_path.endswith("/venv/bin/python")


async def test_multiline_commands_heredocs_and_long_lines(make: Make) -> None:
    tool = make()
    heredoc = "cat <<'EOF'\n$HOME stays\n  indented\nEOF\n"
    obs = await run(tool, heredoc + "if true; then\n  echo yes\nfi")
    assert obs.text.splitlines()[:3] == ["$HOME stays", "  indented", "yes"]
    # Longer than the terminal's 4 KiB line limit.
    obs = await run(tool, f"echo {'x' * 10_000} | wc -c")
    assert obs.text.splitlines()[0] == "10001"
    obs = await run(tool, "echo 'unterminated")
    assert obs.exit_code == 2 and "unexpected EOF" in obs.text


async def test_printing_the_prompt_does_not_end_a_command_early(make: Make) -> None:
    tool = make()
    obs = await run(
        tool, "echo \"$PS1\"; declare -f __agent_prompt; printf '\\036\\n'; sleep 0.3; echo after"
    )
    assert obs.exit_code == 0
    assert "after" in obs.text


async def test_output_is_cleaned_of_terminal_codes(make: Make) -> None:
    tool = make()
    obs = await run(
        tool,
        "printf '\\033[1;31mred\\033[0m plain\\n'; printf '10%%\\r50%%\\r100%%\\n';"
        " printf '\\033]0;a title\\007titled\\n'; printf 'crlf\\r\\n'",
    )
    assert obs.text.splitlines()[:4] == ["red plain", "100%", "titled", "crlf"]
    assert "\x1b" not in obs.text and "\r" not in obs.text


async def test_environment_secrets_and_withheld_server_keys(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SESSION_API_KEY", "server-key")
    tool = make(secrets={"API_TOKEN": "tok-12345-secret"})
    obs = await run(
        tool, "echo $API_TOKEN; echo ${SESSION_API_KEY:-withheld}; echo $GIT_AUTHOR_NAME"
    )
    assert obs.text.splitlines()[:3] == ["<secret-hidden>", "withheld", "Ada"]
    assert "tok-12345-secret" not in obs.text
    same = await run(tool, '[ "$API_TOKEN" = tok-12345-secret ] && echo same')
    assert same.text.splitlines()[0] == "same"


# -- commands that take their time ----------------------------------------------------------


async def test_interactive_program_answered_with_input(make: Make) -> None:
    tool = make(no_output_timeout=1)
    asked = await run(tool, f"{sys.executable} -c \"print('hello', input('name? '))\"")
    while asked.exit_code == -1 and not asked.text.startswith("name?"):  # a slow start
        asked = await run(tool, "")
    assert asked.exit_code == -1 and not asked.is_error
    assert asked.text.startswith("name?")
    assert "still running" in asked.text
    answered = await run(tool, "Ada", is_input=True)
    assert answered.exit_code == 0
    assert answered.text.splitlines()[0] == "hello Ada"


async def test_input_with_nothing_running_is_refused(make: Make) -> None:
    tool = make()
    obs = await run(tool, "touch typed", is_input=True)
    assert obs.is_error and "no command is running" in obs.text
    assert (await run(tool, "ls")).text.splitlines()[0] != "typed"


async def test_waiting_with_an_empty_command(make: Make) -> None:
    tool = make(no_output_timeout=0.5)
    first = await run(tool, "echo start; sleep 1.5; echo end")
    assert first.exit_code == -1 and first.text.startswith("start")
    rest = await run(tool, "")
    while rest.exit_code == -1:
        rest = await run(tool, "")
    assert rest.exit_code == 0 and rest.text.startswith("end")
    assert "start" not in rest.text


async def settled(tool: TerminalTool, obs: TerminalObservation) -> TerminalObservation:
    """The observation once the command has ended (a loaded machine may take longer than a
    call's wait to act on C-c: the next empty calls read on). C-c is pressed again every ten
    reads, as a person would: a C-c typed as a loop's command ends (its process group gone,
    the shell not yet in the foreground again) reaches no process, and is lost."""
    for attempt in range(1, 101):
        if obs.exit_code != -1:
            break
        obs = await run(tool, "C-c" if attempt % 10 == 0 else "", is_input=attempt % 10 == 0)
    return obs


async def test_a_command_that_never_stops_printing_still_returns(make: Make) -> None:
    tool = make(max_call_seconds=0.5)
    obs = await run(tool, "while :; do echo tick; sleep 0.05; done")
    assert obs.exit_code == -1 and "still running" in obs.text
    assert obs.text.startswith("tick")
    assert (await settled(tool, await run(tool, "C-c", is_input=True))).exit_code == 130


async def test_ctrl_c_stops_a_silent_command(make: Make) -> None:
    tool = make(no_output_timeout=1)
    duration = unique_sleep()
    waiting = await run(tool, f"sleep {duration}")
    assert waiting.exit_code == -1
    busy = await run(tool, "touch should-not-exist")
    assert busy.is_error and "still running" in busy.text
    stopped = await settled(tool, await run(tool, "C-c", is_input=True))
    assert stopped.exit_code == 130
    assert not pids_running("sleep", duration)
    assert (await run(tool, "ls")).text.splitlines()[0] != "should-not-exist"


def test_ctrl_c_reaches_the_command_whatever_the_servers_threads_block(tmp_path: Path) -> None:
    """A server whose threads block SIGINT (a pool thread inherits its creator's mask; CI's
    workers had one) still gives its shell a C-c that stops the command."""

    def scenario() -> int | None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # this thread and its pool

        async def flow() -> int | None:
            tool = TerminalTool(
                ToolContext(
                    conversation_id="test",
                    working_dir=tmp_path,
                    state_dir=tmp_path / "state",
                    secrets={},
                    env={},
                ),
                {"no_output_timeout": 1},
            )
            try:
                assert (await run(tool, f"sleep {unique_sleep()}")).exit_code == -1
                return (await settled(tool, await run(tool, "C-c", is_input=True))).exit_code
            finally:
                await tool.close()

        return asyncio.run(flow())

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(scenario).result(timeout=60) == 130


def test_ctrl_c_reaches_the_command_of_a_server_that_ignores_sigint(tmp_path: Path) -> None:
    """A server started in the background by a script ignores SIGINT (a non-interactive shell
    does that to `cmd &`; CI's runs were so), and an ignored signal stays ignored across exec:
    its shell's commands must still stop on C-c."""

    async def flow() -> int | None:
        tool = TerminalTool(
            ToolContext(
                conversation_id="test",
                working_dir=tmp_path,
                state_dir=tmp_path / "state",
                secrets={},
                env={},
            ),
            {"no_output_timeout": 5, "max_call_seconds": 0.5},
        )
        try:
            assert (await run(tool, "while :; do echo tick; sleep 0.05; done")).exit_code == -1
            return (await settled(tool, await run(tool, "C-c", is_input=True))).exit_code
        finally:
            await tool.close()

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert asyncio.run(flow()) == 130
    finally:
        signal.signal(signal.SIGINT, previous)


async def test_hard_timeout_interrupts_then_kills(make: Make) -> None:
    # The grace is what bash gets to act on C-c: on a loaded machine that takes a while.
    tool = make(kill_grace=3, no_output_timeout=0.5)
    obs = await run(tool, "echo begun; sleep 100", timeout=0.5)
    assert obs.timeout and obs.exit_code == 130
    assert obs.text.startswith("begun")
    stubborn = (
        f'{sys.executable} -c "import os, signal, time; signal.signal(signal.SIGINT, '
        'signal.SIG_IGN); print(os.getpid(), flush=True); time.sleep(100)"'
    )
    started = await run(tool, stubborn)
    while not started.text[:1].isdigit():  # C-c must come after it chose to ignore it
        started = await run(tool, "")
    obs = await run(tool, "", timeout=0.5)
    assert obs.timeout and obs.exit_code == 137
    assert "ignored C-c" in obs.text
    assert not alive(int(started.text.splitlines()[0]))
    assert (await run(tool, "echo usable")).text.startswith("usable")


async def test_background_jobs_never_block(make: Make) -> None:
    tool = make(no_output_timeout=30)
    duration = unique_sleep()
    started = await run(tool, f"sleep {duration} &")
    assert started.exit_code == 0  # not "still running" after 30 s
    assert await eventually(lambda: bool(pids_running("sleep", duration)))
    await run(tool, "(sleep 0.2; echo from-the-background) &")
    await asyncio.sleep(0.6)
    obs = await run(tool, "echo foreground")
    assert "from-the-background" in obs.text and "background processes" in obs.text
    assert obs.text.index("from-the-background") < obs.text.index("foreground\n")


async def test_huge_output_is_capped_and_saved_whole(make: Make) -> None:
    tool = make()
    await run(tool, "true")
    before = memory("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak, VmHWM, to the current size
    obs = await run(tool, "seq 1 12000000")  # 97 MB
    assert memory("VmHWM") - before < 30_000_000  # holding the output would take 100 MB
    assert obs.exit_code == 0
    assert len(obs.text) < 31_000
    lines = obs.text.splitlines()
    assert lines[:3] == ["1", "2", "3"]
    assert "12000000" in lines[-3:]
    assert "characters cut" in obs.text
    assert obs.full_output_save_dir is not None
    saved = list(Path(obs.full_output_save_dir).iterdir())
    assert len(saved) == 1 and str(saved[0]) in obs.text
    # Numbers of d digits run from 10**(d-1) to 10**d - 1, each with its newline.
    expected = sum((min(12_000_000, 10**d - 1) - 10 ** (d - 1) + 1) * (d + 1) for d in range(1, 9))
    assert saved[0].stat().st_size == expected
    with saved[0].open("rb") as f:
        f.seek(-9, os.SEEK_END)
        assert f.read() == b"12000000\n"


# -- the shell's life -----------------------------------------------------------------------


async def test_idle_shell_is_closed_and_the_next_call_says_so(make: Make) -> None:
    tool = make(idle_timeout=0.5)
    await run(tool, "export LEFT=behind")
    pid = await shell_pid(tool)
    assert await eventually(lambda: not alive(pid))
    obs = await run(tool, "echo ${LEFT:-gone}")
    assert "closed after 0.5 seconds" in obs.text
    assert "gone" in obs.text.splitlines()


async def test_close_leaves_no_process_behind(make: Make) -> None:
    tool = make()
    duration = unique_sleep()
    pid = await shell_pid(tool)
    await run(tool, f"sleep {duration} & nohup sleep {duration} >/dev/null 2>&1 &")
    await run(tool, f"setsid sleep {duration} & (trap '' HUP; sleep {duration}) &")
    assert await eventually(lambda: len(pids_running("sleep", duration)) == 4)
    await tool.close()
    assert not alive(pid)
    assert await eventually(lambda: not pids_running("sleep", duration))


async def test_cancelled_call_stops_its_command_and_the_shell_stays(make: Make) -> None:
    tool = make(no_output_timeout=30)
    duration = unique_sleep()
    call = asyncio.create_task(run(tool, f"sleep {duration}; echo not-reached"))
    assert await eventually(lambda: bool(pids_running("sleep", duration)))
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not pids_running("sleep", duration)
    obs = await run(tool, "echo still-here")
    assert obs.text.splitlines()[0] == "still-here" and "not-reached" not in obs.text


async def test_exit_ends_the_shell_and_a_new_one_follows(make: Make) -> None:
    tool = make()
    await run(tool, "export OLD=1")
    obs = await run(tool, "exit 3")
    assert obs.exit_code == 3 and "shell exited" in obs.text
    again = await run(tool, "echo ${OLD:-fresh}")
    assert again.text.splitlines()[0] == "fresh" and again.exit_code == 0


async def test_reset_starts_a_fresh_shell(make: Make) -> None:
    tool = make(no_output_timeout=0.5)
    await run(tool, "export OLD=1; cd /")
    await run(tool, "sleep 100")
    obs = await run(tool, "echo ${OLD:-fresh}; pwd", reset=True)
    assert "reset" in obs.text and obs.exit_code == 0
    assert obs.text.splitlines()[1:3] == ["fresh", str(tool.ctx.working_dir)]
    with pytest.raises(ToolError):
        await run(tool, "C-c", is_input=True, reset=True)


async def test_schema_is_what_the_model_sees() -> None:
    params = TerminalTool.parameters()
    assert params["required"] == ["command"]
    for name in ("command", "is_input", "timeout", "reset"):
        assert params["properties"][name]["description"]
    action = TerminalTool.parse({"command": "ls", "summary": "list files"})
    assert action == TerminalAction(command="ls")
    assert TerminalTool.definition().observation_type == "TerminalObservation"


async def test_a_shell_that_cannot_start_is_an_error_the_model_reads(tmp_path: Path) -> None:
    ctx = ToolContext(conversation_id="test", working_dir=tmp_path / "missing", state_dir=tmp_path)
    tool = TerminalTool(ctx)
    with pytest.raises(ToolError, match="Cannot start bash"):
        await run(tool, "echo hi")
    await tool.close()
