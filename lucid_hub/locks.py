"""Exclusive locks that the processes on one host take on a file (`flock`): the processes of
one hub take turns at starting up and at changing a graph. The kernel releases a lock when
its process dies, so a killed process leaves no lock behind.

Written here because it is one system call: the `filelock` package would open the file
again on every acquire, and one of these locks is taken on every publish."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from typing import IO, Any


@contextlib.contextmanager
def exclusive(handle: IO[Any]) -> Iterator[None]:
    """Hold an exclusive lock on an open file, waiting for it if another process has it."""
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
