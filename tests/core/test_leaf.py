"""core is a leaf: importing all of it loads nothing of agent_server or tools."""

from __future__ import annotations

import subprocess
import sys

import core


def test_core_imports_nothing_of_the_packages_that_use_it() -> None:
    modules = ", ".join(f"core.{name}" for name in core.__all__)
    check = (
        f"import sys, {modules}; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('agent_server', 'tools')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
