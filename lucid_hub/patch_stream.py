"""The patch stream: the one way any part of the hub follows the patches of owned and
mirrored graphs. Delivery and the mirror event stream use it today; query subscriptions,
event streams and rules plug in the same way.

Semantics. A graph's patches come in chain order, each once per `follow`, from a position
(a chain position: 0 is before the first patch, `position(graph)` is "from now on").
A consumer keeps the position of the last patch it has durably handled and resumes from
it: at least once, never out of order, never a gap. Patches are read from the archive,
which the patch log is fed from (docs/architecture.md says why not from the log itself):
it holds each graph's chain in order with its positions, for owned and mirrored graphs
alike, on every process of the hub. The archiving process announces each patch, so its
followers go on at once; a patch archived by another process of the hub is found within
`poll` seconds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from lucid_hub.archive import Archive, ChainLink
from lucid_hub.rdf.patch import Patch

READ_BATCH = 100  # patches a follower reads from the archive at a time
# A read one follower made serves the others of the graph at the same position for this long
# (patches of other processes of the hub are found this much later at most).
SHARE_SECONDS = 0.05
SHARED_READS = 256  # reads kept for sharing, over all graphs and positions
RECENT = 1024  # announcements kept for `changes` (a watcher further behind hears "any graph")


class PatchStream:
    """Announcements of archived patches, and followers of each graph's chain."""

    def __init__(self, archive: Archive, poll: float = 1.0) -> None:
        self.archive = archive
        self.poll = poll
        self._cond = threading.Condition()
        self._generation = 0
        self._recent: deque[tuple[int, str]] = deque(maxlen=RECENT)
        self._ended = False
        # Recent reads by followers, by (graph, bodies, after): (generation, time, links); the
        # followers of a graph are at a few positions at once (those that took the newest
        # patch, those still about to), so each position keeps its own.
        self._shared: dict[tuple[str, bool, int], tuple[int, float, list[ChainLink]]] = {}
        self._share_locks: dict[tuple[str, bool], threading.Lock] = {}
        self._share_guard = threading.Lock()

    # --- the archiving side --------------------------------------------------------------
    def announce(self, patch: Patch) -> None:
        """A patch was archived (called by the publisher after each one; never blocks long)."""
        with self._cond:
            self._generation += 1
            self._recent.append((self._generation, patch.graph))
            self._cond.notify_all()

    def end(self) -> None:
        """End every follower (the hub is shutting down). Safe in a signal handler: it never
        waits for a lock (followers see the flag within `poll`)."""
        self._ended = True
        if self._cond.acquire(blocking=False):
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()

    def interrupt(self) -> None:
        """Wake every waiter now (not from a signal handler: it takes the lock): each returns
        as at its timeout (its caller looks again), and a `changes` whose `stopped()` holds
        does not wait again."""
        with self._cond:
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        return self._ended

    # --- the following side --------------------------------------------------------------
    def position(self, graph: str) -> int:
        """The graph's current position: following from it yields the patches to come."""
        return self.archive.length(graph)

    def read(self, graph: str, after: int, limit: int = READ_BATCH, *, bodies: bool = False) -> list[ChainLink]:
        """Up to `limit` patches of `graph` after position `after`, in chain order."""
        return self.archive.chain(graph, after, limit, bodies=bodies)

    def follow(self, graph: str, after: int, *, stopped: Callable[[], bool] = lambda: False,
               idle: float | None = None, bodies: bool = False) -> Iterator[ChainLink | None]:
        """The patches of `graph` after position `after`, as they are archived, until the
        stream ends or `stopped()`. With `idle`, None comes after that many quiet seconds
        (for a keep-alive). A slow follower goes on from where it is."""
        quiet_since = time.monotonic()
        while not self._ended and not stopped():
            generation = self.generation()
            links = self._read_shared(graph, after, generation, bodies)
            for link in links:
                yield link
                after = link.seq
            if links:
                quiet_since = time.monotonic()
                continue
            if idle is not None and time.monotonic() - quiet_since >= idle:
                yield None
                quiet_since = time.monotonic()
            self.wait(generation, self.poll)

    def read_now(self, graph: str, after: int, *, bodies: bool = False) -> list[ChainLink]:
        """The patches of `graph` after `after` archived by now (up to READ_BATCH), read once
        for every follower at that position (a push channel's poll)."""
        return self._read_shared(graph, after, self.generation(), bodies)

    def _read_shared(self, graph: str, after: int, generation: int, bodies: bool) -> list[ChainLink]:
        """`read`, shared: a hundred push clients woken by one announcement make one archive
        read, not a hundred. A read that began at or after the caller's `generation` holds
        every patch announced by then, so it serves the caller as its own read would."""
        key = (graph, bodies, after)
        held = self._shared.get(key)  # first without a lock: a hundred woken followers must not
        if held is not None and held[0] >= generation and time.monotonic() - held[1] < SHARE_SECONDS:
            return held[2]  # queue for one
        with self._share_guard:
            lock = self._share_locks.setdefault((graph, bodies), threading.Lock())
        with lock:
            held = self._shared.get(key)
            if held is not None and held[0] >= generation and time.monotonic() - held[1] < SHARE_SECONDS:
                return held[2]
            began = self.generation()
            links = self.read(graph, after, bodies=bodies)
            with self._share_guard:
                self._shared.pop(key, None)  # re-inserted: the newest in insertion order
                self._shared[key] = (began, time.monotonic(), links)
                if len(self._shared) > SHARED_READS:  # the oldest reads go (insertion order)
                    for old in list(self._shared)[: len(self._shared) - SHARED_READS]:
                        del self._shared[old]
            return links

    def generation(self) -> int:
        """A counter of announcements (for `wait` and `changes`); read without the lock (an
        int read is atomic, and a stale value only means one more look)."""
        return self._generation

    def wait(self, generation: int, timeout: float) -> int:
        """Until an announcement after `generation` (or `timeout` seconds, or the end); the
        generation now."""
        with self._cond:
            if self._generation == generation and not self._ended:
                self._cond.wait(timeout)
            return self._generation

    def changes(self, generation: int, timeout: float, *,
                stopped: Callable[[], bool] = lambda: False) -> tuple[int, set[str] | None]:
        """Wait as `wait` does (or until `interrupt` finds `stopped()` true); then the generation
        now and the graphs announced after `generation` (None: too many to tell, any graph may
        have changed)."""
        with self._cond:
            if self._generation == generation and not self._ended and not stopped():
                self._cond.wait(timeout)
            now = self._generation
            if now - generation > len(self._recent):
                return now, None
            graphs = set()
            for g, graph in reversed(self._recent):  # the newest first: read only what is new
                if g <= generation:
                    break
                graphs.add(graph)
            return now, graphs
