"""The network boundary (issue 36): each sandbox's egress policy, and what the LLM gateway
counted per user, sandbox and day (UTC).

- `sandboxes.network_policy`: the policy as JSON (`control_plane.network.policy`); null for a
  sandbox made before this revision (it is `open`, the default);
- `llm_usage`: requests, tokens and cost through the gateway, one row per user, sandbox and
  day (`YYYY-MM-DD`), kept after the sandbox is gone.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

from control_plane.store.tables import ID, UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("network_policy", sa.JSON))
    op.create_table(
        "llm_usage",
        sa.Column("user_id", ID, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("sandbox_id", ID, primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("llm_usage")
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("network_policy")
