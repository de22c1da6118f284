"""Who may change a graph now: this process's lock of each graph, the lock files the processes
of one data directory share, and the database locks of hosts sharing one PostgreSQL."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lucid_hub.errors import ConflictError
from lucid_hub.locks import DatabaseLocks

# Files the processes of one hub lock to take turns at changing a graph (graphs share them).
LOCK_STRIPES = 64
# Seconds a thread that holds graphs waits for another graph it must lock out of order.
LATE_LOCK_SECONDS = 10.0


class GraphLocks:
    """The write locks of graphs, taken in one order by every writer of the hub."""

    def __init__(self, lock_dir: Path | None = None, db_locks: DatabaseLocks | None = None) -> None:
        """`lock_dir`: where the processes of one data directory keep their lock files (None:
        this process writes alone); `db_locks`: writers on other hosts of the database take
        turns with this process by them (PostgreSQL)."""
        self.lock_dir = lock_dir
        self.db_locks = db_locks
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._stripe_locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._stripe_files: dict[int, Any] = {}
        self._holding = threading.local()  # the graphs (and lock stripes) this thread holds
        self._plans: dict[frozenset[str], tuple[tuple[str, ...], list[threading.Lock]]] = {}

    @contextlib.contextmanager
    def writing(self, graphs: Iterable[str]) -> Iterator[None]:
        """While changes of `graphs` are computed and archived: this process's lock of each, and,
        when several processes of the hub share the data directory, file locks they all take,
        so that they take turns instead of racing: the compare-and-set then loses only to
        another host (two processes racing on one graph starved the loser: the one whose
        store was current kept winning while the other caught up).

        Graphs are locked in IRI order (and lock stripes in stripe order), so two changes of
        several graphs never wait for each other. A thread may nest: what it holds already it
        does not take again (a rule's patch is published inside its trigger's publish); a graph
        it must take out of order it waits for at most LATE_LOCK_SECONDS (409 after)."""
        held: set[str] = self._thread_set("graphs")
        stripes_held: set[int] = self._thread_set("stripes")
        wanted = frozenset(graphs)
        late = bool(held) and not wanted <= held
        if held:
            new: list[str] | tuple[str, ...] = sorted(wanted - held)
            locks = [self.lock(graph) for graph in new]
        else:  # the common case, planned once per set of graphs (a rule set can add a hundred)
            plan = self._plans.get(wanted)
            if plan is None:
                if len(self._plans) > 10_000:
                    self._plans.clear()
                new = tuple(sorted(wanted))
                plan = self._plans[wanted] = (new, [self.lock(graph) for graph in new])
            new, locks = plan
        taken: list[Any] = []  # what to release, in order taken (a plain list: ExitStack cost 1 µs a lock)
        try:
            for graph, lock in zip(new, locks, strict=True):
                if not lock.acquire(timeout=LATE_LOCK_SECONDS if late else -1):
                    raise ConflictError(f"<{graph}> stayed locked by another change for {LATE_LOCK_SECONDS:g} s")
                taken.append(lock)
            stripes = self._take_stripes(new, stripes_held, taken)
            if self.db_locks is not None and new and not late:
                # (a graph taken late, inside another's change: the compare-and-set alone)
                taken.append(self.db_locks.acquire(new))
            held.update(new)
            try:
                yield
            finally:
                held.difference_update(new)
                stripes_held.difference_update(stripes)
        finally:
            for lock in reversed(taken):
                lock.release()

    def _take_stripes(self, graphs: Iterable[str], stripes_held: set[int], taken: list[Any]) -> list[int]:
        """The lock files of the graphs' stripes this thread does not hold yet (added to `taken`)."""
        stripes: list[int] = []
        if self.lock_dir is None:
            return stripes
        for stripe in sorted({_stripe(g) for g in graphs} - stripes_held):
            thread_lock = self._stripe_locks[stripe]  # a file lock is the process's: threads need their own
            thread_lock.acquire()
            taken.append(thread_lock)
            handle = self._stripe_files.get(stripe)
            if handle is None:
                self.lock_dir.mkdir(parents=True, exist_ok=True)
                handle = self._stripe_files[stripe] = (self.lock_dir / f"graph-{stripe:02d}.lock").open("a")
            fcntl.flock(handle, fcntl.LOCK_EX)
            taken.append(_FileLock(handle))
            stripes_held.add(stripe)
            stripes.append(stripe)
        return stripes

    def _thread_set(self, name: str) -> set[Any]:
        found: set[Any] | None = getattr(self._holding, name, None)
        if found is None:
            found = set()
            setattr(self._holding, name, found)
        return found

    def lock(self, graph: str) -> threading.Lock:
        """This process's lock of one graph (a read that must see the store hold still)."""
        with self._guard:
            lock = self._locks.get(graph)
            if lock is None:
                lock = self._locks[graph] = threading.Lock()
            return lock

    def close(self) -> None:
        if self.db_locks is not None:
            self.db_locks.dispose()


class _FileLock:
    """A held `flock`, released like a thread lock."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def release(self) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)


def _stripe(graph: str) -> int:
    return int.from_bytes(hashlib.sha256(graph.encode()).digest()[:4], "big") % LOCK_STRIPES
