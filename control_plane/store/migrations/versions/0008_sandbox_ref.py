"""`sandboxes.ref` (issue 38, T2): the provider's opaque key to its sandbox, which replaces
`pid` and `pid_start_time`.

Those two columns were shaped like a process, and only the process kind meant them literally:
Docker kept 60 bits of the container's id in `pid_start_time` and its main process's host pid
in `pid`, Swarm 60 bits (of a hash) of the service's id and a pid of 0 or of its task's
container. Now each kind makes and reads its own `Handle.ref`, and the domain never looks
inside it.

A sandbox that runs across the upgrade must still be found. The upgrade cannot write every
kind's new shape: the row does not say which kind made it, and the container's and the
service's ids are not in the database (60 bits of one, and a hash of the other, cannot be
turned back into the id). So it writes the one shape it can make from the old columns for
every kind, `"<pid>:<pid_start_time>"`:
- for a process that is its new shape verbatim (the launcher's pid and its kernel start time);
- Docker and Swarm accept it as well, as the shape of a sandbox started before this revision,
  and compare its part after the colon with their 60-bit key of the id they find
  (`providers/docker/engine.py` `refers_to`, `providers/swarm/spec.py` `refers_to`). A
  sandbox started after it stores the id itself.

A row without both old columns gets no ref: it had no handle either.

The downgrade writes the old columns back from each ref: one of that shape is split at its
colon; a container's id (64 hex digits) gives Docker's old key and a service's id Swarm's (the
two one-line functions are copied here, as they were at this revision: a migration does not
follow the code it once matched), with a pid of 0, which neither kind read.

Revision ID: 0008
Revises: 0007
"""

import hashlib
import string

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

sandboxes = sa.table(
    "sandboxes",
    sa.column("id", sa.String),
    sa.column("ref", sa.String),
    sa.column("pid", sa.Integer),
    sa.column("pid_start_time", sa.BigInteger),
)


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("ref", sa.String(255)))
    op.execute(
        sandboxes.update()
        .where(sandboxes.c.pid.is_not(None), sandboxes.c.pid_start_time.is_not(None))
        .values(
            ref=sa.cast(sandboxes.c.pid, sa.String)
            + ":"
            + sa.cast(sandboxes.c.pid_start_time, sa.String)
        )
    )
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("pid_start_time")
        batch.drop_column("pid")


def old_columns(ref: str) -> tuple[int, int]:
    """`pid` and `pid_start_time` as the revision before kept them for the sandbox `ref` names."""
    pid, colon, start = ref.partition(":")
    if colon:
        return int(pid), int(start)
    if len(ref) == 64 and all(c in string.hexdigits for c in ref):  # a container's id
        return 0, int(ref[:15], 16)
    return 0, int(hashlib.sha256(ref.encode()).hexdigest()[:15], 16)  # a service's id


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("pid", sa.Integer))
        batch.add_column(sa.Column("pid_start_time", sa.BigInteger))
    bind = op.get_bind()
    found = bind.execute(
        sa.select(sandboxes.c.id, sandboxes.c.ref).where(sandboxes.c.ref.is_not(None))
    )
    for sandbox_id, ref in found.all():
        pid, start = old_columns(ref)
        bind.execute(
            sandboxes.update()
            .where(sandboxes.c.id == sandbox_id)
            .values(pid=pid, pid_start_time=start)
        )
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("ref")
