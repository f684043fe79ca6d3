"""The first schema: users and keys, settings, sandboxes, start tasks, app conversations, events.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(36)


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", ID, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("placement_seq", sa.BigInteger, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", ID, primary_key=True),
        sa.Column(
            "user_id", ID, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
        ),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "user_settings",
        sa.Column("user_id", ID, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("llm_api_key_enc", sa.Text),
        sa.Column("secrets_enc", sa.Text),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "sandboxes",
        sa.Column("id", ID, primary_key=True),
        sa.Column(
            "user_id", ID, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
        ),
        sa.Column("spec_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("status_detail", sa.Text),
        sa.Column("session_key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("session_key_enc", sa.Text, nullable=False),
        sa.Column("port", sa.Integer),
        sa.Column("pid", sa.Integer),
        sa.Column("pid_start_time", sa.BigInteger),
        sa.Column("root_dir", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("last_activity_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "start_tasks",
        sa.Column("id", ID, primary_key=True),
        sa.Column(
            "user_id", ID, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
        ),
        sa.Column("status", sa.String(32), nullable=False, index=True),
        sa.Column("detail", sa.Text),
        sa.Column("request_enc", sa.Text, nullable=False),
        sa.Column("app_conversation_id", ID),
        sa.Column("sandbox_id", ID),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "app_conversations",
        sa.Column("id", ID, primary_key=True),
        sa.Column("user_id", ID, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("sandbox_id", ID, sa.ForeignKey("sandboxes.id"), nullable=False, index=True),
        sa.Column("start_task_id", ID),
        sa.Column("started", sa.Boolean, nullable=False),
        sa.Column("title", sa.String(200)),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("selected_repository", sa.String(300)),
        sa.Column("selected_branch", sa.String(255)),
        sa.Column("working_dir", sa.Text, nullable=False),
        sa.Column("execution_status", sa.String(32)),
        sa.Column("metrics", sa.JSON),
        sa.Column("observability", sa.JSON),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("last_activity_at", UTCDateTime, nullable=False),
        sa.Index("ix_app_conversations_user_created", "user_id", "created_at"),
    )
    op.create_table(
        "events",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("timestamp", sa.String(40)),
        sa.Column("body", sa.Text, nullable=False),
        sa.UniqueConstraint("conversation_id", "event_id", name="uq_events_conversation_event"),
        sa.Index("ix_events_conversation_seq", "conversation_id", "seq"),
        sa.Index("ix_events_conversation_kind_seq", "conversation_id", "kind", "seq"),
    )


def downgrade() -> None:
    for table in (
        "events",
        "app_conversations",
        "start_tasks",
        "sandboxes",
        "user_settings",
        "api_keys",
        "users",
    ):
        op.drop_table(table)
