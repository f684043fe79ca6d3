"""Storage failures as answers: a database that fails in a way that passes (locked past the
wait, the disk full, the server restarting or away) is a 503 a client tries again after; any
other storage failure is a defect (500). Neither answer carries the driver's text, which holds
the statement and its parameters."""

from __future__ import annotations

import logging

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import HTTPConnection
from starlette.responses import Response

from control_plane.store.db import describe, transient
from web.errors import Unavailable, on_error, on_unexpected
from web.logs import escape

logger = logging.getLogger(__name__)


async def on_storage(conn: HTTPConnection, exc: Exception) -> Response | None:
    assert isinstance(exc, SQLAlchemyError)
    if not transient(exc):
        return await on_unexpected(conn, exc)
    logger.warning("storage failed on %s: %s", escape(conn.url.path), describe(exc))
    return await on_error(
        conn, Unavailable("the control plane's database cannot be used right now; try again")
    )
