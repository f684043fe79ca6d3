"""Editor: everything the bridge says to the editor goes through here, masked.

The service masks the secrets it knows in its events; the bridge also knows the key it was
given and the values of the editor's MCP servers it turned into secrets, and takes them out
of every update, permission request, written file and error before they are sent, whatever
path they took to get there.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from acp import RequestError
from acp.interfaces import Client
from acp.schema import (
    ClientCapabilities,
    CurrentModeUpdate,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)
from pydantic import BaseModel

from bridge.errors import BridgeError
from bridge.updates import Update, WriteBack
from core.masking import Masker

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


class Editor:
    def __init__(self, conn: Client, secrets: dict[str, str]) -> None:
        self.conn = conn
        #: name -> value of what must never reach the editor; grows with each session's MCP values.
        self.secrets = secrets
        self.masker = Masker(self.secrets)
        self.capabilities = ClientCapabilities()

    @property
    def can_write(self) -> bool:
        fs = self.capabilities.fs
        return bool(fs is not None and fs.write_text_file)

    def mask(self, model: M) -> M:
        if not self.masker:
            return model
        text = model.model_dump_json(by_alias=True, exclude_none=True)
        masked = self.masker.text(text)
        return model if masked == text else type(model).model_validate_json(masked)

    def error(self, exc: BridgeError) -> RequestError:
        error = exc.to_acp()
        return RequestError(error.code, self.masker.text(str(error)), error.data)

    async def update(self, session_id: str, update: Update | CurrentModeUpdate) -> None:
        await self.conn.session_update(session_id=session_id, update=self.mask(update))

    async def ask(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        return await self.conn.request_permission(
            session_id=session_id, tool_call=self.mask(tool_call), options=options
        )

    async def write(self, session_id: str, write: WriteBack) -> str | None:
        """Write a file in the editor; None when done, else why not (for the transcript)."""
        try:
            await self.conn.write_text_file(
                session_id=session_id, path=write.path, content=self.masker.text(write.content)
            )
        except RequestError as exc:
            logger.warning("the editor did not write %s: %s", write.path, exc)
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - the connection's own failures
            logger.warning("the editor did not write %s: %s", write.path, type(exc).__name__)
            return type(exc).__name__
        return None


__all__ = ["Editor"]
