"""Committing: each change becomes a signed patch chained to the graph's head, archived with
compare-and-set (and an outbox row) in one transaction, then applied to the store; publishes
waiting for a graph commit together (group commit); each archived patch is announced and
reacted to (the hooks port).

Order of work for one change, and why nothing is lost at a crash between any two steps:
1. one database transaction appends the patch to the archive, advances the graph's head
   by compare-and-set and adds an outbox row (all or nothing);
2. the store applies the patch (atomically, with its version marker);
3. the relay moves outbox rows into the patch log and deletes them (publish.relay).
On start, the store catches up from the archive (publish.sync) and the relay resumes.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from lucid_hub import gcpause
from lucid_hub.archive import Archive, Archiving, MirroredGraphError, Precondition
from lucid_hub.diff import GraphChange
from lucid_hub.errors import ConflictError, PreconditionFailedError
from lucid_hub.log import PatchLog
from lucid_hub.metrics import Metrics
from lucid_hub.publish.cache import MsgCache
from lucid_hub.publish.faults import crash_point
from lucid_hub.publish.hooks import Hooks, Writer
from lucid_hub.publish.locks import GraphLocks
from lucid_hub.publish.relay import Relay
from lucid_hub.publish.sync import StoreSync
from lucid_hub.publish.view import GraphView, NeedsFlush
from lucid_hub.rdf.metadata import Metadata
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.signing import SigningKey, sign_patch
from lucid_hub.store import GraphStore
from lucid_hub.store.plans import Chain, Plan

log = logging.getLogger(__name__)

# Compare-and-set attempts of one publish before it answers 409 (processes of one hub take
# turns by a file lock, see GraphLocks.writing; this covers other hosts on the database).
CAS_ATTEMPTS = 5
# Group commit (Committer.commit_group): the most publishes, and the most rows (MSGs) of
# their patches, one database transaction and one store update take together.
GROUP_JOBS = 256
GROUP_ROWS = 20_000


class StaleChange(ConflictError):
    """A change computed from versions some graph has moved on from: compute it again."""


class _Stale(Exception):
    """A group commit found the store behind the archive (another process published)."""


class Job:
    """One publish waiting for a group commit: the change to compute, and its outcome."""

    def __init__(self, compute: Callable[[GraphView], GraphChange | None], author: str, message: str,
                 if_match: Precondition | None, expect_prev: bool, prev: str | None,
                 metadata: Metadata = ()) -> None:
        self.compute = compute
        self.author = author
        self.message = message
        self.metadata = metadata
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



class Committer:
    """Turns changes into archived, applied, announced patches (the publisher's engine room)."""

    def __init__(self, archive: Archive, store: GraphStore, patch_log: PatchLog, key: SigningKey, *,
                 cache: MsgCache, locks: GraphLocks, sync: StoreSync, relay: Relay, hooks: Hooks,
                 writer: Writer, metrics: Metrics, patch_format: int, group_commit: bool,
                 announce: Callable[[Patch], None]) -> None:
        """`writer` is what reactions write through (the publisher this committer serves);
        `announce` hears of each archived patch (the patch stream's: it must not raise or block)."""
        self.archive = archive
        self.store = store
        self.log = patch_log
        self.key = key
        self.cache = cache
        self.locks = locks
        self.sync = sync
        self.relay = relay
        self.hooks = hooks
        self.writer = writer
        self.metrics = metrics
        self.patch_format = patch_format  # of the patches this hub makes (its partners read it)
        # Publishes of a graph waiting for its lock, committed in groups by whichever thread
        # takes it (Committer.publish); off: one transaction per patch.
        self.group_commit = group_commit
        self.announce = announce
        self._queues: dict[str, collections.deque[Job]] = {}
        self._queues_guard = threading.Lock()

    def lock_set(self, graph: str) -> frozenset[str]:
        """The graph and those reactions can write on a patch of it (`locks_for`, which includes
        the graph itself when any): the same frozenset each time, so its hash is computed once."""
        return self.hooks.locks_for(graph) or frozenset((graph,))

    def held(self, graph: str) -> Callable[[str], Iterable[int]] | None:
        """For a format-2 patch of `graph`: the occurrences of an MSG its store holds."""
        if self.patch_format == 1:
            return None
        return lambda digest: self.store.held(graph, digest).keys()

    def publish(self, graph: str, job: Job) -> None:
        """Commit one change: in a group with the others waiting for the graph, or alone when
        reactions follow the graph's patches (each reaction before the next patch)."""
        if self.group_commit and not self.hooks.locks_for(graph):
            queue = self.queue(graph)
            queue.append(job)
            with self.locks.writing((graph,)):
                while not job.taken:  # else a thread that held the lock before this one took it
                    self.commit_group(graph, queue)
            if not job.done:  # its group's thread was stopped by something no job can be told of
                raise ConflictError(f"the change of <{graph}> was interrupted before it was committed; retry it")
            return
        with self.locks.writing(self.lock_set(graph)):
            self._commit_alone(graph, job)

    def _commit_alone(self, graph: str, job: Job) -> None:
        """Publish one change by itself (a graph rules react to: each patch's reaction runs
        before the next patch is computed)."""
        for attempt in range(CAS_ATTEMPTS):
            caught_up = attempt > 0
            head = self.store.version(graph)
            stale = (job.if_match is not None and not job.if_match(head)) or (job.expect_prev and job.prev != head)
            if stale and not caught_up:
                self.sync.graph(graph)  # the store may be behind: decide on the archive's head
                continue
            self._check_precondition(graph, job, head)
            change = job.compute(GraphView(self.store, graph, head, self.cache))
            if change is None or change.is_empty:
                if not caught_up and self.sync.graph(graph):
                    continue  # "no change" against a stale store is no answer
                job.version = head
                job.finish(None)
                return
            with gcpause.paused_for(len(change.removed) + len(change.added)):
                unsigned = change.to_patch(head, author=job.author, message=job.message, held=self.held(graph),
                                           metadata=job.metadata)
                patch = sign_patch(unsigned, self.key)
                plan = self.store.check(patch, head)  # a patch the store cannot apply is never archived
                try:
                    self.append(patch, local=True)
                except MirroredGraphError:
                    raise
                except ConflictError:
                    if attempt + 1 == CAS_ATTEMPTS:
                        raise
                    self.sync.graph(graph)
                    continue
                crash_point("after-archive-commit", graph)
                self.store.apply(patch, plan)
                self.cache.advance(patch)
            break
        self.metrics.publish_seconds.observe(time.perf_counter() - job.started)
        self.relay.changed()
        self.announced(patch, "published")
        self.react(patch)
        job.finish(patch)

    @staticmethod
    def _check_precondition(graph: str, job: Job, head: str | None) -> None:
        if job.if_match is not None and not job.if_match(head):
            raise PreconditionFailedError(f"<{graph}> is at version {head or '(none)'}, which the request's "
                                          "precondition (If-Match / If-None-Match) does not accept", head)
        if job.expect_prev and job.prev != head:
            raise ConflictError(f"patch follows {job.prev or 'nothing'}, but <{graph}> is at {head}", head)

    def queue(self, graph: str) -> collections.deque[Job]:
        queue = self._queues.get(graph)
        if queue is None:
            with self._queues_guard:
                queue = self._queues.setdefault(graph, collections.deque())
        return queue

    def commit_group(self, graph: str, queue: collections.deque[Job]) -> None:
        """Group commit (under the graph's lock): publish every change waiting for the graph,
        each its own signed patch chained to the one before, in as few database transactions
        and store updates as their content allows (usually one of each): each is computed and
        planned on the graph as the patches before it leave it (store.Chain). A change that
        needs the whole graph (a PUT's or DELETE's diff) or would make the group larger than
        GROUP_ROWS ends the group there and starts the next.

        Nothing is acknowledged before it is archived and in the store; a job's own failure
        (its precondition, its content) is its own; a failure of the commit is every job's."""
        jobs: list[Job] = []
        while queue and len(jobs) < GROUP_JOBS:
            jobs.append(queue.popleft())
            jobs[-1].taken = True
        try:
            # Holding the graph's database lock, nobody else moves its head: catch up first
            # rather than computing on a store another host has left behind.
            current = self.locks.db_locks is not None
            if current:
                self.sync.graph(graph)
            for attempt in range(CAS_ATTEMPTS):
                try:
                    self._group_round(graph, [job for job in jobs if not job.done], synced=current or attempt > 0)
                    return
                except _Stale:
                    self.sync.graph(graph)
            error: BaseException = ConflictError(f"<{graph}> kept changing concurrently, {CAS_ATTEMPTS} times; "
                                                 "retry", self.store.version(graph))
        except Exception as exc:  # every job not yet published hears of it (its thread raises it)
            error = exc
        for job in jobs:
            if not job.done:
                job.finish(error=error)

    def _group_round(self, graph: str, jobs: list[Job], *, synced: bool) -> None:
        """Compute and commit the jobs, group by group. _Stale when the store turns out to be
        behind the archive (another process published): sync and run the jobs not done again."""
        head = start = self.store.version(graph)
        chain = self.store.chain(graph, head)  # the group's patches, planned
        chained: list[Job] = []  # their jobs
        outcomes: list[tuple[Job, BaseException | None]] = []  # decided, told after the commit

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
                    self.commit_chain(graph, chain, local=True)
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
                self.announced(patch, "published")
                self.react(patch)
                job.finish(patch)
            chain = self.store.chain(graph, head)
            chained.clear()

        index = 0
        while index < len(jobs):
            job = jobs[index]
            try:
                patch = self._group_job(graph, job, head, chain, doubt)
            except NeedsFlush:  # (raised only while patches are planned)
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

    def _group_job(self, graph: str, job: Job, head: str | None, chain: Chain,
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
            raise NeedsFlush  # a large change goes by itself (the store bulk-loads it)
        held = None if self.patch_format == 1 else (lambda digest: chain.held(digest).keys())
        with gcpause.paused_for(len(change.removed) + len(change.added)):
            patch = sign_patch(change.to_patch(head, author=job.author, message=job.message, held=held,
                                               metadata=job.metadata), self.key)
            chain.plan(patch)  # a patch the store cannot apply is never archived
            return patch

    def commit_chain(self, graph: str, chain: Chain, *, local: bool) -> None:
        """Archive a chain's patches in one transaction (ConflictError: a head moved) and apply
        them in one store update (a group commit, a mirror's catch-up page)."""
        patches = [patch for patch, _plan in chain.planned]
        self.append_all(patches, local=local)
        crash_point("after-archive-commit", graph)
        self.store.apply_all(chain.planned)
        self.metrics.publish_group.observe(len(patches))
        for patch in patches:
            self.cache.advance(patch)
        self.relay.changed()

    def publish_all(self, changes: Mapping[str, Callable[[GraphView], GraphChange | None]],
                    versions: dict[str, str | None], *, author: str, message: str) -> list[Patch]:
        """Change several graphs at once, all or none (a SPARQL Update that writes several):
        each gets its own signed, chained patch, and all are archived in one transaction.

        `versions` are the graphs' versions the changes were computed from; if any graph is
        elsewhere now, nothing is published and StaleChange is raised (compute again).
        Graphs are locked in IRI order, so two such changes never wait for each other."""
        graphs = sorted(changes)
        started = time.perf_counter()
        patches: list[tuple[Patch, Plan]] = []
        with self.locks.writing({*graphs, *(g for graph in graphs for g in self.hooks.locks_for(graph))}):
            for graph in graphs:
                head = self.store.version(graph)
                if head != versions[graph]:
                    self.sync.graph(graph)  # the store may be behind the archive
                    head = self.store.version(graph)
                    if head != versions[graph]:
                        raise StaleChange(f"<{graph}> is at {head}, the change was computed at {versions[graph]}")
                change = changes[graph](GraphView(self.store, graph, head, self.cache))
                if change is None or change.is_empty:
                    continue
                unsigned = change.to_patch(head, author=author, message=message, held=self.held(graph))
                patch = sign_patch(unsigned, self.key)
                patches.append((patch, self.store.check(patch, head)))
            if not patches:
                return []
            try:
                self.append_all([patch for patch, _plan in patches], local=True)
            except MirroredGraphError:
                raise
            except ConflictError as exc:  # another host moved a head: compute again
                raise StaleChange(str(exc)) from None
            crash_point("after-archive-commit", patches[0][0].graph)
            for patch, plan in patches:
                self.store.apply(patch, plan)
                self.cache.advance(patch)
            self.metrics.publish_seconds.observe(time.perf_counter() - started)
            self.relay.changed()
            for patch, _plan in patches:
                self.announced(patch, "published")
            for patch, _plan in patches:
                self.react(patch)
        return [patch for patch, _plan in patches]

    def announced(self, patch: Patch, origin: str) -> None:
        self.metrics.patches.labels(origin).inc()
        if origin == "mirrored":
            lag = (datetime.now(UTC) - patch.created).total_seconds()
            self.metrics.mirror_lag_seconds.observe(max(lag, 0.0))  # a publisher's clock may be ahead
        try:
            self.announce(patch)
        except Exception:  # the stream's failure is its own; the patch is archived
            log.exception("announcing a patch failed")

    def react(self, patch: Patch) -> None:
        try:
            self.hooks.react(patch, self.writer)
        except Exception:  # the rules' failure is their own (recorded there); the patch is archived
            log.exception("reacting to a patch failed")

    def append(self, patch: Patch, *, local: bool) -> None:
        """Archive the patch and advance the head by compare-and-set (Archive.append)."""
        self.append_all([patch], local=local)

    def append_all(self, patches: list[Patch], *, local: bool) -> None:
        """`append` for patches of several graphs, all in one transaction (all or none)."""
        self.archive.append([_archiving(patch, self.hooks.will_react(patch)) for patch in patches], local=local,
                            log_entries=self.log.written_by_archive)

    def commit_mirrored(self, graph: str, chain: Chain) -> None:
        """Archive and apply a chain of a mirror's verified patches; announce and react to them."""
        if not chain:
            return
        self.commit_chain(graph, chain, local=False)
        for patch, _plan in chain.planned:
            self.announced(patch, "mirrored")
        for patch, _plan in chain.planned:
            self.react(patch)

    def archive_as_is(self, patch: Patch, sync: bool = True, *, origin: str, local: bool = False) -> Patch:
        """Archive and apply a complete patch as it is (signed here if it is not), on the head."""
        if patch.signature is None:
            patch = sign_patch(patch, self.key)
        with self.locks.writing(self.lock_set(patch.graph)):
            if sync:
                self.sync.graph(patch.graph)
            head = self.store.version(patch.graph)
            if patch.prev != head:
                raise ConflictError(
                    f"patch follows {patch.prev or 'nothing'}, but <{patch.graph}> is at {head}", head)
            with gcpause.paused_for(len(patch.removed) + len(patch.added)):
                plan = self.store.check(patch, head)  # planned once, applied as planned
                self.append(patch, local=local)
                crash_point("after-archive-commit", patch.graph)
                self.store.apply(patch, plan)
                self.cache.advance(patch)
            self.relay.changed()
            self.announced(patch, origin)
            self.react(patch)
        return patch


def _archiving(patch: Patch, reacting: bool = False) -> Archiving:
    """The archive's record of a patch: its headers and its RDF Patch bytes (and whether rules
    will react to it: a pending reaction is recorded with it)."""
    return Archiving(patch.id, patch.graph, patch.prev, patch.author, patch.message, patch.created,
                     len(patch.removed), len(patch.added), write_rdf_patch(patch), reacting)
