"""`python -m agent_server.warm`: a warm pool's parked server (control_plane/sandboxes/pool.py).

It loads what a start and a first model call need (`template.preload`), then is `agent-server`
with the same arguments: it waits on its keys' pipe (AGENT_SERVER_KEYS_FD) like any server. The
start it is claimed for pays for none of the imports, and the pipe closing unused (its control
plane gone) ends it, as a server ends whose keys never come.
"""

from __future__ import annotations

from agent_server.__main__ import main
from agent_server.template import preload

if __name__ == "__main__":
    preload()
    main()
