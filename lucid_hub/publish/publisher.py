"""The publisher: every accepted change of an owned graph becomes exactly one signed,
hash-chained patch; a mirror's verified patches are archived as they are.

The parts, each its own module: committing and group commit (publish.commit), the write
locks (publish.locks), the relay to the patch log (publish.relay), the store's catch-up from
the archive (publish.sync), the MSG cache (publish.cache), the view a change is computed on
(publish.view), and the hooks port the rules react through (publish.hooks). This class is
their API and composes them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lucid_hub import gcpause
from lucid_hub.archive import Archive, Precondition, read_only
from lucid_hub.diff import GraphChange
from lucid_hub.diff.local import diff_msgs
from lucid_hub.errors import ConflictError, LogUnavailableError, NotFoundError, PatchFormatError, PatchSignatureError
from lucid_hub.locks import DatabaseLocks
from lucid_hub.log import PatchLog
from lucid_hub.memory import DEFAULT_CACHE_BYTES
from lucid_hub.metrics import Metrics
from lucid_hub.publish.cache import MsgCache
from lucid_hub.publish.commit import GROUP_ROWS, Committer, Job, StaleChange
from lucid_hub.publish.hooks import Hooks, NoHooks
from lucid_hub.publish.locks import GraphLocks
from lucid_hub.publish.relay import Relay
from lucid_hub.publish.sync import StoreSync
from lucid_hub.publish.view import GraphView
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.metadata import Metadata
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import CURRENT_FORMAT, Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.signing import SigningKey, TrustedKeys, jwks_of
from lucid_hub.store import GraphStore

__all__ = ["GraphView", "Publisher", "StaleChange", "Unchanged"]

log = logging.getLogger(__name__)


class Unchanged:
    """A publish's `unchanged`: the version a publish that changed nothing found the graph at
    (what its answer names)."""

    def __init__(self) -> None:
        self.version: str | None = None

    def __call__(self, version: str | None) -> None:
        self.version = version


class Publisher:
    """Versions the owned graphs of one hub."""

    def __init__(self, archive: Archive, store: GraphStore, patch_log: PatchLog, key: SigningKey,
                 canonicalizer: Canonicalizer, trusted: TrustedKeys | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, metrics: Metrics | None = None,
                 lock_dir: Path | None = None, patch_format: int = CURRENT_FORMAT,
                 read_only: Callable[[str], bool] = lambda _graph: False,
                 announce: Callable[[Patch], None] = lambda _patch: None, relay: bool = True,
                 group_commit: bool = True, db_locks: DatabaseLocks | None = None,
                 may_relay: Callable[[], bool] | None = None, hooks: Hooks | None = None) -> None:
        """`read_only` says which graphs change only through another hub (mirrors: local
        changes are refused); `announce` hears of each archived patch (the patch stream's
        announce: it must not raise or block); `relay`: this process moves outbox rows to
        the log (publish.relay); `lock_dir`, `db_locks`: where other processes and hosts
        take turns with this one (publish.locks); `hooks`: what reacts to each archived patch
        (the rule cascade, publish.hooks)."""
        self.archive = archive
        self.store = store
        self.canonicalizer = canonicalizer
        self.key = key
        self.trusted = trusted or TrustedKeys(jwks_of([key]))
        self.metrics = metrics or Metrics()
        self.read_only = read_only
        self.cache = MsgCache(cache_bytes)
        self.locks = GraphLocks(lock_dir, db_locks)
        self.sync = StoreSync(archive, store, self.cache, canonicalizer, self.locks)
        self.relay = Relay(archive, patch_log, enabled=relay, may_relay=may_relay)
        self.commits = Committer(archive, store, patch_log, key, cache=self.cache, locks=self.locks,
                                 sync=self.sync, relay=self.relay, hooks=hooks or NoHooks(), writer=self,
                                 metrics=self.metrics, patch_format=patch_format, group_commit=group_commit,
                                 announce=announce)

    def _check_writable(self, graph: str) -> None:
        """Refuse a change of a mirrored graph early (before its diff). `read_only` may be a
        second behind; the archive decides for certain, in the compare-and-set."""
        if self.read_only(graph):
            raise read_only(graph)

    def writing(self, graphs: Iterable[str]) -> contextlib.AbstractContextManager[None]:
        """The write locks of `graphs`, for a change computed and published under them."""
        return self.locks.writing(graphs)

    def repair(self) -> None:
        """Bring store and log up to the archive (run at start)."""
        self.sync.repair()
        if self.relay.enabled:
            try:
                self.relay.resume()
            except LogUnavailableError as exc:  # the hub starts; its relay tries again (and /readyz says why)
                log.warning("the patch log is unavailable at start: %s", exc)

    # --- reading -------------------------------------------------------------------------

    def content(self, graph: str, version: str | None = None) -> tuple[str | None, list[str]]:
        """(version, statements) of the graph now, or at an older version rebuilt from patches."""
        self.archive.head(graph)  # NotFoundError for an unknown graph
        with self.locks.lock(graph):
            self.sync.graph(graph)  # (the store's own version after it: the archive may have moved on
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

    # --- changing -----------------------------------------------------------------------

    def publish(self, graph: str, compute: Callable[[GraphView], GraphChange | None], *, author: str,
                message: str, if_match: Precondition | None = None, expect_prev: bool = False,
                prev: str | None = None, unchanged: Callable[[str | None], None] | None = None,
                metadata: Metadata = ()) -> Patch | None:
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
        if metadata and self.commits.patch_format == 1:
            raise PatchFormatError("metadata needs patch format 3; this hub makes format 1 patches "
                                   "(LUCID_PATCH_FORMAT=1)")
        job = Job(compute, author, message, if_match, expect_prev, prev, metadata)
        self.commits.publish(graph, job)
        patch = job.result()
        if patch is None and unchanged is not None:
            unchanged(job.version)
        return patch

    def publish_all(self, changes: Mapping[str, Callable[[GraphView], GraphChange | None]],
                    versions: dict[str, str | None], *, author: str, message: str) -> list[Patch]:
        """Change several graphs at once, all or none (a SPARQL Update that writes several):
        each gets its own signed, chained patch, and all are archived in one transaction.

        `versions` are the graphs' versions the changes were computed from; if any graph is
        elsewhere now, nothing is published and StaleChange is raised (compute again)."""
        for graph in changes:
            self._check_writable(graph)
        return self.commits.publish_all(changes, versions, author=author, message=message)

    def export(self, graph: str, path: Path) -> str | None:
        """Write the graph's current content as N-Triples (empty if the graph is new); its version."""
        with self.locks.lock(graph):
            try:
                self.archive.head(graph)
            except NotFoundError:
                path.write_bytes(b"")
                return None
            self.sync.graph(graph)
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
               unchanged: Callable[[str | None], None] | None = None, metadata: Metadata = ()) -> Patch | None:
        """An RDF Patch sent by a client: its `prev` must be the head (409 otherwise).

        A complete lucid-hub patch (with `H id`) is archived as it is, if its id matches
        its content and its signature (when present) verifies with this hub's keys; a bare
        RDF Patch becomes a new patch with this hub's headers and signature.
        """
        from lucid_hub.rdf.rdfpatch import parse_rdf_patch

        self._check_writable(graph)
        doc = parse_rdf_patch(raw, self.canonicalizer, graph=graph)
        if doc.iri("id") is not None:
            if metadata:
                raise PatchFormatError("a complete patch carries its own metadata (H meta lines): "
                                       "none can be added to it")
            patch = read_rdf_patch(raw, self.canonicalizer)
            if patch.signature is not None:
                self.trusted.verify(patch.id, patch.signature)
            return self.commits.archive_as_is(patch, origin="published", local=True)
        prev = doc.iri("prev")
        change = GraphChange(graph, tuple(doc.removed), tuple(doc.added))
        return self.publish(graph, lambda _view: change, author=author, message=message,
                            expect_prev=True, prev=prev, unchanged=unchanged, metadata=metadata)

    def archive_verified(self, patch: Patch, sync: bool = True) -> Patch:
        """Archive and apply a patch of another hub that the caller has verified (a mirror's):
        as it is, with the publisher's id and signature, if it follows the graph's head.
        `sync=False` skips bringing the store up to the archive first, for a caller that
        has just archived the previous patch itself (catching up; a fifth of the time)."""
        if patch.signature is None:
            raise PatchSignatureError(f"patch {patch.id} is not signed")
        return self.commits.archive_as_is(patch, sync, origin="mirrored")

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
        if self.commits.hooks.locks_for(graph):
            for index, patch in enumerate(patches):
                self.commits.archive_as_is(patch, sync and index == 0, origin="mirrored")
            return
        with self.locks.writing((graph,)):
            if sync:
                self.sync.graph(graph)
            chain = self.store.chain(graph, self.store.version(graph))
            for patch in patches:
                if patch.graph != graph or patch.prev != chain.version:
                    raise ConflictError(f"patch follows {patch.prev or 'nothing'}, but <{graph}> is at "
                                        f"{chain.version}", chain.version)
                rows = len(patch.removed) + len(patch.added)
                if chain and chain.rows + rows > GROUP_ROWS:
                    self.commits.commit_mirrored(graph, chain)
                    chain = self.store.chain(graph, chain.version)
                with gcpause.paused_for(rows):
                    try:
                        chain.plan(patch)
                    except Exception:  # (the store cannot apply it: the replica diverged)
                        self.commits.commit_mirrored(graph, chain)  # the verified ones before it stay applied
                        raise
            self.commits.commit_mirrored(graph, chain)

    def forget(self, graph: str) -> None:
        """Drop a graph from the store (its archive rows are the caller's): a mirror re-clones."""
        with self.locks.lock(graph):
            self.store.drop(graph)
            self.cache.drop(graph)
