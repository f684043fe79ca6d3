"""`sandboxes.host`: the address a sandbox's agent server is published on, beside its port.

A process or container sandbox answers on this machine's loopback (NULL); a Swarm sandbox on
its node's address, which every control plane of the deployment must know to reach it.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("host", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("host")
