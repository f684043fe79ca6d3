"""The audit log: every security-relevant act, who did it, to what, when and from where.

An operator answering "who deleted this sandbox, who changed that policy, when was this key
made" reads it (`control-plane audit`, `GET /api/v1/admin/audit`). What is recorded:

- `api_key.create`, `api_key.revoke`: by `cli`, of a user (`keys revoke ID`: of the key);
- `sandbox.create`, `.pause`, `.resume`, `.delete`: by the user, or by `system` (the
  lifecycle's idle or 12-hour pause, its deletion time); `sandbox.network_policy` (the policy);
- `settings.update` (the names of the fields changed, never a value), `secret.set`,
  `secret.delete` (the secret's name);
- `secret.read` by `sandbox:<id>` (a LookupSecret's fetch), `llm_token.read` (a sandbox's
  gateway token read through `users/me`);
- `conversation.start` (its start task; a start may place it in a new sandbox),
  `conversation.delete` (and `sandbox.delete` when the sandbox goes with it).

A record is written right after its act succeeded, by the code that asked for the act (a
route, the `keys` command, the reconciler), in a transaction of its own: most acts are not one
database write (a pause freezes a process, then stores the status), so there is no one
transaction to join. The write is tried again while its failure passes (`store.db.retrying`;
the record's id is chosen first, so it is stored once). Should it still fail, the act is not
undone nor reported failed: the record goes whole into the log at ERROR instead (an operator's
alert), so it is not lost. A failed act is not recorded; the request's answer says it failed.

A record never holds a secret: names only, and `details` pass through `core.masking` (the
values of secret-named keys REDACTED, the values the caller knows of masked anywhere in the
text) and are bounded (`MAX_DETAILS`), as are the other fields. Rows are kept past the
deletion of what they describe (no foreign key) and are never changed (`store.audit`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from control_plane.store import Database
from control_plane.store import audit as rows
from control_plane.store.audit import AuditEntry, AuditQuery
from control_plane.store.db import retrying
from core.masking import Masker, redact

__all__ = ["CLI", "OPERATOR", "SYSTEM", "AuditEntry", "AuditLog", "AuditQuery", "by_sandbox"]

logger = logging.getLogger(__name__)

#: Who acted, besides a user (by id).
OPERATOR = "operator"
CLI = "cli"
SYSTEM = "system"
#: Bytes of a record's details as JSON at most; longer ones are cut (and say so).
MAX_DETAILS = 4096
#: Characters of each text field at most (the columns' sizes).
LIMITS = {"actor": 80, "action": 64, "target_kind": 32, "target_id": 255, "source": 255}


def by_sandbox(sandbox_id: str) -> str:
    """The actor of what a sandbox does by its own session key."""
    return f"sandbox:{sandbox_id}"


def bounded_details(details: dict[str, Any] | None, secrets: Iterable[str] = ()) -> Any:
    """`details` as stored: secret-named keys REDACTED, `secrets` masked wherever they
    appear, and at most MAX_DETAILS bytes of JSON (cut ones keep their first part as text)."""
    if details is None:
        return None
    masker = Masker({str(i): value for i, value in enumerate(secrets) if value})
    safe = redact(masker.data(details))
    text = json.dumps(safe, default=str, ensure_ascii=False)
    if len(text.encode()) <= MAX_DETAILS:
        return json.loads(text)  # (what `default=str` made of a non-JSON value)
    cut = text.encode()[: MAX_DETAILS - 256].decode(errors="ignore")
    return {"truncated": True, "text": cut}


class AuditLog:
    """Appends records and reads them back; one per control plane (and one per CLI run)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def record(
        self,
        *,
        actor: str,
        action: str,
        target_kind: str,
        target_id: str | None,
        source: str,
        user_id: str | None = None,
        user_name: str | None = None,
        details: dict[str, Any] | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        """Append one act (see the module's note: never raises for storage). `user_name`:
        the account it concerns by name, when its id is not at hand (the `keys` command);
        `secrets`: values the caller knows of, masked in `details`."""
        values: dict[str, Any] = {
            "id": str(uuid.uuid4()),
            "at": self.db.now(),
            "actor": actor,
            "action": action,
            "target_kind": target_kind,
            "target_id": target_id,
            "source": source,
        }
        for name, most in LIMITS.items():
            if values[name] is not None:
                values[name] = str(values[name])[:most]
        values["user_id"] = user_id
        values["details"] = bounded_details(details, secrets)
        try:
            await retrying(
                lambda: rows.append(self.db, values, user_name), f"audit record {action}"
            )
        except SQLAlchemyError:
            kept = {**values, "at": values["at"].isoformat(), "user_name": user_name}
            logger.error(
                "audit record not stored, kept here: %s", json.dumps(kept, ensure_ascii=False)
            )

    async def search(self, asked: AuditQuery, limit: int) -> list[AuditEntry]:
        """Matching records, newest first."""
        return await rows.search(self.db, asked, limit)
