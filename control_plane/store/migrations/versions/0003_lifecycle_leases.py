"""Several control planes on one database, and the lifecycle's reasons.

- `leases`: which control-plane process works on a start task or acts on a sandbox, until when
  (renewed while it works; taken over once it expires, e.g. after its holder was SIGKILLed).
- `sandboxes.status_reason`: why the status last changed (IDLE, SESSION_CAP, VANISHED, ...);
  `unhealthy_since`: when its health check began to fail (ERROR after the grace period);
  `reconcile_after`, `reconciled_by`: the reconciler's round claims, so each sandbox is looked
  at by one process per round.
- `app_conversations.resume_run`: a run the control plane paused before freezing the sandbox,
  continued when the sandbox resumes.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False, index=True),
        sa.Column("expires_at", UTCDateTime, nullable=False),
    )
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("status_reason", sa.String(16)))
        batch.add_column(sa.Column("unhealthy_since", UTCDateTime))
        batch.add_column(sa.Column("reconcile_after", UTCDateTime))
        batch.add_column(sa.Column("reconciled_by", sa.String(64)))
    with op.batch_alter_table("app_conversations") as batch:
        batch.add_column(
            sa.Column("resume_run", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("app_conversations") as batch:
        batch.drop_column("resume_run")
    with op.batch_alter_table("sandboxes") as batch:
        for column in ("reconciled_by", "reconcile_after", "unhealthy_since", "status_reason"):
            batch.drop_column(column)
    op.drop_table("leases")
