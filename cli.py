"""`agent-server`: the one command of two programs, dispatched before either is imported.

`agent-server acp` is the editor bridge (`bridge.cli`), a client of the services' HTTP APIs;
anything else is the agent server itself (`agent_server.__main__`). Neither imports the other:
editors are configured to run `agent-server acp`, so the command name joins them here, above
both, and nothing imports this module.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["acp"]:
        from bridge.cli import main as bridge

        bridge(args[1:])
        return
    from agent_server.__main__ import main as server

    server(argv)


if __name__ == "__main__":
    main()
