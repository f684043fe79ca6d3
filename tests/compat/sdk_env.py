"""A cached virtual environment holding the OpenHands SDK client, for the compatibility tier.

`openhands-sdk` and `openhands-tools` need Python >= 3.12 while the server runs on 3.11, so
the client lives in its own venv under `<repo>/.cache/sdk-venv/<key>` (gitignored), keyed by
the Python version and the pinned package versions. It is built once (under a file lock, so
concurrent test runs do not race) and reused; a `.complete` marker is written only after a
successful install, so an interrupted build is redone.

    python = sdk_python()          # Path to the venv's python, or raises SdkUnavailable

`reference_python()` builds a second venv that also holds `openhands-agent-server` (the
public reference server), for the benchmark and for checking the tier against the reference.

Python >= 3.12 is looked for in `AGENT_SERVER_SDK_PYTHON`, then `python3.13`/`python3.12` on
PATH, then pyenv's versions. Run `python tests/compat/sdk_env.py` to build ahead of time.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SDK_VERSION = "1.58.0"
TOOLS_VERSION = "1.58.0"
AGENT_SERVER_VERSION = "1.58.0"
WORKSPACE_VERSION = "1.58.0"
MIN_PYTHON = (3, 12)

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "sdk-venv"


class SdkUnavailable(RuntimeError):
    """No Python >= 3.12 on this machine (the only reason the tier is skipped)."""


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def _candidates() -> list[str]:
    found: list[str] = []
    if os.environ.get("AGENT_SERVER_SDK_PYTHON"):
        found.append(os.environ["AGENT_SERVER_SDK_PYTHON"])
    for name in ("python3.13", "python3.12", "python3.14"):
        path = shutil.which(name)
        if path:
            found.append(path)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if pyenv_root.is_dir():
        versions = []
        for d in pyenv_root.iterdir():
            m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", d.name)
            if m and (d / "bin" / "python").exists():
                versions.append(((int(m[1]), int(m[2]), int(m[3])), str(d / "bin" / "python")))
        # Prefer the oldest suitable minor (3.12 before 3.13): the SDK's wheels cover it best.
        found.extend(p for v, p in sorted(versions) if v[:2] >= MIN_PYTHON)
    if sys.version_info[:2] >= MIN_PYTHON:
        found.append(sys.executable)
    return found


def find_python() -> tuple[str, tuple[int, int]]:
    """The first Python >= 3.12 found, with its version."""
    for python in _candidates():
        version = _version_of(python)
        if version is not None and version >= MIN_PYTHON:
            return python, version
    raise SdkUnavailable(
        "the OpenHands SDK client needs Python >= 3.12 and none was found "
        "(set AGENT_SERVER_SDK_PYTHON, or put python3.12 on PATH or in pyenv)"
    )


def _build(target: Path, base_python: str, packages: list[str]) -> Path:
    python = target / "bin" / "python"
    marker = target / ".complete"
    if marker.exists() and python.exists():
        return python
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and python.exists():
            return python
        if target.exists():
            shutil.rmtree(target)
        subprocess.run([base_python, "-m", "venv", str(target)], check=True)
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *packages],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(packages)} failed:\n{result.stderr[-4000:]}")
        marker.write_text(" ".join(packages) + "\n")
    return python


def sdk_python() -> Path:
    """The python of the cached venv with openhands-sdk, openhands-tools and
    openhands-workspace (the Cloud workspace client of the control-plane tier), built if
    missing."""
    base, (major, minor) = find_python()
    key = f"py{major}.{minor}-sdk{SDK_VERSION}-tools{TOOLS_VERSION}-workspace{WORKSPACE_VERSION}"
    return _build(
        CACHE / key,
        base,
        [
            f"openhands-sdk=={SDK_VERSION}",
            f"openhands-tools=={TOOLS_VERSION}",
            f"openhands-workspace=={WORKSPACE_VERSION}",
        ],
    )


def reference_python() -> Path:
    """A separate cached venv that also holds the reference `openhands-agent-server`."""
    base, (major, minor) = find_python()
    key = f"py{major}.{minor}-ref-agent-server{AGENT_SERVER_VERSION}-sdk{SDK_VERSION}"
    return _build(
        CACHE / key,
        base,
        [
            f"openhands-sdk=={SDK_VERSION}",
            f"openhands-tools=={TOOLS_VERSION}",
            f"openhands-agent-server=={AGENT_SERVER_VERSION}",
        ],
    )


if __name__ == "__main__":
    print(sdk_python())
    if "--reference" in sys.argv:
        print(reference_python())
