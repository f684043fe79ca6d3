"""The SQL schema (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Migrations in `migrations/versions` create exactly this; `tests/control_plane/store/test_store.py`
checks that the two never drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.sql import false
from sqlalchemy.types import TypeDecorator

metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC out: SQLite keeps no offset, so it is restored here."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: every stored time is UTC with an offset")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value


ID = String(36)
#: SQLite makes only INTEGER PRIMARY KEY an auto-increasing rowid.
SEQ = BigInteger().with_variant(Integer(), "sqlite")

users = Table(
    "users",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("placement_seq", BigInteger, nullable=False, default=0),
    Column("created_at", UTCDateTime, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("created_at", UTCDateTime, nullable=False),
)

user_settings = Table(
    "user_settings",
    metadata,
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    Column("data", JSON, nullable=False),
    Column("llm_api_key_enc", Text),
    Column("secrets_enc", Text),
    Column("updated_at", UTCDateTime, nullable=False),
)

sandboxes = Table(
    "sandboxes",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("spec_id", String(100), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("status_detail", Text),
    Column("session_key_hash", String(64), nullable=False, unique=True),
    Column("session_key_enc", Text, nullable=False),
    Column("port", Integer),
    Column("ref", String(255)),
    Column("root_dir", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("last_activity_at", UTCDateTime, nullable=False),
    Column("running_since", UTCDateTime),
    Column("paused_at", UTCDateTime),
    Column("status_reason", String(16)),
    Column("unhealthy_since", UTCDateTime),
    Column("reconcile_after", UTCDateTime),
    Column("reconciled_by", String(64)),
    Column("cleanup_after", UTCDateTime, index=True),
    Column("pausing_reason", String(16)),
    Column("pausing_detail", Text),
    Column("host", String(255)),
    Column("network_policy", JSON),
    Column("name", String(64), nullable=False),
    Index("ix_sandboxes_user_name", "user_id", "name", unique=True),
)

start_tasks = Table(
    "start_tasks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("status", String(32), nullable=False, index=True),
    Column("detail", Text),
    Column("request_enc", Text, nullable=False),
    Column("app_conversation_id", ID),
    Column("sandbox_id", ID),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("made_sandbox", Boolean, nullable=False, default=False, server_default=false()),
)

app_conversations = Table(
    "app_conversations",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("sandbox_id", ID, ForeignKey("sandboxes.id"), nullable=False, index=True),
    Column("start_task_id", ID),
    Column("started", Boolean, nullable=False, default=False),
    Column("title", String(200)),
    Column("tags", JSON, nullable=False),
    Column("selected_repository", String(300)),
    Column("selected_branch", String(255)),
    Column("working_dir", Text, nullable=False),
    Column("execution_status", String(32)),
    Column("metrics", JSON),
    Column("observability", JSON),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("last_activity_at", UTCDateTime, nullable=False),
    Column("resume_run", Boolean, nullable=False, default=False, server_default=false()),
    Column("llm_model", String(200)),
    Column("trigger", String(32)),
    Column("pr_number", JSON),
    Column("git_provider", String(32)),
    Column("public", Boolean),
    Column("parent_conversation_id", ID, index=True),
    Index("ix_app_conversations_user_created", "user_id", "created_at"),
)

llm_usage = Table(
    "llm_usage",
    metadata,
    Column("user_id", ID, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    # Not a foreign key: what a sandbox spent outlives the sandbox.
    Column("sandbox_id", ID, primary_key=True),
    Column("day", String(10), primary_key=True),
    Column("requests", BigInteger, nullable=False, default=0),
    Column("prompt_tokens", BigInteger, nullable=False, default=0),
    Column("completion_tokens", BigInteger, nullable=False, default=0),
    Column("cost_usd", Float, nullable=False, default=0.0),
    Column("updated_at", UTCDateTime, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("kind", String(16), primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("holder", String(64), nullable=False, index=True),
    Column("expires_at", UTCDateTime, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    Column("conversation_id", ID, nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("source", String(16), nullable=False),
    Column("timestamp", String(40)),
    Column("body", Text, nullable=False),
    UniqueConstraint("conversation_id", "event_id", name="uq_events_conversation_event"),
    Index("ix_events_conversation_seq", "conversation_id", "seq"),
    Index("ix_events_conversation_kind_seq", "conversation_id", "kind", "seq"),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    # The record's own id, chosen before it is written: a write tried again is stored once.
    Column("id", ID, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("actor", String(80), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target_kind", String(32), nullable=False),
    Column("target_id", String(255)),
    # Not a foreign key: a record outlives the user, sandbox or key it names.
    Column("user_id", ID),
    Column("source", String(255), nullable=False),
    Column("details", JSON),
    UniqueConstraint("id", name="uq_audit_log_id"),
    Index("ix_audit_log_at", "at"),
    Index("ix_audit_log_user_seq", "user_id", "seq"),
    Index("ix_audit_log_actor_seq", "actor", "seq"),
    Index("ix_audit_log_action_seq", "action", "seq"),
)
