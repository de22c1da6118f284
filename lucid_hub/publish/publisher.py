"""Publisher: every accepted change becomes exactly one signed, hash-chained patch.

Order of work for one change, and why nothing is lost at a crash between any two steps:
1. one database transaction appends the patch to the archive, advances the graph's head
   by compare-and-set and adds an outbox row (all or nothing);
2. the store applies the patch (atomically, with its version marker);
3. the relay moves outbox rows into the patch log and deletes them.
On start, `repair` replays archived patches the store has not applied and relays the
outbox again; the log ignores a patch id it already holds (SQL) or consumers drop it.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from lucid_hub import gcpause
from lucid_hub.archive import Archive, Archiving, MirroredGraphError, Precondition, read_only
from lucid_hub.diff import GraphChange
from lucid_hub.diff.local import diff_msgs
from lucid_hub.errors import (
    ConflictError,
    NotFoundError,
    PatchSignatureError,
    PreconditionFailedError,
)
from lucid_hub.locks import DatabaseLocks
from lucid_hub.log import LogRecord, PatchLog
from lucid_hub.memory import DEFAULT_CACHE_BYTES, estimated_bytes
from lucid_hub.metrics import Metrics
from lucid_hub.rdf.apply import GraphReplica, apply_to_msgs
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import CURRENT_FORMAT, Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch, write_rdf_patch
from lucid_hub.signing import SigningKey, TrustedKeys, jwks_of, sign_patch
from lucid_hub.store import GraphStore
from lucid_hub.store.graphs import Chain, Plan
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

# Test-only crash points (LUCID_FAULT=name): the process exits at once, as a kill would.
FAULT_ENV = "LUCID_FAULT"
# Outbox rows the relay appends to the log per round (the most a crash can leave behind).
RELAY_BATCH = 500
# Seconds the background relay waits after a publish for more to batch with it.
RELAY_COALESCE = 0.01
# Compare-and-set attempts of one publish before it answers 409 (processes of one hub take
# turns by a file lock, see Publisher._writing; this covers other hosts on the database).
CAS_ATTEMPTS = 5
# Group commit (Publisher._commit_group): the most publishes, and the most rows (MSGs) of
# their patches, one database transaction and one store update take together.
GROUP_JOBS = 256
GROUP_ROWS = 20_000
# Files the processes of one hub lock to take turns at changing a graph (graphs share them).
LOCK_STRIPES = 64
# Seconds a thread that holds graphs waits for another graph it must lock out of order.
LATE_LOCK_SECONDS = 10.0


class StaleChange(ConflictError):
    """A change computed from versions some graph has moved on from: compute it again."""


def _crash_point(name: str, graph: str) -> None:
    # The hub's own graphs (the policy graph, published at start) never crash: the points are
    # for the publishes a test makes.
    if os.environ.get(FAULT_ENV) == name and not graph.startswith("urn:lucid-hub:"):
        log.warning("fault injection: exiting at %s", name)
        os._exit(137)


class MsgCache:
    """MSG multisets of graphs at their current version, so a bulk re-publish need not read
    the whole graph back from the store (10 s for a million triples). Bounded in bytes (an
    estimate per graph, lucid_hub.memory); kept current by applying each patch to it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[str, tuple[str, GraphMsgs, int]] = {}  # graph -> version, MSGs, bytes
        self._lock = threading.Lock()

    @property
    def held(self) -> tuple[int, int]:
        """(MSGs, estimated bytes) held now."""
        with self._lock:
            return (sum(len(m) for _, m, _ in self._entries.values()),
                    sum(size for _, _, size in self._entries.values()))

    def get(self, graph: str, version: str | None) -> GraphMsgs | None:
        with self._lock:
            entry = self._entries.get(graph)
            return entry[1] if entry is not None and entry[0] == version else None

    def put(self, graph: str, version: str, msgs: GraphMsgs, size: int | None = None) -> None:
        if size is None:
            size = estimated_bytes(len(msgs), itertools.chain(msgs.ground, msgs.blank))
        with self._lock:
            self._entries.pop(graph, None)
            if size > self.max_bytes:
                return
            while self._entries and sum(s for _, _, s in self._entries.values()) + size > self.max_bytes:
                self._entries.pop(next(iter(self._entries)))  # oldest first
            self._entries[graph] = (version, msgs, size)

    def advance(self, patch: Patch) -> None:
        """Apply a patch to the cached multiset of its graph (if cached at its prev)."""
        with self._lock:
            entry = self._entries.pop(patch.graph, None)
        if entry is None or entry[0] != patch.prev:
            return
        before = len(entry[1])
        apply_to_msgs(entry[1], patch)
        # (its size scaled by the MSGs it now holds: a sample per patch would cost more than the patch)
        self.put(patch.graph, patch.id, entry[1], entry[2] * len(entry[1]) // max(1, before))

    def drop(self, graph: str) -> None:
        with self._lock:
            self._entries.pop(graph, None)


class _NeedsFlush(Exception):  # a signal inside the publisher, never an error
    """A change in a group commit needs the store to hold the group's patches so far."""


class _Stale(Exception):
    """A group commit found the store behind the archive (another process published)."""


class _Job:
    """One publish waiting for a group commit: the change to compute, and its outcome."""

    def __init__(self, compute: Callable[[GraphView], GraphChange | None], author: str, message: str,
                 if_match: Precondition | None, expect_prev: bool, prev: str | None) -> None:
        self.compute = compute
        self.author = author
        self.message = message
        self.if_match = if_match
        self.expect_prev = expect_prev
        self.prev = prev
        self.started = time.perf_counter()
        self.taken = False  # by a thread committing a group
        self.done = False
        self.patch: Patch | None = None
        self.error: BaseException | None = None
        self.version: str | None = None  # no change: the version the change was computed against

    def finish(self, patch: Patch | None = None, error: BaseException | None = None) -> None:
        self.patch, self.error, self.done = patch, error, True

    def result(self) -> Patch | None:
        if self.error is not None:
            raise self.error
        return self.patch


class Unchanged:
    """A publish's `unchanged`: the version a publish that changed nothing found the graph at
    (what its answer names)."""

    def __init__(self) -> None:
        self.version: str | None = None

    def __call__(self, version: str | None) -> None:
        self.version = version


class GraphView:
    """A graph's current content as a change computation sees it: whole (from the cache or
    read from the store) or one triple at a time, so small changes never read a large graph.
    In a group commit it also sees the group's patches the store does not hold yet."""

    def __init__(self, store: GraphStore, graph: str, version: str | None, cache: MsgCache,
                 chain: Chain | None = None) -> None:
        self._store = store
        self.graph = graph
        self.version = version
        self.exists = version is not None
        self.cache = cache
        self._chain = chain  # a group commit's patches planned before this change (not in the store yet)
        self._msgs: GraphMsgs | None = None

    @property
    def store(self) -> GraphStore:
        """The store, for what the view does not offer (it must be at the view's version)."""
        if self._chain:
            raise _NeedsFlush
        return self._store

    def msgs(self) -> GraphMsgs:
        """The graph's MSGs. The caller must not change them (they may be the cache's)."""
        if self._chain:
            raise _NeedsFlush
        if self._msgs is None:
            if not self.exists:
                self._msgs = GraphMsgs()
            else:
                self._msgs = self.cache.get(self.graph, self.version)
                if self._msgs is None:
                    self._msgs = self._store.graph_msgs(self.graph)
                    assert self.version is not None
                    self.cache.put(self.graph, self.version, self._msgs)
        return self._msgs

    def holding(self, statements: Iterable[str]) -> set[str]:
        """Those of the ground triples the graph holds (`contains` for many)."""
        found: set[str] = set()
        ask: Iterable[str] = statements
        if self._chain:
            ask = []
            for statement in statements:
                touched = self._chain.touched(statement)
                if touched is None:
                    ask.append(statement)
                elif touched:
                    found.add(statement)
        if self.exists:
            found |= self._store.holding(self.graph, ask)
        return found

    def contains(self, statement: str) -> bool:
        return bool(self.holding((statement,)))


class Reactions(Protocol):
    """What reacts to archived patches (the rule engine)."""

    def locks_for(self, graph: str) -> frozenset[str]: ...
    def on_patch(self, patch: Patch) -> None: ...
    def will_react(self, patch: Patch) -> bool: ...


class Publisher:
    """Versions the owned graphs of one hub."""

    def __init__(self, archive: Archive, store: GraphStore, patch_log: PatchLog, key: SigningKey,
                 canonicalizer: Canonicalizer, trusted: TrustedKeys | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, metrics: Metrics | None = None,
                 lock_dir: Path | None = None, patch_format: int = CURRENT_FORMAT,
                 read_only: Callable[[str], bool] = lambda _graph: False,
                 announce: Callable[[Patch], None] = lambda _patch: None, relay: bool = True,
                 group_commit: bool = True, db_locks: DatabaseLocks | None = None,
                 may_relay: Callable[[], bool] | None = None) -> None:
        """`read_only` says which graphs change only through another hub (mirrors: local
        changes are refused); `announce` hears of each archived patch (the patch stream's
        announce: it must not raise or block); `relay`: this process moves outbox rows to
        the log (with several processes of one hub, only one does, or two could append a
        graph's patches out of order); `db_locks`: writers on other hosts of the database take
        turns with this process by them (PostgreSQL)."""
        self.archive = archive
        self.metrics = metrics or Metrics()
        self.patch_format = patch_format  # of the patches this hub makes (its partners read it)
        self.store = store
        self.log = patch_log
        self.key = key
        self.canonicalizer = canonicalizer
        self.trusted = trusted or TrustedKeys(jwks_of([key]))
        self.cache = MsgCache(cache_bytes)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._relay_lock = threading.Lock()
        self._relay_wanted = threading.Event()
        self._relaying = False  # the role `relay` relays (else whoever publishes does)
        self._stopping = threading.Event()
        self.announce = announce
        self.read_only = read_only
        # With several processes of the hub on this data directory: where their write locks are.
        self.lock_dir = lock_dir
        self.db_locks = db_locks
        self._stripe_locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._stripe_files: dict[int, Any] = {}
        # The log's tail has been compared with the outbox since this process began to relay
        # (see relay): False until then, and again whenever relaying is switched on.
        self._relay_checked = False
        self._relay_enabled = relay
        # Whether this process may append to the log now (the leadership lease, checked before
        # each batch: a leader that stalled past its lease must not append after another).
        self.may_relay: Callable[[], bool] = may_relay or (lambda: True)
        # Rules (rules/engine.py, bound by `react_with`): the graphs a patch of a graph can make
        # rules write, with the graph itself (empty: none), locked with it; and the reaction to
        # each archived patch, called under those locks.
        self.locks_for: Callable[[str], frozenset[str]] = lambda _graph: frozenset()
        self.react: Callable[[Patch], None] | None = None
        # Whether `react` will start a cascade of immediate rules for a patch: then a pending
        # reaction is archived with it, so that a crash before the cascade ends is seen at start.
        self.will_react: Callable[[Patch], bool] = lambda _patch: False
        self._holding = threading.local()  # the graphs (and lock stripes) this thread holds
        self._lock_plans: dict[frozenset[str], tuple[tuple[str, ...], list[threading.Lock]]] = {}
        # Publishes of a graph waiting for its lock, committed in groups by whichever thread
        # takes it (Publisher.publish); off: one transaction per patch, as before.
        self.group_commit = group_commit
        self._queues: dict[str, collections.deque[_Job]] = {}

    def _held(self, graph: str) -> Callable[[str], Iterable[int]] | None:
        """For a format-2 patch of `graph`: the occurrences of an MSG its store holds."""
        if self.patch_format == 1:
            return None
        return lambda digest: self.store.held(graph, digest).keys()

    def _check_writable(self, graph: str) -> None:
        """Refuse a change of a mirrored graph early (before its diff). `read_only` may be a
        second behind; `_append` decides for certain, in the compare-and-set."""
        if self.read_only(graph):
            raise read_only(graph)

    # --- reading -------------------------------------------------------------------------

    def content(self, graph: str, version: str | None = None) -> tuple[str | None, list[str]]:
        """(version, statements) of the graph now, or at an older version rebuilt from patches."""
        self.archive.head(graph)  # NotFoundError for an unknown graph
        with self._lock(graph):
            self._sync(graph)  # (the store's own version after it: the archive may have moved on
            head = self.store.version(graph)  # since, by another replica, and must not name it)
            if version is None or version == head:
                return head, self.store.statements(graph)
        replica = GraphReplica([], self.canonicalizer)
        for record in self.archive.history(graph):
            replica.apply(read_rdf_patch(record.body, self.canonicalizer))
            if record.id == version:
                return version, list(replica.statements())
        raise NotFoundError(f"version {version} is not in the history of <{graph}>")

    # --- changing -----------------------------------------------------------------------

    def publish(self, graph: str, compute: Callable[[GraphView], GraphChange | None], *, author: str,
                message: str, if_match: Precondition | None = None, expect_prev: bool = False,
                prev: str | None = None, unchanged: Callable[[str | None], None] | None = None) -> Patch | None:
        """Make the change `compute` derives from the graph's current MSGs; None if nothing changed.

        `unchanged` is told, when nothing changed, the version the graph was found at: the
        answer's version (the head read afterwards may be a concurrent publish's, whose content
        the request never saw — a client's next If-Match on it would lose that update).

        `if_match` (HTTP If-Match / If-None-Match, an editor's last read) must accept the
        graph's version (PreconditionFailedError, 412), and `expect_prev` with `prev` (an
        uploaded patch's prev) requires the graph to be at that version (409).

        Optimistic: the change is computed against this process's store and appended with
        compare-and-set on the head, which succeeds only if the store was current. When
        another process moved the head, the store catches up from the archive and the
        change is computed again (up to CAS_ATTEMPTS times, then 409).
        """
        self._check_writable(graph)
        job = _Job(compute, author, message, if_match, expect_prev, prev)
        if self.group_commit and not self.locks_for(graph):
            queue = self._queue(graph)
            queue.append(job)
            with self.writing((graph,)):
                while not job.taken:  # else a thread that held the lock before this one took it
                    self._commit_group(graph, queue)
            if not job.done:  # its group's thread was stopped by something no job can be told of
                raise ConflictError(f"the change of <{graph}> was interrupted before it was committed; retry it")
            return self._told(job, unchanged)
        with self.writing(self._lock_set(graph)):
            self._commit_alone(graph, job)
        return self._told(job, unchanged)

    @staticmethod
    def _told(job: _Job, unchanged: Callable[[str | None], None] | None) -> Patch | None:
        patch = job.result()
        if patch is None and unchanged is not None:
            unchanged(job.version)
        return patch

    def _commit_alone(self, graph: str, job: _Job) -> None:
        """Publish one change by itself (a graph rules react to: each patch's reaction runs
        before the next patch is computed)."""
        for attempt in range(CAS_ATTEMPTS):
            caught_up = attempt > 0
            head = self.store.version(graph)
            stale = (job.if_match is not None and not job.if_match(head)) or (job.expect_prev and job.prev != head)
            if stale and not caught_up:
                self._sync(graph)  # the store may be behind: decide on the archive's head
                continue
            self._check_precondition(graph, job, head)
            change = job.compute(GraphView(self.store, graph, head, self.cache))
            if change is None or change.is_empty:
                if not caught_up and self._sync(graph):
                    continue  # "no change" against a stale store is no answer
                job.version = head
                job.finish(None)
                return
            with gcpause.paused_for(len(change.removed) + len(change.added)):
                unsigned = change.to_patch(head, author=job.author, message=job.message, held=self._held(graph))
                patch = sign_patch(unsigned, self.key)
                plan = self.store.check(patch, head)  # a patch the store cannot apply is never archived
                try:
                    self._append(patch, local=True)
                except MirroredGraphError:
                    raise
                except ConflictError:
                    if attempt + 1 == CAS_ATTEMPTS:
                        raise
                    self._sync(graph)
                    continue
                _crash_point("after-archive-commit", graph)
                self.store.apply(patch, plan)
                self.cache.advance(patch)
            break
        self.metrics.publish_seconds.observe(time.perf_counter() - job.started)
        self._outbox_changed()
        self._published(patch, "published")
        self._react(patch)
        job.finish(patch)

    @staticmethod
    def _check_precondition(graph: str, job: _Job, head: str | None) -> None:
        if job.if_match is not None and not job.if_match(head):
            raise PreconditionFailedError(f"<{graph}> is at version {head or '(none)'}, which the request's "
                                          "precondition (If-Match / If-None-Match) does not accept", head)
        if job.expect_prev and job.prev != head:
            raise ConflictError(f"patch follows {job.prev or 'nothing'}, but <{graph}> is at {head}", head)

    def _queue(self, graph: str) -> collections.deque[_Job]:
        queue = self._queues.get(graph)
        if queue is None:
            with self._locks_guard:
                queue = self._queues.setdefault(graph, collections.deque())
        return queue

    def _commit_group(self, graph: str, queue: collections.deque[_Job]) -> None:
        """Group commit (under the graph's lock): publish every change waiting for the graph,
        each its own signed patch chained to the one before, in as few database transactions
        and store updates as their content allows (usually one of each): each is computed and
        planned on the graph as the patches before it leave it (store.Chain). A change that
        needs the whole graph (a PUT's or DELETE's diff) or would make the group larger than
        GROUP_ROWS ends the group there and starts the next.

        Nothing is acknowledged before it is archived and in the store; a job's own failure
        (its precondition, its content) is its own; a failure of the commit is every job's."""
        jobs: list[_Job] = []
        while queue and len(jobs) < GROUP_JOBS:
            jobs.append(queue.popleft())
            jobs[-1].taken = True
        try:
            # Holding the graph's database lock, nobody else moves its head: catch up first
            # rather than computing on a store another host has left behind.
            current = self.db_locks is not None
            if current:
                self._sync(graph)
            for attempt in range(CAS_ATTEMPTS):
                try:
                    self._group_round(graph, [job for job in jobs if not job.done], synced=current or attempt > 0)
                    return
                except _Stale:
                    self._sync(graph)
            error: BaseException = ConflictError(f"<{graph}> kept changing concurrently, {CAS_ATTEMPTS} times; "
                                                 "retry", self.store.version(graph))
        except Exception as exc:  # every job not yet published hears of it (its thread raises it)
            error = exc
        for job in jobs:
            if not job.done:
                job.finish(error=error)

    def _group_round(self, graph: str, jobs: list[_Job], *, synced: bool) -> None:
        """Compute and commit the jobs, group by group. _Stale when the store turns out to be
        behind the archive (another process published): sync and run the jobs not done again."""
        head = start = self.store.version(graph)
        chain = self.store.chain(graph, head)  # the group's patches, planned
        chained: list[_Job] = []  # their jobs
        outcomes: list[tuple[_Job, BaseException | None]] = []  # decided, told after the commit

        def doubt() -> None:
            """An answer that a stale store could make wrong (a precondition that fails, no
            change): the store must be at the archive's head (checked once per round)."""
            nonlocal synced
            if not synced and not chain:
                if self.archive.current_head(graph) != start:
                    raise _Stale
                synced = True
            # (with patches pending, the commit's compare-and-set finds a stale store out)

        def commit() -> None:
            nonlocal start, synced, chain
            if chain:
                try:
                    self._commit_chain(graph, chain, local=True)
                except MirroredGraphError:
                    raise
                except ConflictError:  # another process moved the head: the store is behind
                    raise _Stale from None
                start, synced = head, True  # (its compare-and-set found the archive at the store's head)
            for job, error in outcomes:
                job.finish(error=error)  # (no patch: a precondition, no change, or its content)
            outcomes.clear()
            for job, (patch, _plan) in zip(chained, chain.planned, strict=True):
                self.metrics.publish_seconds.observe(time.perf_counter() - job.started)
                self._published(patch, "published")
                self._react(patch)
                job.finish(patch)
            chain = self.store.chain(graph, head)
            chained.clear()

        index = 0
        while index < len(jobs):
            job = jobs[index]
            try:
                patch = self._group_job(graph, job, head, chain, doubt)
            except _NeedsFlush:  # (raised only while patches are planned)
                commit()
                continue
            except (_Stale, MirroredGraphError):
                raise
            except Exception as exc:  # the job's own (its precondition, its content): the others go on
                outcomes.append((job, exc))
                index += 1
                continue
            if patch is None:
                job.version = head
                outcomes.append((job, None))
            else:
                chained.append(job)
                head = patch.id
            index += 1
            if chain.rows >= GROUP_ROWS:
                commit()
        commit()

    def _group_job(self, graph: str, job: _Job, head: str | None, chain: Chain,
                   doubt: Callable[[], None]) -> Patch | None:
        """One job of a group: its patch on top of `head`, planned in the group's chain (None:
        no change)."""
        if (job.if_match is not None and not job.if_match(head)) or (job.expect_prev and job.prev != head):
            doubt()
            self._check_precondition(graph, job, head)
        change = job.compute(GraphView(self.store, graph, head, self.cache, chain))
        if change is None or change.is_empty:
            doubt()
            return None
        if chain and len(change.removed) + len(change.added) + chain.rows > GROUP_ROWS:
            raise _NeedsFlush  # a large change goes by itself (the store bulk-loads it)
        held = None if self.patch_format == 1 else (lambda digest: chain.held(digest).keys())
        with gcpause.paused_for(len(change.removed) + len(change.added)):
            patch = sign_patch(change.to_patch(head, author=job.author, message=job.message, held=held), self.key)
            chain.plan(patch)  # a patch the store cannot apply is never archived
            return patch

    def _commit_chain(self, graph: str, chain: Chain, *, local: bool) -> None:
        """Archive a chain's patches in one transaction (ConflictError: a head moved) and apply
        them in one store update (a group commit, a mirror's catch-up page)."""
        patches = [patch for patch, _plan in chain.planned]
        self._append_all(patches, local=local)
        _crash_point("after-archive-commit", graph)
        self.store.apply_all(chain.planned)
        self.metrics.publish_group.observe(len(patches))
        for patch in patches:
            self.cache.advance(patch)
        self._outbox_changed()

    def publish_all(self, changes: Mapping[str, Callable[[GraphView], GraphChange | None]],
                    versions: dict[str, str | None], *, author: str, message: str) -> list[Patch]:
        """Change several graphs at once, all or none (a SPARQL Update that writes several):
        each gets its own signed, chained patch, and all are archived in one transaction.

        `versions` are the graphs' versions the changes were computed from; if any graph is
        elsewhere now, nothing is published and StaleChange is raised (compute again).
        Graphs are locked in IRI order, so two such changes never wait for each other."""
        graphs = sorted(changes)
        for graph in graphs:
            self._check_writable(graph)
        started = time.perf_counter()
        patches: list[tuple[Patch, Plan]] = []
        with self.writing({*graphs, *(g for graph in graphs for g in self.locks_for(graph))}):
            for graph in graphs:
                head = self.store.version(graph)
                if head != versions[graph]:
                    self._sync(graph)  # the store may be behind the archive
                    head = self.store.version(graph)
                    if head != versions[graph]:
                        raise StaleChange(f"<{graph}> is at {head}, the change was computed at {versions[graph]}")
                change = changes[graph](GraphView(self.store, graph, head, self.cache))
                if change is None or change.is_empty:
                    continue
                unsigned = change.to_patch(head, author=author, message=message, held=self._held(graph))
                patch = sign_patch(unsigned, self.key)
                patches.append((patch, self.store.check(patch, head)))
            if not patches:
                return []
            try:
                self._append_all([patch for patch, _plan in patches], local=True)
            except MirroredGraphError:
                raise
            except ConflictError as exc:  # another host moved a head: compute again
                raise StaleChange(str(exc)) from None
            _crash_point("after-archive-commit", patches[0][0].graph)
            for patch, plan in patches:
                self.store.apply(patch, plan)
                self.cache.advance(patch)
            self.metrics.publish_seconds.observe(time.perf_counter() - started)
            self._outbox_changed()
            for patch, _plan in patches:
                self._published(patch, "published")
            for patch, _plan in patches:
                self._react(patch)
        return [patch for patch, _plan in patches]

    def export(self, graph: str, path: Path) -> str | None:
        """Write the graph's current content as N-Triples (empty if the graph is new); its version."""
        with self._lock(graph):
            try:
                self.archive.head(graph)
            except NotFoundError:
                path.write_bytes(b"")
                return None
            self._sync(graph)
            version = self.store.version(graph)
            with path.open("w", encoding="utf-8") as out:
                out.writelines(f"{s} .\n" for s in self.store.statements(graph))  # streamed, not one string
            return version

    def replace(self, graph: str, new: GraphMsgs, **kwargs: Any) -> Patch | None:
        """PUT: the graph's content becomes `new` (which the publisher keeps; do not change it)."""
        patch = self.publish(graph, lambda view: GraphChange(graph, *diff_msgs(view.msgs(), new)), **kwargs)
        if patch is not None:
            self.cache.put(graph, patch.id, new)  # exactly the new version's MSGs
        return patch

    def merge(self, graph: str, new: GraphMsgs, **kwargs: Any) -> Patch | None:
        """POST: `new` is added; its blank nodes are new nodes (RDF merge)."""
        def compute(view: GraphView) -> GraphChange:
            # Only the ground triples need a look at the graph: blank nodes in a merge are new.
            ground = new.ground - view.holding(new.ground)
            return GraphChange(graph, (), tuple(GraphMsgs(ground, new.blank).msgs()))
        return self.publish(graph, compute, **kwargs)

    def drop(self, graph: str, **kwargs: Any) -> Patch | None:
        """DELETE: every triple of the graph is removed (its history stays)."""
        self.archive.head(graph)
        return self.publish(graph, lambda view: GraphChange(graph, tuple(view.msgs().msgs()), ()), **kwargs)

    def upload(self, graph: str, raw: bytes, *, author: str, message: str,
               unchanged: Callable[[str | None], None] | None = None) -> Patch | None:
        """An RDF Patch sent by a client: its `prev` must be the head (409 otherwise).

        A complete lucid-hub patch (with `H id`) is archived as it is, if its id matches
        its content and its signature (when present) verifies with this hub's keys; a bare
        RDF Patch becomes a new patch with this hub's headers and signature.
        """
        from lucid_hub.rdf.rdfpatch import parse_rdf_patch

        self._check_writable(graph)
        doc = parse_rdf_patch(raw, self.canonicalizer, graph=graph)
        if doc.iri("id") is not None:
            patch = read_rdf_patch(raw, self.canonicalizer)
            if patch.signature is not None:
                self.trusted.verify(patch.id, patch.signature)
            return self._archive_as_is(patch, origin="published", local=True)
        prev = doc.iri("prev")
        change = GraphChange(graph, tuple(doc.removed), tuple(doc.added))
        return self.publish(graph, lambda _view: change, author=author, message=message,
                            expect_prev=True, prev=prev, unchanged=unchanged)

    def archive_verified(self, patch: Patch, sync: bool = True) -> Patch:
        """Archive and apply a patch of another hub that the caller has verified (a mirror's):
        as it is, with the publisher's id and signature, if it follows the graph's head.
        `sync=False` skips bringing the store up to the archive first, for a caller that
        has just archived the previous patch itself (catching up; a fifth of the time)."""
        if patch.signature is None:
            raise PatchSignatureError(f"patch {patch.id} is not signed")
        return self._archive_as_is(patch, sync, origin="mirrored")

    def archive_verified_chain(self, patches: list[Patch], sync: bool = True) -> None:
        """`archive_verified` for patches of one graph, each following the one before (a page
        of a mirror's catch-up): archived and applied in groups, as a group commit does —
        one database transaction and one store update for as many as their content allows
        (a patch touching what only the store knows of the group's patches starts the next).
        A graph rules react to takes them one by one (each reaction before the next patch)."""
        if not patches:
            return
        graph = patches[0].graph
        for patch in patches:
            if patch.signature is None:
                raise PatchSignatureError(f"patch {patch.id} is not signed")
        if self.locks_for(graph):
            for index, patch in enumerate(patches):
                self._archive_as_is(patch, sync and index == 0, origin="mirrored")
            return
        with self.writing((graph,)):
            if sync:
                self._sync(graph)
            chain = self.store.chain(graph, self.store.version(graph))
            for patch in patches:
                if patch.graph != graph or patch.prev != chain.version:
                    raise ConflictError(f"patch follows {patch.prev or 'nothing'}, but <{graph}> is at "
                                        f"{chain.version}", chain.version)
                rows = len(patch.removed) + len(patch.added)
                if chain and chain.rows + rows > GROUP_ROWS:
                    self._commit_mirrored(graph, chain)
                    chain = self.store.chain(graph, chain.version)
                with gcpause.paused_for(rows):
                    try:
                        chain.plan(patch)
                    except Exception:  # (the store cannot apply it: the replica diverged)
                        self._commit_mirrored(graph, chain)  # the verified ones before it stay applied
                        raise
            self._commit_mirrored(graph, chain)

    def _commit_mirrored(self, graph: str, chain: Chain) -> None:
        if not chain:
            return
        self._commit_chain(graph, chain, local=False)
        for patch, _plan in chain.planned:
            self._published(patch, "mirrored")
        for patch, _plan in chain.planned:
            self._react(patch)

    def forget(self, graph: str) -> None:
        """Drop a graph from the store (its archive rows are the caller's): a mirror re-clones."""
        with self._lock(graph):
            self.store.drop(graph)
            self.cache.drop(graph)

    def _archive_as_is(self, patch: Patch, sync: bool = True, *, origin: str, local: bool = False) -> Patch:
        if patch.signature is None:
            patch = sign_patch(patch, self.key)
        with self.writing(self._lock_set(patch.graph)):
            if sync:
                self._sync(patch.graph)
            head = self.store.version(patch.graph)
            if patch.prev != head:
                raise ConflictError(
                    f"patch follows {patch.prev or 'nothing'}, but <{patch.graph}> is at {head}", head)
            with gcpause.paused_for(len(patch.removed) + len(patch.added)):
                plan = self.store.check(patch, head)  # planned once, applied as planned
                self._append(patch, local=local)
                _crash_point("after-archive-commit", patch.graph)
                self.store.apply(patch, plan)
                self.cache.advance(patch)
            self._outbox_changed()
            self._published(patch, origin)
            self._react(patch)
        return patch

    def _published(self, patch: Patch, origin: str) -> None:
        self.metrics.patches.labels(origin).inc()
        if origin == "mirrored":
            lag = (datetime.now(UTC) - patch.created).total_seconds()
            self.metrics.mirror_lag_seconds.observe(max(lag, 0.0))  # a publisher's clock may be ahead
        try:
            self.announce(patch)
        except Exception:  # the stream's failure is its own; the patch is archived
            log.exception("announcing a patch failed")

    def _react(self, patch: Patch) -> None:
        if self.react is None:
            return
        try:
            self.react(patch)
        except Exception:  # the rules' failure is their own (recorded there); the patch is archived
            log.exception("reacting to a patch failed")

    def _append(self, patch: Patch, *, local: bool) -> None:
        """Archive the patch and advance the head by compare-and-set (Archive.append)."""
        self._append_all([patch], local=local)

    def _append_all(self, patches: list[Patch], *, local: bool) -> None:
        """`_append` for patches of several graphs, all in one transaction (all or none)."""
        self.archive.append([_archiving(patch, self.will_react(patch)) for patch in patches], local=local,
                            log_entries=self.log.written_by_archive)

    # --- catching up ---------------------------------------------------------------------

    def _sync(self, graph: str) -> bool:
        """Apply archived patches the store does not have yet (after a crash, or patches
        another hub process published on the same database); True if it applied any."""
        at = self.store.version(graph)
        if self.archive.current_head(graph) == at:
            return False
        pending = self.archive.after(graph, at)
        self.cache.drop(graph)
        if pending:  # (debug: with replicas on one database, every publish of another one)
            log.debug("store catching up: applying %d patches to <%s>", len(pending), graph)
        for record in pending:
            self.store.apply(read_rdf_patch(record.body, self.canonicalizer))
        return bool(pending)

    def _outbox_changed(self) -> None:
        if self._relaying:
            self._relay_wanted.set()  # the background relay takes it; the caller need not wait
        elif self.relay_enabled:
            self._relay_now("published")
        # else: another process of this hub relays (it polls the outbox)

    def _relay_now(self, what: str) -> None:
        """Relay in the caller's thread (a process without the relay thread: a command, a test).
        The patches are archived: a log that does not take them now fails nothing — they stay
        in the outbox for the next relay (this process's, or the hub's when it serves)."""
        try:
            self.relay()
        except Exception as exc:
            log.warning("%s, but not in the patch log yet (%s): the outbox keeps the patches for the next relay",
                        what, exc)

    def start_relay(self, roles: Supervisor, interval: float = 2.0) -> None:
        """Relay as the role `relay`: woken by each publish, and every `interval` seconds to
        retry when the log was unavailable. Publishing then never waits for the log."""
        if self._relaying or self.log.written_by_archive or not self.relay_enabled:
            return
        self._relaying = True
        roles.add("relay", self._relay_round, every=interval, backoff_max=interval, wake=self._relay_wanted)

    def _relay_round(self) -> None:
        """One round of the role; a log that fails it leaves the rows in the outbox for the next."""
        if self._stopping.wait(RELAY_COALESCE):  # a burst of publishes gathers into one batch: fewer
            return  # round trips, and the relay does not compete with every single request
        self.relay()

    def stop_relay(self) -> None:
        """After the role stopped: one last round in the caller's thread."""
        self._stopping.set()
        self._relay_wanted.set()
        if self.relay_enabled:
            self._relay_now("stopping")

    def react_with(self, reactions: Reactions) -> None:
        """Let a rule engine react to each archived patch (once: the engine, built after this
        publisher, writes through it, so the composition root closes that cycle here)."""
        if self.react is not None:
            raise RuntimeError("the publisher reacts with a rule engine already")
        self.locks_for = reactions.locks_for
        self.react = reactions.on_patch
        self.will_react = reactions.will_react

    @property
    def relay_enabled(self) -> bool:
        """Whether this process relays the outbox to the log (the leader; a lone hub)."""
        return self._relay_enabled

    @relay_enabled.setter
    def relay_enabled(self, on: bool) -> None:
        if on and not self._relay_enabled:
            self._relay_checked = False  # taking over: what the last relay left is looked at first
        self._relay_enabled = on

    def relay(self) -> int:
        """Move outbox rows into the patch log, in order; returns how many moved. The first
        relay of a process, and the first after relaying is switched on, first drops the rows
        the log already holds (a relay before it died between appending and deleting them) —
        in the relay itself, under its lock: a publish's relay on a new leader ran before the
        leader's own repair did and appended a dead leader's last batch again (scale-out test)."""
        if self.log.written_by_archive:
            return 0  # nothing to relay: the archive wrote the log's entries
        moved = 0
        with self._relay_lock:
            if not self._relay_checked and self.may_relay():
                self._drop_relayed_outbox()  # raises when the log's tail cannot be read: nothing moves
                self._relay_checked = True
            while self.may_relay():
                rows = self.archive.outbox(RELAY_BATCH)
                if not rows:
                    return moved
                try:
                    self.log.append([LogRecord(graph, pid, body) for _, graph, pid, body in rows])
                except Exception:  # some may have reached the log: its tail is looked at first next time
                    self._relay_checked = False
                    raise
                _crash_point("after-log-append", rows[-1][1])
                self.archive.relayed(rows[-1][0])
                moved += len(rows)
            return moved

    def repair(self) -> None:
        """Bring store and log up to the archive (run at start)."""
        for graph, _head in self.archive.heads():
            with self._lock(graph):
                self._sync(graph)
        if self.relay_enabled:
            self.resume_relay()

    def resume_relay(self) -> None:
        """Relay what a relay before this one left in the outbox (a crash, or a leader that
        died): rows the log already holds are dropped, not appended twice."""
        with self._relay_lock:
            self._relay_checked = False
        self.relay()

    def sync_all(self) -> list[str]:
        """Bring the store up to the archive for every graph another process changed (before
        a query reads the store directly): one statement, and the graphs that moved. Returns
        every graph's IRI, in order."""
        heads = self.archive.heads()
        for iri, head in heads:
            if self.store.version(iri) != head:
                with self._lock(iri):
                    self._sync(iri)
        return [iri for iri, _head in heads]

    def lag(self) -> int:
        """Patches the archive holds that this process's store has not applied yet (other
        replicas' and processes' publishes), over every graph."""
        behind = 0
        for iri, head in self.archive.heads():
            at = self.store.version(iri)
            if at != head:
                try:
                    done = self.archive.position(at, iri) if at is not None else 0
                except NotFoundError:  # a store off the chain (repair replaces it): all of it
                    done = 0
                behind += self.archive.length(iri) - done
        return behind

    def _drop_relayed_outbox(self) -> None:
        """After a crash between the log's acknowledgement and the outbox delete, the log
        already holds some outbox patches: drop those rows rather than append twice."""
        present = self.log.holding(set(self.archive.outbox_ids()), RELAY_BATCH)
        if present:
            log.info("repair: %d outbox patches were already in the log", len(present))
            self.archive.drop_outbox(present)

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
            locks = [self._lock(graph) for graph in new]
        else:  # the common case, planned once per set of graphs (a rule set can add a hundred)
            plan = self._lock_plans.get(wanted)
            if plan is None:
                if len(self._lock_plans) > 10_000:
                    self._lock_plans.clear()
                new = tuple(sorted(wanted))
                plan = self._lock_plans[wanted] = (new, [self._lock(graph) for graph in new])
            new, locks = plan
        taken: list[Any] = []  # what to release, in order taken (a plain list: ExitStack cost 1 µs a lock)
        try:
            for graph, lock in zip(new, locks, strict=True):
                if not lock.acquire(timeout=LATE_LOCK_SECONDS if late else -1):
                    raise ConflictError(f"<{graph}> stayed locked by another change for {LATE_LOCK_SECONDS:g} s")
                taken.append(lock)
            stripes: list[int] = []
            if self.lock_dir is not None:
                for stripe in sorted({_stripe(g) for g in new} - stripes_held):
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

    def _lock_set(self, graph: str) -> frozenset[str]:
        """The graph and those rules can write on a patch of it (`locks_for`, which includes the
        graph itself when any): the same frozenset each time, so its hash is computed once."""
        return self.locks_for(graph) or frozenset((graph,))

    def _thread_set(self, name: str) -> set[Any]:
        found: set[Any] | None = getattr(self._holding, name, None)
        if found is None:
            found = set()
            setattr(self._holding, name, found)
        return found

    def _lock(self, graph: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(graph)
            if lock is None:
                lock = self._locks[graph] = threading.Lock()
            return lock


class _FileLock:
    """A held `flock`, released like a thread lock."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def release(self) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)


def _stripe(graph: str) -> int:
    return int.from_bytes(hashlib.sha256(graph.encode()).digest()[:4], "big") % LOCK_STRIPES


def _archiving(patch: Patch, reacting: bool = False) -> Archiving:
    """The archive's record of a patch: its headers and its RDF Patch bytes (and whether rules
    will react to it: a pending reaction is recorded with it)."""
    return Archiving(patch.id, patch.graph, patch.prev, patch.author, patch.message, patch.created,
                     len(patch.removed), len(patch.added), write_rdf_patch(patch), reacting)
