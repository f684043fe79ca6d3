"""Background commands (agent_server.commands), in-process: the list kept per scope stays bounded,
running commands included."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_server import commands
from agent_server.commands import Commands
from agent_server.workspace import Scope
from core.masking import Masker
from web.errors import Conflict


async def test_a_full_scope_of_running_commands_refuses_another_until_one_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "MAX_KEPT", 3)
    scope = Scope("host", (tmp_path,), {}, Masker({}))
    kept = Commands()
    try:
        running = [await kept.start(scope, "sleep 30", None, 60) for _ in range(3)]
        with pytest.raises(Conflict, match="3 background commands are still running"):
            await kept.start(scope, "echo one-too-many", None, 60)
        assert len(kept.search(scope, kind="BashCommand")) == 3  # nothing was added
        assert await kept.stop(scope, running[0].id)
        again = await kept.start(scope, "echo room-again", None, 60)
        ids = [c.id for c in kept.search(scope, kind="BashCommand")]
        assert running[0].id not in ids and again.id in ids and len(ids) == 3
    finally:
        await kept.close()


async def _outputs(kept: Commands, scope: Scope, command_id: str) -> list[dict[str, object]]:
    return [o.model_dump() for o in kept.search(scope, kind="BashOutput", command_id=command_id)]


async def _wait(
    kept: Commands, scope: Scope, command_id: str, until: object, timeout: float = 30
) -> list[dict[str, object]]:
    """The command's BashOutputs once `until(outputs)` holds (polled, as a client does)."""
    assert callable(until)
    async with asyncio.timeout(timeout):
        while not until(outputs := await _outputs(kept, scope, command_id)):
            await asyncio.sleep(0.02)
    return outputs


def _joined(outputs: list[dict[str, object]], key: str) -> str:
    """The output as the OpenHands SDK's RemoteWorkspace rebuilds it: pieces joined in order."""
    ordered = sorted(outputs, key=lambda o: o["order"])  # type: ignore[arg-type,return-value]
    return "".join(str(o[key] or "") for o in ordered)


async def test_a_running_command_reports_its_output_as_it_comes_masked_whole(
    tmp_path: Path,
) -> None:
    """Issue 30.7: a background command's output was only seen once it ended. Now a poller
    sees pieces while it runs; a secret split between two writes is never shown in part."""
    secret = "s3cr3t-value-4242"
    scope = Scope("host", (tmp_path,), {"TOKEN": secret}, Masker({"TOKEN": secret}))
    kept = Commands()
    go = tmp_path / "go"
    try:
        command = await kept.start(
            scope,
            f"printf 'first\\n{secret[:8]}'; while [ ! -e {go} ]; do sleep 0.05; done; "
            f"printf '{secret[8:]}\\nsecond\\n'; echo err >&2",
            None,
            60,
        )
        early = await _wait(kept, scope, command.id, lambda o: "first" in _joined(o, "stdout"))
        assert all(o["exit_code"] is None for o in early)  # it is still running
        assert secret[:8] not in _joined(early, "stdout")  # held back: maybe a secret's start
        go.touch()
        done = await _wait(
            kept, scope, command.id, lambda o: any(x["exit_code"] is not None for x in o)
        )
        assert [o["order"] for o in done] == list(range(len(done))) and len(done) >= 2
        assert _joined(done, "stdout") == "first\n<secret-hidden>\nsecond\n"
        assert _joined(done, "stderr") == "err\n" and done[-1]["exit_code"] == 0
        # A poller asking for what is after the last order it saw gets nothing twice.
        later = kept.search(
            scope, kind="BashOutput", command_id=command.id, order_gt=int(early[-1]["order"])
        )  # type: ignore[call-overload]
        assert {o.id for o in later} == {str(o["id"]) for o in done[len(early) :]}
    finally:
        await kept.close()


async def test_a_flood_of_output_stays_bounded_in_pieces_and_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "MAX_PIECES", 3)
    scope = Scope("host", (tmp_path,), {}, Masker({}))
    kept = Commands()
    try:
        command = await kept.start(
            scope,
            "for i in $(seq 60); do head -c 10000 /dev/zero | tr '\\0' x; sleep 0.01; done",
            None,
            60,
        )
        done = await _wait(
            kept, scope, command.id, lambda o: any(x["exit_code"] is not None for x in o)
        )
        stdout = _joined(done, "stdout")
        assert len(done) <= 4 and stdout.startswith("x" * commands.MAX_OUTPUT_BYTES)
        assert stdout.endswith(
            "[output truncated: 600000 bytes in all, the first "
            f"{commands.MAX_OUTPUT_BYTES} characters shown]"
        )
    finally:
        await kept.close()
