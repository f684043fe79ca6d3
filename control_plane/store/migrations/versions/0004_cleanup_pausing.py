"""What a control plane that dies half-way leaves for another to finish.

- `start_tasks.made_sandbox`: the sandbox of the task's placement was made for it (stored with
  the placement), so whichever process ends the task in ERROR removes that sandbox too.
- `sandboxes.cleanup_after`: an ERROR or MISSING sandbox whose remains (process, container,
  volume, files) are still to be removed, from when; cleared once they are. The reconciler
  tries again each time it is due, so a clean-up Docker refused once is not left for ever.
- `sandboxes.pausing_reason`, `pausing_detail`: a pause under way (recorded before the runs are
  paused and the sandbox frozen): a successor finds a frozen sandbox paused, not hung.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("start_tasks") as batch:
        batch.add_column(
            sa.Column("made_sandbox", sa.Boolean, nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("cleanup_after", UTCDateTime))
        batch.add_column(sa.Column("pausing_reason", sa.String(16)))
        batch.add_column(sa.Column("pausing_detail", sa.Text))
    op.create_index("ix_sandboxes_cleanup_after", "sandboxes", ["cleanup_after"])


def downgrade() -> None:
    op.drop_index("ix_sandboxes_cleanup_after", "sandboxes")
    with op.batch_alter_table("sandboxes") as batch:
        for column in ("pausing_detail", "pausing_reason", "cleanup_after"):
            batch.drop_column(column)
    with op.batch_alter_table("start_tasks") as batch:
        batch.drop_column("made_sandbox")
