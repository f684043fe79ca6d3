"""Bytecode for what a server loads, written once when its image is built.

    python -m agent_server.precompile

A container runs the server as an unprivileged user on a read-only root: a module without its
`.pyc` is compiled again in memory by every start that imports it. Compiling the whole virtual
environment instead costs ~100 MB of image for modules no server ever loads (litellm's proxy,
its providers' SDK paths, boto's). So this imports what a server imports to start and to make
its first model call (`template.preload`), every tool (the browser's Playwright client
included), and writes the `.pyc` of each module loaded from here down (`sys.prefix`) with an
unchecked hash: the image's code never changes under it, so no start reads a source to check.
A module left out is compiled on its first import, as without this.
"""

from __future__ import annotations

import importlib
import pkgutil
import py_compile
import sys
from pathlib import Path


def load_all() -> None:
    import tools
    from agent_server import template, warm  # noqa: F401  (warm: a warm pool's entry)

    template.preload()
    for found in pkgutil.walk_packages(tools.__path__, "tools."):
        importlib.import_module(found.name)


def compile_loaded(root: Path) -> int:
    """The `.pyc` of every loaded module whose source is under `root`; how many."""
    count = 0
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if source and source.endswith(".py") and Path(source).is_relative_to(root):
            py_compile.compile(
                source,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            count += 1
    return count


def main() -> None:
    load_all()
    print(f"agent-server: {compile_loaded(Path(sys.prefix))} modules compiled", file=sys.stderr)


if __name__ == "__main__":
    main()
