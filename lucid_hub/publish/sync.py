"""The one owner of keeping this process's store in step with the archive: the archive is the
truth (every patch is archived before the store applies it), and the store catches up from it
after a crash, behind another process's or replica's publishes, and before a read."""

from __future__ import annotations

import logging

from lucid_hub.archive import Archive
from lucid_hub.errors import NotFoundError
from lucid_hub.publish.cache import MsgCache
from lucid_hub.publish.locks import GraphLocks
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.store import GraphStore

log = logging.getLogger(__name__)


class StoreSync:
    """Applies archived patches the store has not applied yet."""

    def __init__(self, archive: Archive, store: GraphStore, cache: MsgCache, canonicalizer: Canonicalizer,
                 locks: GraphLocks) -> None:
        self.archive = archive
        self.store = store
        self.cache = cache
        self.canonicalizer = canonicalizer
        self.locks = locks

    def graph(self, graph: str) -> bool:
        """Bring one graph up to the archive (the caller holds its lock); True if it applied any."""
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

    def repair(self) -> None:
        """Every graph up to the archive (at start: patches archived before a crash)."""
        for graph, _head in self.archive.heads():
            with self.locks.lock(graph):
                self.graph(graph)

    def all(self) -> list[str]:
        """Bring the store up to the archive for every graph another process changed (before
        a query reads the store directly; the role `store-follower`): one statement, and the
        graphs that moved. Returns every graph's IRI, in order."""
        heads = self.archive.heads()
        for iri, head in heads:
            if self.store.version(iri) != head:
                with self.locks.lock(iri):
                    self.graph(iri)
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
