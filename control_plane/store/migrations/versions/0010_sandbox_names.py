"""`sandboxes.name` (issue 39 item 7): a readable name for each sandbox ("brisk-otter-42"),
unique among its user's sandboxes, shown and confirmed in the console instead of its 32-hex id.

Existing rows are given generated names on the upgrade, each user's oldest first, so that no
row is left without one; then the column is NOT NULL and (user_id, name) unique. The names
are drawn from `control_plane.sandboxes.names` as it is when the upgrade runs: any name of
its form is as good as another, so the migration need not keep this revision's word lists.

Revision ID: 0010
Revises: 0009
"""

import random

import sqlalchemy as sa
from alembic import op

from control_plane.sandboxes.names import generate

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

sandboxes = sa.table(
    "sandboxes",
    sa.column("id", sa.String),
    sa.column("user_id", sa.String),
    sa.column("name", sa.String),
    sa.column("created_at", sa.DateTime),
)


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("name", sa.String(64)))
    bind = op.get_bind()
    found = bind.execute(
        sa.select(sandboxes.c.id, sandboxes.c.user_id).order_by(
            sandboxes.c.user_id, sandboxes.c.created_at, sandboxes.c.id
        )
    )
    taken: dict[str, set[str]] = {}
    for sandbox_id, user_id in found.all():
        names = taken.setdefault(user_id, set())
        # Seeded by the id: the same database upgraded twice names its sandboxes alike.
        name = generate(names, random.Random(sandbox_id))
        names.add(name)
        bind.execute(sandboxes.update().where(sandboxes.c.id == sandbox_id).values(name=name))
    with op.batch_alter_table("sandboxes") as batch:
        batch.alter_column("name", existing_type=sa.String(64), nullable=False)
        batch.create_index("ix_sandboxes_user_name", ["user_id", "name"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_index("ix_sandboxes_user_name")
        batch.drop_column("name")
