"""Sandbox timers: when a sandbox last became RUNNING (the 12-hour cap) and when it was paused
(the deletion time).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("running_since", UTCDateTime))
        batch.add_column(sa.Column("paused_at", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("paused_at")
        batch.drop_column("running_since")
