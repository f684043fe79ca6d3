"""`control-plane node-fence`: what an operator of a gVisor Swarm node is handed (the token in a
file, the `docker run` of the fence on runc), and refused where the deployment's key is not."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from control_plane.__main__ import main
from control_plane.crypto import KEY_FILE

SWARM = {
    "CONTROL_PLANE_SANDBOX_PROVIDER": "swarm",
    "CONTROL_PLANE_HOST": "0.0.0.0",
    "CONTROL_PLANE_PUBLIC_URL": "http://cp.internal:3000",
    "CONTROL_PLANE_SANDBOX_RUNTIME": "runsc",
}


def test_the_token_is_written_for_the_nodes_and_not_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {
        **SWARM,
        "CONTROL_PLANE_STATE_DIR": str(tmp_path / "state"),
        "CONTROL_PLANE_SECRET_KEY": "a-deployment-key",
    }.items():
        monkeypatch.setenv(name, value)
    token = tmp_path / "fence-token"
    main(["node-fence", "--token-file", str(token)])
    printed = capsys.readouterr().out
    assert stat.S_IMODE(token.stat().st_mode) == 0o400 and token.read_text()
    assert token.read_text() not in printed
    assert "--runtime runc" in printed and f"source={token}," in printed


def test_a_place_without_the_deployments_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key made here would give a token the control planes refuse: nothing is written."""
    state = tmp_path / "state"
    for name, value in {**SWARM, "CONTROL_PLANE_STATE_DIR": str(state)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CONTROL_PLANE_SECRET_KEY", raising=False)
    with pytest.raises(SystemExit) as ended:
        main(["node-fence", "--token-file", str(tmp_path / "fence-token")])
    assert ended.value.code == 2
    assert "secret key is not here" in capsys.readouterr().err
    assert not (tmp_path / "fence-token").exists() and not (state / KEY_FILE).exists()
