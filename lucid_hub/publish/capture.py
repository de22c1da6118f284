"""Capture: direct edits of a graph in the operator's store, published as a signed patch.

Other applications may write the store the hub keeps a graph in. A capture reads the store's
graph, diffs it against the version the hub last published (which the store held: the hub
writes what it has first) and publishes the difference as a patch authored `capture`, so the
edits reach partners like any other change. One request then writes the graph whole in the
hub's form (blank nodes with anchors, or skolem IRIs) at the captured patch's version. Rounds
of the store's writer wait meanwhile (one lock); an edit an application makes between the
read and that request is overwritten (docs/stores.md).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lucid_hub.archive import at_version
from lucid_hub.diff import GraphChange
from lucid_hub.errors import InputError, NotFoundError, StoreError
from lucid_hub.publish.publisher import Publisher
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.rdf.statements import statement_quads
from lucid_hub.store.layout import check_no_skolem
from lucid_hub.store.remote_sync import RemoteSync

log = logging.getLogger(__name__)

AUTHOR = "capture"
# A diff of two versions of a graph given as N-Triples files (old, new, graph IRI): the Spark
# engine's, for graphs too large to diff in the hub's process.
FileDiff = Callable[[Path, Path, str], GraphChange | None]


@dataclass(frozen=True)
class Captured:
    """What one capture did: the patch it published (None: the store held what the hub did)."""

    graph: str
    patch: str | None
    removed: int
    added: int
    store: str = "default"


class Capture:
    """Publishes what applications changed in the store's copy of the hub's graphs."""

    def __init__(self, syncs: list[RemoteSync], publisher: Publisher, canonicalizer: Canonicalizer) -> None:
        self.syncs = syncs
        self.publisher = publisher
        self.canonicalizer = canonicalizer

    def graph(self, graph: str, diff: FileDiff | None = None, store: str | None = None) -> Captured:
        """Capture one graph from the store that keeps it (`store` names it where several
        do). NotFoundError without a store; InputError for a graph no store keeps, several
        do, or the hub mirrors; StoreError when the store cannot be brought to the hub's
        version first (it is down, or refuses). With `diff`, both versions are written to
        files and diffed by it (Spark) instead of in this process."""
        if not self.syncs:
            raise NotFoundError("this hub keeps no graphs in a store of the operator's (LUCID_STORE_QUERY_URL, "
                                "LUCID_STORE_UPDATE_URL): there is nothing to capture from")
        keeping = [s for s in self.syncs if s.store.config.keeps(graph) and store in (None, s.store.config.name)]
        if not keeping:
            which = f"the store {store!r}" if store else "no store"
            raise InputError(f"{which} keeps <{graph}> (LUCID_STORE_GRAPHS, LUCID_STORES_FILE)")
        if len(keeping) > 1:
            raise InputError(f"<{graph}> is kept by the stores {', '.join(s.store.config.name for s in keeping)}: "
                             "name the one to capture from (store=NAME, --store)")
        (sync,) = keeping
        if self.publisher.read_only(graph):
            raise InputError(f"<{graph}> is a mirror: it changes only through its publisher, never by capture")
        with sync.paused():
            sync.catch_up(graph)
            head = self.publisher.archive.current_head(graph)
            statements = sync.store.statements(graph)
            check_no_skolem(statements, f"the store's graph <{graph}>")
            message = f"captured from the store at {sync.store.name}"
            if diff is None:
                new = graph_msgs(statement_quads(statements), self.canonicalizer)
                patch = self.publisher.replace(graph, new, author=AUTHOR, if_match=at_version(head), message=message)
            else:
                with tempfile.TemporaryDirectory(prefix="lucid-capture-") as tmp:
                    old_file, new_file = Path(tmp) / "published.nt", Path(tmp) / "store.nt"
                    new_file.write_text("".join(f"{s} .\n" for s in statements), encoding="utf-8")
                    version = self.publisher.export(graph, old_file)
                    change = diff(old_file, new_file, graph) if version == head else None
                if version != head:
                    raise StoreError(f"<{graph}> moved while it was captured: capture it again")
                patch = None if change is None else self.publisher.publish(
                    graph, lambda _view: change, author=AUTHOR, message=message, expect_prev=True, prev=head)
            if patch is None:
                return Captured(graph, None, 0, 0, sync.store.config.name)
            sync.resyncs.add(graph)  # (if the store fails now, the writer's next round does it)
            sync.resync(graph)
            log.info("captured <%s> from the store: patch %s (-%d +%d)", graph, patch.id, len(patch.removed),
                     len(patch.added))
            return Captured(graph, patch.id, len(patch.removed), len(patch.added), sync.store.config.name)

    def all(self, diff: FileDiff | None = None) -> list[Captured]:
        """Capture every graph the store keeps that this hub owns (the schedule's round)."""
        if not self.syncs:
            raise NotFoundError("this hub keeps no graphs in a store of the operator's: there is nothing to capture")
        graphs = [graph for graph, _head in self.publisher.archive.heads() if not self.publisher.read_only(graph)]
        return [self.graph(graph, diff, sync.store.config.name) for sync in self.syncs for graph in graphs
                if sync.store.config.keeps(graph)]
