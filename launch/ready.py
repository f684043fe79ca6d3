""" "Serving on this port": how a sandbox's agent server tells its launcher it is ready.

With `--port 0` the OS picks the port, and only the bound socket knows it; so once serving, the
server writes `{"port", "pid"}` to the file `AGENT_SERVER_READY_FILE` names (atomically: a
reader never sees half of it) and to the pipe `AGENT_SERVER_READY_FD` names (in one write, so
its reader sees all of it or nothing, then closed). The process provider waits on either.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from core.files import write_json

#: What a reader of the pipe takes at most (the JSON is some 30 bytes).
MAX_BYTES = 4096


class Ready(BaseModel):
    model_config = ConfigDict(frozen=True)

    port: int
    pid: int | None = None
    """The server's pid as it sees it (in a pid namespace of its own, not the host's)."""

    def encode(self) -> bytes:
        """The pipe's bytes."""
        return json.dumps({"port": self.port, "pid": self.pid}).encode()

    def write(self, path: Path) -> None:
        """The file, written atomically."""
        write_json(path, {"port": self.port, "pid": self.pid})

    @classmethod
    def decode(cls, data: bytes | str) -> Ready:
        """What a server said (ValueError when it is not `{"port", ...}`)."""
        return cls.model_validate(json.loads(data))

    @classmethod
    def read(cls, path: Path) -> Ready:
        """The file's (OSError when there is none yet, ValueError when it is not one)."""
        return cls.decode(path.read_bytes())
