"""Migrations that move data, on SQLite and on a real PostgreSQL: a database made by an older
control plane, with sandboxes running, upgraded to head (and back) keeps them findable."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Connection

from control_plane.models import SandboxStatus
from control_plane.providers.docker import engine
from control_plane.providers.process.leader import Leader
from control_plane.providers.swarm import spec
from control_plane.sandboxes.starts import handle_of
from control_plane.store import Database, accounts
from control_plane.store import sandboxes as rows
from control_plane.store.db import MIGRATIONS
from control_plane.store.tables import UTCDateTime, sandboxes
from core import processes

pytestmark = [pytest.mark.asyncio, pytest.mark.e2e]  # a real PostgreSQL server

CONTAINER_ID = "0123456789abcdef" * 4
SERVICE_ID = "q5xw3kz0r8m1ykd7c2v9n4hts"

#: The sandboxes table as revision 0007 has it, as far as these rows fill it.
sandboxes_0007 = sa.table(
    "sandboxes",
    sa.column("id", sa.String),
    sa.column("user_id", sa.String),
    sa.column("spec_id", sa.String),
    sa.column("status", sa.String),
    sa.column("session_key_hash", sa.String),
    sa.column("session_key_enc", sa.String),
    sa.column("port", sa.Integer),
    sa.column("pid", sa.Integer),
    sa.column("pid_start_time", sa.BigInteger),
    sa.column("root_dir", sa.String),
    sa.column("created_at", UTCDateTime),
    sa.column("updated_at", UTCDateTime),
    sa.column("last_activity_at", UTCDateTime),
)


async def migrate(db: Database, revision: str, *, down: bool = False) -> None:
    """Alembic to `revision` on `db`, as `Database.migrate` goes to head."""

    def run(connection: Connection) -> None:
        config = AlembicConfig()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)

    async with db.begin() as conn:
        await conn.run_sync(run)


async def test_sandboxes_running_across_the_upgrade_to_refs_are_found_by_their_kind(
    database_url: str,
) -> None:
    """Revision 0008 replaces `pid` and `pid_start_time` with the kind's `ref`: a process
    sandbox's is its launcher's pid and start time, read back by the process kind (and this
    process, standing in for the launcher, is found running); a container's and a service's
    keep the old key their kind still tells its own from another of the same name by; a
    sandbox not started yet has none. The downgrade writes the old columns back."""
    me = os.getpid()
    started = processes.start_time(me)
    assert started is not None
    old = {
        "process": (me, started),
        "docker": (4242, engine.id_key(CONTAINER_ID)),
        "swarm": (0, spec.service_key(SERVICE_ID)),
        "starting": (None, None),
    }
    db = Database(database_url)
    try:
        await migrate(db, "0007")
        user = await accounts.get_or_create_user(db, "alice")
        moment = datetime.now(UTC)
        async with db.begin() as conn:
            for name, (pid, start) in old.items():
                await conn.execute(
                    sandboxes_0007.insert().values(
                        id=name,
                        user_id=user.id,
                        spec_id=name,
                        status=(SandboxStatus.STARTING if pid is None else SandboxStatus.RUNNING),
                        session_key_hash=name.ljust(64, "0"),
                        session_key_enc="x",
                        port=None if pid is None else 40000,
                        pid=pid,
                        pid_start_time=start,
                        root_dir=f"/tmp/{name}",
                        created_at=moment,
                        updated_at=moment,
                        last_activity_at=moment,
                    )
                )
        await db.migrate()

        found = await rows.get_many(db, list(old))
        handles = {name: handle_of(row) for name, row in found.items()}
        assert handles["starting"] is None and found["starting"].ref is None
        process, docker, swarm = handles["process"], handles["docker"], handles["swarm"]
        assert process is not None and docker is not None and swarm is not None
        assert Leader.of(process) == Leader(pid=me, started=started)
        assert Leader.of(process).running()
        assert (process.port, process.host) == (40000, "127.0.0.1")
        assert engine.refers_to(docker.ref, CONTAINER_ID)
        assert not engine.refers_to(docker.ref, "f" + CONTAINER_ID[1:])  # another of its name
        assert spec.refers_to(swarm.ref, SERVICE_ID)
        assert not spec.refers_to(swarm.ref, SERVICE_ID[::-1])
        # A start after the upgrade stores the container's and the service's ids themselves.
        for name, ref in (("docker", CONTAINER_ID), ("swarm", SERVICE_ID)):
            await rows.set_fields(db, name, ref=ref)

        await migrate(db, "0007", down=True)
        async with db.connect() as conn:
            back = {
                r.id: (r.pid, r.pid_start_time)
                for r in await conn.execute(
                    sa.select(
                        sandboxes_0007.c.id, sandboxes_0007.c.pid, sandboxes_0007.c.pid_start_time
                    )
                )
            }
        assert back == {**old, "docker": (0, old["docker"][1])}  # Docker's pid was never read
    finally:
        await db.close()


#: The sandboxes table as revision 0009 has it, as far as these rows fill it.
sandboxes_0009 = sa.table(
    "sandboxes",
    sa.column("id", sa.String),
    sa.column("user_id", sa.String),
    sa.column("spec_id", sa.String),
    sa.column("status", sa.String),
    sa.column("session_key_hash", sa.String),
    sa.column("session_key_enc", sa.String),
    sa.column("root_dir", sa.String),
    sa.column("created_at", UTCDateTime),
    sa.column("updated_at", UTCDateTime),
    sa.column("last_activity_at", UTCDateTime),
)


async def test_sandboxes_made_before_names_are_named_on_the_upgrade(database_url: str) -> None:
    """Revision 0010 adds `sandboxes.name`: every existing row is given a readable name,
    unique among its user's sandboxes (a MISSING one's too), and the column holds that from
    then on; the downgrade takes the column away again."""
    db = Database(database_url)
    try:
        await migrate(db, "0009")
        alice = await accounts.get_or_create_user(db, "alice")
        bob = await accounts.get_or_create_user(db, "bob")
        moment = datetime.now(UTC)
        owners = {f"a{i}": alice.id for i in range(30)} | {"b0": bob.id, "b1": bob.id}
        async with db.begin() as conn:
            for n, (sandbox_id, owner) in enumerate(owners.items()):
                await conn.execute(
                    sandboxes_0009.insert().values(
                        id=sandbox_id,
                        user_id=owner,
                        spec_id="process",
                        status=SandboxStatus.MISSING if n % 3 else SandboxStatus.RUNNING,
                        session_key_hash=(sandbox_id + "-").ljust(64, "0"),
                        session_key_enc="x",
                        root_dir=f"/tmp/{sandbox_id}",
                        created_at=moment,
                        updated_at=moment,
                        last_activity_at=moment,
                    )
                )
        await db.migrate()

        found = await rows.get_many(db, list(owners))
        named = {sandbox_id: row.name for sandbox_id, row in found.items()}
        assert all(re.fullmatch(r"[a-z]+-[a-z]+-\d{2,}", name) for name in named.values()), named
        for owner in (alice.id, bob.id):
            mine = [named[i] for i, o in owners.items() if o == owner]
            assert len(set(mine)) == len(mine)
        # The database holds them unique per user from now on.
        with pytest.raises(sa.exc.IntegrityError):
            async with db.begin() as conn:
                await conn.execute(
                    sa.update(sandboxes).where(sandboxes.c.id == "a1").values(name=named["a0"])
                )

        await migrate(db, "0009", down=True)
        async with db.connect() as conn:
            columns = await conn.run_sync(
                lambda sync: {c["name"] for c in sa.inspect(sync).get_columns("sandboxes")}
            )
        assert "name" not in columns and "root_dir" in columns
    finally:
        await db.close()
