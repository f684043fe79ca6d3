"""The app server's fields of an app conversation (issue 26), where the SPEC is silent.

- `llm_model`: the model its agent runs (from the agent server's conversation info);
- `trigger`, `pr_number`, `git_provider`, `public`: kept as clients set them;
- `parent_conversation_id`: a sub-agent's parent (its record lists `sub_conversation_ids`).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import ID

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("app_conversations") as batch:
        batch.add_column(sa.Column("llm_model", sa.String(200)))
        batch.add_column(sa.Column("trigger", sa.String(32)))
        batch.add_column(sa.Column("pr_number", sa.JSON))
        batch.add_column(sa.Column("git_provider", sa.String(32)))
        batch.add_column(sa.Column("public", sa.Boolean))
        batch.add_column(sa.Column("parent_conversation_id", ID))
    op.create_index(
        "ix_app_conversations_parent_conversation_id",
        "app_conversations",
        ["parent_conversation_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_app_conversations_parent_conversation_id", "app_conversations")
    with op.batch_alter_table("app_conversations") as batch:
        for column in (
            "parent_conversation_id",
            "public",
            "git_provider",
            "pr_number",
            "trigger",
            "llm_model",
        ):
            batch.drop_column(column)
