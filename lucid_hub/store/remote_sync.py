"""Keeping the operator's store at the archive's head: the leader's role `remote-store`.

The archive is the record of truth (every owned patch and every verified mirror patch is in
it before any store applies it). Each round reads the versions the store holds, and writes
the patches after them in chain order, a batch of consecutive patches of one graph per update
request with the version set in the same request. A store that is down or refuses means lag,
named by /readyz; the next round goes on from the version the store says it holds, so a crash
at any moment neither skips a patch nor writes one twice.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lucid_hub.archive import Archive
from lucid_hub.archive.chains import ChainLink
from lucid_hub.errors import ConfigError, NotFoundError, StoreError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.store.graphs import GraphStore
from lucid_hub.store.remote import RemoteStore

log = logging.getLogger(__name__)

# A request holds consecutive patches up to this many rows (catch-up of small patches: one
# request for many), and at least one patch however large.
BATCH_ROWS = 20_000
BATCH_PATCHES = 500


class RemoteSync:
    """Writes the archive's patches of the graphs the operator's store keeps into it."""

    def __init__(self, store: RemoteStore, archive: Archive, canonicalizer: Canonicalizer, graphs: GraphStore,
                 hold: Callable[[str], AbstractContextManager[Any]]) -> None:
        """`graphs` is this process's embedded store (a resync copies a graph from it), which
        `hold(graph)` keeps still (the publisher's lock of the graph)."""
        self.store = store
        self.archive = archive
        self.canonicalizer = canonicalizer
        self.graphs = graphs
        self.hold = hold
        # Graphs to write whole from the embedded store before any patch (a capture whose
        # store could not take the rewrite): the store holds edits the chain does not say.
        self.resyncs: set[str] = set()
        self.problem: str | None = None  # why the last round could not finish (None: it did)
        self.refused: dict[str, str] = {}  # graphs the hub will not write there, and why
        self.behind = 0  # patches the store still lacked at the end of the last round
        self.written = 0  # patches written since the start
        self._lock = threading.Lock()  # one round at a time
        self._probed = False

    def round(self) -> bool:
        """One round: every kept graph up to the archive's head. True: more is waiting."""
        with self._lock:
            try:
                if not self._probed:
                    self.store.probe()
                    self._probed = True
                more = self._round()
            except (StoreError, ConfigError) as exc:
                self.problem = str(exc)
                raise
            self.problem = None
            return more

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No round runs meanwhile (a capture)."""
        with self._lock:
            yield

    def catch_up(self, graph: str) -> None:
        """Write what the store lacks of `graph` now (the caller holds `paused`); a StoreError
        when the store does not end at the archive's head."""
        if graph in self.resyncs:
            self.resync(graph)
        while True:
            at = self.store.version(graph)
            if at == self.archive.current_head(graph) or (at is None and not self.store.is_empty(graph)):
                break
            if not self._write(self._pending(graph, at)[0]):
                break
        if self.store.version(graph) != self.archive.current_head(graph):
            raise StoreError(f"the store at {self.store.name} does not hold <{graph}> at this hub's version "
                             "(it is behind, or holds triples lucid-hub did not write): try again later")

    def resync(self, graph: str) -> None:
        """Write the graph whole, as the embedded store holds it, with its version, in one
        request (what a capture leaves: the store's content in the hub's form)."""
        with self.hold(graph):
            version = self.graphs.version(graph)
            if version is None:
                self.store.drop(graph)
            else:
                ground = sorted(self.graphs.read.graph_msgs(graph).ground)
                rows = self.graphs.read.blank_msgs(graph)
                self.store.update(self.store.render.rewrite(graph, ground, rows, version))
        self.resyncs.discard(graph)

    def _round(self) -> bool:
        for graph in sorted(self.resyncs):
            self.resync(graph)
        held = self.store.versions()
        heads = {graph: head for graph, head in self.archive.heads() if self.store.config.keeps(graph)}
        behind = 0
        more = False
        for graph in sorted(held.keys() - heads.keys()):
            if self.store.config.keeps(graph):  # forgotten here (a mirror removed): gone there too
                log.info("store %s: dropping <%s>, which this hub no longer holds", self.store.name, graph)
                self.store.drop(graph)
        refused: dict[str, str] = {}
        for graph, head in heads.items():
            at = held.get(graph)
            if at == head:
                continue
            if at is None and not self.store.is_empty(graph):
                refused[graph] = (f"the store's graph <{graph}> holds triples lucid-hub did not write: empty it, "
                                  "or keep the graph elsewhere (LUCID_STORE_GRAPHS)")
                continue
            pending, remaining = self._pending(graph, at)
            written = self._write(pending)
            behind += remaining - written
            more = more or written < remaining
        self.refused = refused
        self.behind = behind
        return more

    def _pending(self, graph: str, at: str | None) -> tuple[list[ChainLink], int]:
        """The next patches of `graph` after `at` (one batch, read from the archive: a store far
        behind is not read whole every round) and how many remain in all. A version this
        archive does not know (a mirror cloned again): the store's graph is written again from
        the start."""
        try:
            done = self.archive.position(at, graph) if at is not None else 0
        except NotFoundError:
            log.warning("store %s holds <%s> at %s, off this hub's chain: writing it again from the start",
                        self.store.name, graph, at)
            self.store.drop(graph)
            done = 0
        return self.archive.chain(graph, done, BATCH_PATCHES, bodies=True), self.archive.length(graph) - done

    def _write(self, records: list[ChainLink]) -> int:
        """Write up to BATCH_PATCHES of the records' patches, in requests of BATCH_ROWS rows."""
        batch: list[Patch] = []
        rows = 0
        written = 0
        for record in records[:BATCH_PATCHES]:
            patch = read_rdf_patch(record.body, self.canonicalizer)
            size = len(patch.removed) + len(patch.added)
            if batch and rows + size > BATCH_ROWS:
                self.store.write(batch)
                written += len(batch)
                batch, rows = [], 0
            batch.append(patch)
            rows += size
        if batch:
            self.store.write(batch)
            written += len(batch)
        self.written += written
        return written

    def lag(self) -> int:
        """Patches the store lacks now (reads the store's versions: readiness and metrics)."""
        held = self.store.versions()
        behind = 0
        for graph, head in self.archive.heads():
            if not self.store.config.keeps(graph) or held.get(graph) == head or graph in self.refused:
                continue
            at = held.get(graph)
            try:
                done = self.archive.position(at, graph) if at is not None else 0
            except NotFoundError:  # off the chain: all of it is written again
                done = 0
            behind += self.archive.length(graph) - done
        return behind


def store_metrics(syncs: list[RemoteSync]) -> list[Metric]:
    """The stores' writers as their last rounds left them (`/metrics`), by store: patches
    behind, written, whether the round finished, graphs refused."""
    behind = GaugeMetricFamily("lucid_store_behind_patches",
                               "Patches the operator's store lacked at the end of the last round.", labels=["store"])
    written = CounterMetricFamily("lucid_store_written_patches", "Patches written into the operator's store.",
                                  labels=["store"])
    up = GaugeMetricFamily("lucid_store_up", "1 when the last round of the store's writer finished.",
                           labels=["store"])
    refused = GaugeMetricFamily("lucid_store_refused_graphs",
                                "Graphs the store holds triples of that lucid-hub did not write (not written).",
                                labels=["store"])
    for sync in syncs:
        name = [sync.store.config.name]
        behind.add_metric(name, sync.behind)
        written.add_metric(name, sync.written)
        up.add_metric(name, 0 if sync.problem else 1)
        refused.add_metric(name, len(sync.refused))
    return [behind, written, up, refused]
