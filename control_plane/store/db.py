"""The database: one async engine (SQLite through aiosqlite, or PostgreSQL through asyncpg),
its Alembic migrations applied at start, and the few statements that differ by dialect.

SQLite takes one writer at a time for the whole file, and its own wait for the lock (the busy
timeout) is a sleeping poll that is neither fair nor bounded in practice: under a burst, a
writer that keeps losing the race fails with "database is locked" while others go through. So
on SQLite the writes of this process queue here, in order, before they touch the file (one
writer), and each write transaction begins IMMEDIATE: it holds the write lock from its first
statement, so a transaction that reads then writes never finds its snapshot stale half-way
(SQLITE_BUSY at once, which no timeout helps). The busy timeout is left for other processes on
the same file (`control-plane keys create`). PostgreSQL needs none of this: its row locks wait.

SQLite statements run on the event loop's own thread, at once (`SteadyConnection`): one on this
local file takes tens of microseconds, where a round trip to aiosqlite's thread took 0.3-2 ms
once the loop was busy (the thread waits for the GIL), three per statement: a start, some 25
statements in a row, reached READY in 73-87 ms through the thread and in 43-51 ms without it
(`bench/start_stages.py --warm-pool 1`). What may wait goes to a thread, so the loop never
does: taking the lock another process holds (the connection's own busy timeout is 0; a busy
answer is tried again on the thread, under the real one), a close (after whatever the thread
still runs), what a caller marks long (`aside`: a search through a long conversation's events,
whose cost grows with what a user stored), and the WAL's checkpoints. A COMMIT itself runs at
once: in WAL mode at synchronous NORMAL it appends to the WAL and syncs nothing, unless it
checkpoints, which SQLite would do on the commit that takes the WAL past 1,000 pages (writes
and fsyncs, 0.26 s seen under load). So no connection of this process checkpoints as it
commits (`wal_autocheckpoint=0`); the write that takes the WAL past as much starts one on a
thread of its own (`Checkpoints`). Before, every COMMIT went to the connection's thread and
back with the write lock held, and so did a checkpoint's writes and fsyncs.

A cancelled task must not leave SQLite's write lock behind. Cancelling a task awaiting a
statement on the thread lets the statement run on, but SQLAlchemy, seeing the cancellation,
gives the connection up half-way (a clean-clone run found a restarted control plane waiting out
the busy timeout behind the lock its stopped predecessor's cancelled start task had left). So
such a statement, once sent, is awaited to its end (`SteadyConnection`), and the cancellation
goes on when the transaction or read is over (`_opened`).

The database file is made 0600 before SQLite opens it: SQLite gives its -wal and -shm files the
database file's mode, so none of the three is readable by another local user, whatever the
umask.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import sqlite3
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Connection, Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.dml import Insert
from sqlalchemy.util import await_

from core.retry import Clock

T = TypeVar("T")
logger = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).with_name("migrations")
#: Seconds before each new try of an idempotent write whose failure passes (`transient`).
RETRY_PAUSES = (0.2, 0.5, 1.0, 2.0, 4.0)
#: The advisory lock key that serializes migrations on PostgreSQL (any constant of this app's).
MIGRATION_LOCK = 0x636F6E74726F6C


#: The execution option that makes a SQLite transaction begin IMMEDIATE (`Database.begin`).
BEGIN_MODE = "sqlite_begin"
#: Files SQLite keeps beside the database.
SQLITE_SIDES = ("-wal", "-shm", "-journal")
#: Seconds `Database.close` lets transactions and reads under way end first.
CLOSE_GRACE = 5.0
#: The WAL's length, in pages of PAGE_BYTES, past which a write starts a checkpoint (SQLite's
#: own default for its automatic one).
WAL_PAGES = 1000
PAGE_BYTES = 4096


def _sqlite_connect(dbapi_connection: Any, record: Any) -> None:
    # WAL lets searches read while the webhook writes; NORMAL sync is durable at checkpoints
    # and never corrupts; checkpoints are made aside (`Checkpoints`). No busy timeout here
    # (`SteadyConnection`). Transactions are begun here (`_sqlite_begin`), not by the driver,
    # which would begin them only at the first write, leaving the reads before it outside.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA wal_autocheckpoint=0")  # never on a commit: `Checkpoints`
    # The WAL's file cut back when it is written from its start again (after a checkpoint that
    # took all of it): its length is then what `Checkpoints` reads of it.
    cursor.execute("PRAGMA journal_size_limit=0")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


#: Whether this task's SQLite statements run on their connection's thread (`aside`).
_aside: contextvars.ContextVar[bool] = contextvars.ContextVar("sqlite_aside", default=False)


@contextlib.contextmanager
def _set_aside(aside: bool) -> Iterator[None]:
    """This task's statements in the block on their connection's thread when `aside`."""
    if not aside:
        yield
        return
    token = _aside.set(True)
    try:
        yield
    finally:
        _aside.reset(token)


class SteadyConnection(aiosqlite.Connection):
    """An aiosqlite connection whose statements run on the event loop's thread, at once, but
    for what may wait (the module's docstring): that goes to its thread, and is never cut off
    by a cancellation there: the awaiting task waits for the call sent to finish (swallowing
    the cancellation, which `_opened` raises again once the transaction is over), so
    SQLAlchemy never sees a connection whose thread is still inside a statement it believes
    abandoned. Calls on one connection never overlap (SQLAlchemy awaits each), so the
    sqlite3 connection is shared by the two threads one call at a time.

    Its thread is stopped once: aiosqlite's `close` stops it again after SQLAlchemy's
    terminate (a connection invalidated, or one whose close was cancelled) has, and awaited
    an answer from a thread that had ended at the first stop, forever: the task closing it
    was left pending and destroyed at exit ("Task was destroyed but it is pending")."""

    _stop_asked = False
    _stopping: asyncio.Future[Any] | None = None

    def stop(self) -> asyncio.Future[Any] | None:
        """The first stop's answer, whoever asks again (None: asked with no event loop)."""
        if not self._stop_asked:
            self._stop_asked = True
            self._stopping = super().stop()
        return self._stopping

    def __init__(self, connector: Callable[[], sqlite3.Connection], busy_ms: int) -> None:
        super().__init__(connector, 64)
        self.busy_ms = busy_ms

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # aiosqlite's one way to its connection, which every statement and fetch goes through
        if _aside.get():
            return await self._on_thread(fn, *args, **kwargs)
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
        # Held by another process (a busy answer changed nothing): waited for on the thread.
        return await self._on_thread(fn, *args, **kwargs)

    async def commit(self) -> None:
        await self._execute(self._conn.commit)  # appends to the WAL: it never checkpoints here

    async def close(self) -> None:
        """On the thread, after whatever it still runs (a COMMIT a stopping task sent)."""
        with _set_aside(True):
            await super().close()

    def _waiting(self, fn: Any, args: Any, kwargs: Any) -> Any:
        """`fn` on the thread, where waiting for another process's lock blocks no loop."""
        connection = self._conn
        connection.execute(f"PRAGMA busy_timeout={self.busy_ms}")
        try:
            return fn(*args, **kwargs)
        finally:
            if fn != connection.close:  # a closed connection has nothing to set back
                connection.execute("PRAGMA busy_timeout=0")

    async def _on_thread(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        sent = asyncio.ensure_future(super()._execute(self._waiting, fn, args, kwargs))  # type: ignore[no-untyped-call]
        while True:
            try:
                return await asyncio.shield(sent)
            except asyncio.CancelledError:
                if sent.cancelled():
                    raise


def _sqlite_creator(
    path: str,
    busy_timeout: float,
    made: weakref.WeakSet[SteadyConnection],
    closed: Callable[[], bool],
) -> Callable[[], Awaitable[Any]]:
    """Connections to `path`, each kept in `made` (`Database.close` closes what the pool
    did not: one a task still held when the engine was disposed); none once `closed`, whose
    thread would outlive the event loop it answers."""

    async def connect() -> aiosqlite.Connection:
        if closed():
            raise sqlite3.OperationalError("the database is closed")
        connection = SteadyConnection(
            partial(
                sqlite3.connect, path, timeout=0, isolation_level=None, check_same_thread=False
            ),
            int(busy_timeout * 1000),
        )
        connection._thread.daemon = True  # as SQLAlchemy does for its own
        made.add(connection)
        return await connection

    return connect


class Checkpoints:
    """The WAL's checkpoints, each on a thread of its own (`asyncio.to_thread`), one at a
    time: started by the write that finds the WAL past `WAL_PAGES` pages, as SQLite's own
    automatic checkpoint would have been (a passive one: it waits for no reader or writer and
    copies what it can; the WAL is written from its start again once all of it is in the
    database). A checkpoint that fails is said in the log, and the next write tries again."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.wal = Path(path + "-wal")
        self._running: asyncio.Task[None] | None = None

    def after_write(self) -> None:
        if self._running is not None and not self._running.done():
            return
        try:
            size = self.wal.stat().st_size
        except OSError:
            return
        if size >= WAL_PAGES * PAGE_BYTES:
            self._running = asyncio.get_running_loop().create_task(self._checkpoint())

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self._passive)
        except sqlite3.Error as exc:
            logger.warning("the database's WAL checkpoint failed: %s", exc)

    def _passive(self) -> None:
        connection = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        try:
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            connection.close()

    async def close(self) -> None:
        """After the one under way, if any."""
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)


def _sqlite_begin(conn: Connection) -> None:
    # Straight to the driver, as any statement (at once, or on the thread while another
    # process holds the lock): through SQLAlchemy's own execution (`exec_driver_sql`) a BEGIN
    # took some 150 us of CPU, a quarter of a one-row read. Its failure is wrapped as that
    # would (the lock held past the busy timeout: an OperationalError, which passes).
    steady = conn.connection.driver_connection
    assert isinstance(steady, SteadyConnection), "made by _sqlite_creator"
    statement = f"BEGIN {conn.get_execution_options().get(BEGIN_MODE, 'DEFERRED')}"
    try:
        await_(steady._execute(steady._conn.execute, statement))
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc


def private_file(path: Path) -> None:
    """`path` (made when missing) and SQLite's files beside it readable by this user alone."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for side in ("", *SQLITE_SIDES):
        found = path.with_name(path.name + side)
        if found.exists():
            found.chmod(0o600)


class DatabaseClosed(DisconnectionError):
    """A transaction or read asked for after `Database.close`: this process is stopping,
    and waiting will not mend it."""


def transient(exc: BaseException) -> bool:
    """Whether a storage failure may pass by itself (the file locked past the wait, the disk
    full, the server restarting or away, no connection free): trying again later is right,
    and a client is told so (503). Any other is a defect."""
    if isinstance(exc, DatabaseClosed):
        return False
    if isinstance(exc, (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def describe(exc: BaseException) -> str:
    """A storage failure in one line for the log: the driver's words, never the statement or
    its parameters (SQLAlchemy's own text holds both)."""
    orig = getattr(exc, "orig", None)
    text_ = str(orig if orig is not None else exc.args[0] if exc.args else exc)
    return f"{type(exc).__name__}: {text_.splitlines()[0] if text_ else ''}"[:300]


async def retrying(write: Callable[[], Awaitable[T]], what: str) -> T:
    """`write` (idempotent: doing it twice is doing it once), tried again after each pause of
    RETRY_PAUSES while it fails in a way that passes; the last failure is raised."""
    for pause in (*RETRY_PAUSES, None):
        try:
            return await write()
        except SQLAlchemyError as exc:
            if pause is None or not transient(exc):
                logger.error("%s: storage failed (%s)", what, describe(exc))
                raise
            logger.warning("%s: storage failed (%s); trying again", what, describe(exc))
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")


class Database:
    """The engine and its dialect, and the clock of stored times; every query module takes one
    of these.

    `clock` is the time of every stored record and of the timers that read them (the
    lifecycle's idle time, the 12-hour cap, the deletion time): one clock for both, so a test
    that moves it on sees the timers come due. Lease times are not on it (`store.leases`)."""

    def __init__(self, url: str, clock: Clock | None = None, *, busy_timeout: float = 30.0) -> None:
        """`busy_timeout`: seconds a SQLite write waits for another process's (this
        process's own writes queue without a limit)."""
        self.url = url
        self.clock = clock or Clock()
        #: SQLite's one writer of this process (None on PostgreSQL).
        self._writer: asyncio.Lock | None = None
        #: The WAL's checkpoints (SQLite on a file only).
        self._checkpoints: Checkpoints | None = None
        self._holder: asyncio.Task[Any] | None = None
        #: SQLite's connections made so far (closed with the database).
        self._made: weakref.WeakSet[SteadyConnection] = weakref.WeakSet()
        #: Transactions and reads under way (`close` lets them end), and whether it closed.
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        if url.startswith("sqlite"):
            path = url.split(":///", 1)[1].split("?", 1)[0] or ":memory:"
            if path != ":memory:":
                private_file(Path(path))
                self._checkpoints = Checkpoints(path)
            self.engine: AsyncEngine = create_async_engine(
                url,
                async_creator=_sqlite_creator(path, busy_timeout, self._made, lambda: self._closed),
            )
            event.listen(self.engine.sync_engine, "connect", _sqlite_connect)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin)
            self._writes = self.engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
            self._writer = asyncio.Lock()
        else:
            self.engine = create_async_engine(
                url, pool_size=10, max_overflow=20, pool_pre_ping=True
            )
            self._writes = self.engine
        self.dialect = self.engine.dialect.name

    def pool_figures(self) -> dict[str, int]:
        """The connections by state (the metrics' scrape): for PostgreSQL the pool's size,
        those checked out and those past it (overflow); for SQLite the transactions and reads
        under way (its connections are made per use)."""
        pool = self.engine.pool
        size, out, over = (getattr(pool, name, None) for name in ("size", "checkedout", "overflow"))
        if callable(size) and callable(out) and callable(over):
            return {"size": size(), "checked_out": out(), "overflow": max(over(), 0)}
        return {"checked_out": self._busy}

    def now(self) -> datetime:
        """The clock's time as stored: aware UTC."""
        return datetime.fromtimestamp(self.clock.time(), UTC)

    async def migrate(self) -> None:
        """Alembic upgrade to head, on this engine (no alembic.ini, no separate step).

        On PostgreSQL several control planes may start at once: a transaction-scoped advisory
        lock makes them migrate one after the other (the later ones find nothing to do)."""
        async with self.begin() as conn:
            if self.dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
                )
            await conn.run_sync(_upgrade)

    @asynccontextmanager
    async def begin(self, *, aside: bool = False) -> AsyncIterator[AsyncConnection]:
        """One transaction: committed when the block ends, rolled back on an exception. On
        SQLite, after this process's writes before it, and holding the write lock from its
        start. Never nested: the inner one would wait for the outer for ever (RuntimeError).
        `aside`: its statements may take long (`connect`)."""
        with _set_aside(aside):
            async with self._begin() as conn:
                yield conn

    @asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        if self._writer is None:
            async with self._using(), _opened(self._writes, begin=True) as conn:
                yield conn
            return
        me = asyncio.current_task()
        if self._holder is not None and self._holder is me:
            raise RuntimeError("a write transaction inside another: pass its connection on")
        async with self._writer:
            self._holder = me
            try:
                async with self._using(), _opened(self._writes, begin=True) as conn:
                    yield conn
            finally:
                self._holder = None
        if self._checkpoints is not None:
            self._checkpoints.after_write()

    @asynccontextmanager
    async def connect(self, *, aside: bool = False) -> AsyncIterator[AsyncConnection]:
        """Reads (one snapshot on SQLite), rolled back when the block ends. `aside`: statements
        whose cost grows with what a user stored (a search through a long conversation's
        events, thousands of rows deleted): on SQLite they run on their connection's thread,
        where a long one holds up no other task (the module's docstring)."""
        with _set_aside(aside):
            async with self._using(), _opened(self.engine, begin=False) as conn:
                yield conn

    @asynccontextmanager
    async def _using(self) -> AsyncIterator[None]:
        """One transaction or read under way, counted; none begins once closed."""
        if self._closed:
            raise DatabaseClosed("the database is closed")
        self._busy += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()

    def insert_ignoring_duplicates(self, table: Table) -> Insert:
        """INSERT that skips rows clashing with a unique key (idempotent webhook inserts)."""
        if self.dialect == "postgresql":
            return postgresql.insert(table).on_conflict_do_nothing()
        return sqlite.insert(table).on_conflict_do_nothing()

    async def close(self) -> None:
        """None begins after this; those under way may end first (CLOSE_GRACE seconds: a
        request still answering while the control plane stops). Then the pool's connections
        are closed, and on SQLite any a task still holds (it gets "Connection closed" at its
        next statement): none is left to the garbage collector, nor a thread of one that
        answers an event loop gone by then."""
        self._closed = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), CLOSE_GRACE)
        if self._checkpoints is not None:
            await self._checkpoints.close()
        await self.engine.dispose()
        for connection in list(self._made):
            with contextlib.suppress(Exception):
                await connection.close()


@asynccontextmanager
async def _opened(engine: AsyncEngine, *, begin: bool) -> AsyncIterator[AsyncConnection]:
    """A connection of `engine`; a server that cannot be reached at all (asyncpg raises the
    socket's own OSError) is a storage failure like any other (`transient`). A cancellation
    a `SteadyConnection` held back during the block is raised once the block is over."""
    task = asyncio.current_task()
    cancels = task.cancelling() if task is not None else 0
    async with AsyncExitStack() as stack:
        try:
            conn = await stack.enter_async_context(engine.begin() if begin else engine.connect())
        except OSError as exc:
            raise DisconnectionError(f"the database cannot be reached: {exc}") from exc
        yield conn
    if task is not None and task.cancelling() > cancels:
        raise asyncio.CancelledError


def _upgrade(connection: Connection) -> None:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
