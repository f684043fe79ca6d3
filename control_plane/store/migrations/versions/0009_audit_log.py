"""The audit log (issue 42): who did what to which thing, when and from where.

- `audit_log`: one row per security-relevant act (an API key made or revoked, a sandbox
  started, paused, resumed or deleted, a network policy, a setting or a secret changed; the
  control plane's own acts, an idle pause or a deletion, under the actor `system`). No foreign
  key: a record outlives the user, sandbox or key it names. `id` is chosen before the write,
  so a write tried again after a passing failure is stored once.
- Append-only in the database itself, not by convention alone: a trigger refuses every UPDATE
  and DELETE (and TRUNCATE on PostgreSQL), whoever sends it. Dropping the table (this
  revision's downgrade) is the one way to remove rows.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import ID, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

REFUSAL = "audit_log is append-only"

POSTGRES_FUNCTION = f"""
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{REFUSAL}: % refused', TG_OP;
END
$$
"""
POSTGRES_TRIGGERS = (
    "CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log "
    "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()",
    "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
    "FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()",
)
SQLITE_TRIGGERS = tuple(
    f"CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} ON audit_log "
    f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
    for verb in ("UPDATE", "DELETE")
)


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("id", ID, nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("actor", sa.String(80), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target_kind", sa.String(32), nullable=False),
        sa.Column("target_id", sa.String(255)),
        sa.Column("user_id", ID),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("details", sa.JSON),
        sa.UniqueConstraint("id", name="uq_audit_log_id"),
        sa.Index("ix_audit_log_at", "at"),
        sa.Index("ix_audit_log_user_seq", "user_id", "seq"),
        sa.Index("ix_audit_log_actor_seq", "actor", "seq"),
        sa.Index("ix_audit_log_action_seq", "action", "seq"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRES_FUNCTION)
        for statement in POSTGRES_TRIGGERS:
            op.execute(statement)
    else:
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    op.drop_table("audit_log")  # its triggers go with it
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION audit_log_append_only()")
