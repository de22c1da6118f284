"""Exclusive locks that the processes on one host take on a file (`flock`): the processes of
one hub take turns at starting up and at changing a graph. The kernel releases a lock when
its process dies, so a killed process leaves no lock behind. And locks in the database
(`DatabaseLocks`) that the hub's processes on several hosts take turns by.

Written here because it is one system call: the `filelock` package would open the file
again on every acquire, and one of these locks is taken on every publish."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError


@contextlib.contextmanager
def exclusive(handle: IO[Any]) -> Iterator[None]:
    """Hold an exclusive lock on an open file, waiting for it if another process has it."""
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)


# The first key of the two-key advisory locks the hub takes ("LUCI"): other users of advisory
# locks on the same database (migrations, other applications) use other keys.
ADVISORY_CLASS = 0x4C554349


def advisory_key(name: str) -> int:
    """The second (signed 32-bit) advisory-lock key of a graph."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big", signed=True)


class DatabaseLocks:
    """Writers of a graph on every host of a hub's database take turns by a PostgreSQL
    advisory lock of the graph (hub pods with stores of their own): the
    compare-and-set on the head then rarely fails, and a publish without a precondition is not
    refused because another pod published at the same moment. Session locks on a connection
    of their own, released explicitly (and by the server if the process dies: its connection
    goes); a lock a graph shares with another graph's hash only makes them take turns."""

    def __init__(self, engine: Engine) -> None:
        # Connections of their own, in autocommit (one round trip a lock, no transaction
        # around it: session locks outlive one) and not pinged at checkout (a third of the
        # cost): a connection found dead is dropped and the lock asked for on a new one.
        self.engine = create_engine(engine.url, isolation_level="AUTOCOMMIT", pool_pre_ping=False,
                                    pool_size=4, max_overflow=64)

    def dispose(self) -> None:
        self.engine.dispose()

    def acquire(self, graphs: Iterable[str]) -> _HeldDatabaseLocks:
        """Wait for the locks of `graphs` (in key order, so that two writers never wait for
        each other); what is returned releases them."""
        keys = sorted({advisory_key(g) for g in graphs})
        for attempt in (1, 2):
            connection = self.engine.connect()
            try:
                for key in keys:
                    connection.execute(_LOCK, {"c": ADVISORY_CLASS, "k": key})
                return _HeldDatabaseLocks(connection)
            except BaseException as exc:
                connection.invalidate()  # the server drops what it held with the connection
                connection.close()
                if attempt == 2 or not (isinstance(exc, DBAPIError) and exc.connection_invalidated):
                    raise
        raise AssertionError("unreachable")


_LOCK = text("SELECT pg_advisory_lock(:c, :k)")
_UNLOCK_ALL = text("SELECT pg_advisory_unlock_all()")


class _HeldDatabaseLocks:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def release(self) -> None:
        try:
            self.connection.execute(_UNLOCK_ALL)
        except Exception:  # a connection that cannot unlock is dropped, and its locks with it
            self.connection.invalidate()
        finally:
            self.connection.close()
