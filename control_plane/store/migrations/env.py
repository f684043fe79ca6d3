"""Alembic environment: run only programmatically, on the connection `store.db.migrate` hands
over."""

from __future__ import annotations

from alembic import context

from control_plane.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
