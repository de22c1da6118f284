"""GraphStore: versioned graphs in pyoxigraph, patches applied atomically; the store's one
writer.

The layout (format 2) is in store/layout.py; reading in store/reading.py (`GraphStore.read`);
planning a patch against what the store holds in store/plans.py. A store of an older format
is emptied at open, and `repair` rebuilds it from the archive, the record of truth.
"""

from __future__ import annotations

import io
import itertools
import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from lucid_hub.errors import ChainError, StoreError
from lucid_hub.rdf.patch import Patch
from lucid_hub.store import lexical
from lucid_hub.store.layout import (
    CLOSED,
    FORMAT,
    FORMAT_QUAD,
    RESERVED_PREFIX,
    SKOLEM_PREFIX,
    SYSTEM,
    VERSION,
    check_no_skolem,
    index_graph,
    read_version,
)
from lucid_hub.store.plans import Chain, Plan, Planner
from lucid_hub.store.reading import GraphReader

log = logging.getLogger(__name__)

__all__ = ["FORMAT", "RESERVED_PREFIX", "SKOLEM_PREFIX", "GraphStore", "StoreChange", "check_no_skolem",
           "read_version"]

# Add-only patches larger than this go through bulk loading instead of one SPARQL update
# (a SPARQL update parses at ~20k triples/s; bulk loading is ~4x faster). Bulk loading is
# not atomic, but additions are idempotent (skolem IRIs derive from the patch id), and the
# version marker is written last, so a crash is repaired by applying the patch again.
BULK_ADDITIONS = 50_000


@dataclass(frozen=True)
class StoreChange:
    """What one applied patch did to a graph's triples, as the store holds them (blank nodes
    as skolem IRIs, typed literals in their value form), N-Triples lines without ` .`.
    `removed` and `added` are None when the graph was dropped. `generation` orders it among
    the store's changes (as `triples` reports it)."""

    generation: int
    graph: str
    patch: str | None  # the version after the change (None: dropped)
    prev: str | None
    removed: list[str] | None
    added: list[str] | None


class GraphStore:
    """Graphs in a pyoxigraph store, each at a version (the id of the last applied patch)."""

    def __init__(self, path: Path | None = None) -> None:
        try:
            if path is None:
                self._store: Any = ox.Store()
            else:
                path.mkdir(parents=True, exist_ok=True)
                self._store = ox.Store(str(path))
        except OSError as exc:
            raise StoreError(f"cannot open the RDF store at {path}: {exc}") from None
        if FORMAT_QUAD not in self._store:
            if next(iter(self._store.quads_for_pattern(None, VERSION, None, SYSTEM)), None) is not None:
                log.warning("the RDF store at %s has an older format: it is emptied and rebuilt from the "
                            "archive (this takes a while for a large archive)", path)
                self._store.clear()
            self._store.add(FORMAT_QUAD)
        self._lock = threading.Lock()  # one writer at a time; readers do not wait
        # Versions held in memory: each patch deletes the old version marker, and RocksDB
        # scans skip over every deleted one until compaction, so reading the marker grew
        # linearly with the chain (0.7 ms a read after 3,000 patches; py-spy showed it as a
        # fifth of a publishing hub's time). This process is the store's only writer.
        self._versions: dict[str, str | None] = {}
        self._versions_lock = threading.Lock()
        # Snapshots for queries (RocksDB checkpoints of this store, read by guard processes):
        # one is made when the store has changed since the last, and shared until then.
        self.path = path
        self._generation = 0  # counts changes
        self._snapshot: Snapshot | None = None
        # Called, under the writer's lock, after each applied patch or dropped graph: keep it short.
        self._watchers: list[Callable[[StoreChange], None]] = []
        if path is not None:
            shutil.rmtree(_snapshots_dir(path), ignore_errors=True)  # a previous run's
        self.read = GraphReader(self._store)  # the reading side
        self.planner = Planner(self.read, self.version)

    def snapshot(self) -> Snapshot:
        """A read-only copy of the store as it is now, shared until the store changes
        (hard links to its immutable files: 10-20 ms to make). The caller `release`s it."""
        if self.path is None:
            raise StoreError("an in-memory store has no snapshots")
        with self._lock:
            current = self._snapshot
            if current is None or current.generation != self._generation:
                target = _snapshots_dir(self.path) / str(self._generation)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(target, ignore_errors=True)
                try:
                    self._store.backup(str(target))
                except OSError as exc:
                    raise StoreError(f"cannot snapshot the store: {exc}") from None
                if current is not None:
                    current.current = False
                    current.release_if_unused()
                current = self._snapshot = Snapshot(target, self._generation)
            current.users += 1
            return current

    def watch(self, watcher: Callable[[StoreChange], None]) -> None:
        """Call `watcher` with each change of a graph's triples, in the order applied."""
        with self._lock:
            self._watchers.append(watcher)

    def unwatch(self, watcher: Callable[[StoreChange], None]) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def triples(self, graph: str) -> tuple[int, str | None, list[str]]:
        """The store's change generation, the graph's version and its triples (as
        `StoreChange` gives them), read together: a change with a later generation is one
        they do not hold yet."""
        with self._lock:
            if self._store is CLOSED:
                raise StoreError("the RDF store is closed")
            return self._generation, self.version(graph), [str(q.triple) for q in
                                         self._store.quads_for_pattern(None, None, None, ox.NamedNode(graph))]

    def version(self, graph: str) -> str | None:
        """The id of the last patch applied to `graph` (None: nothing applied yet)."""
        if self._store is CLOSED:
            raise StoreError("the RDF store is closed")
        with self._versions_lock:
            if graph not in self._versions:
                self._versions[graph] = read_version(self._store, graph)
            return self._versions[graph]

    # --- reading: the store's reads are `read`'s; these are the ones most callers need ----
    def graphs(self) -> list[str]:
        """IRIs of the graphs that have a version."""
        return self.read.graphs()

    def statements(self, graph: str) -> list[str]:
        """The graph's triples as canonical statements (see `GraphReader.statements`)."""
        return self.read.statements(graph)

    def held(self, graph: str, msg_hash: str) -> dict[int, str]:
        """The instances of an MSG the graph holds, by occurrence."""
        return self.read.held(graph, msg_hash)

    def contains(self, graph: str, statement: str) -> bool:
        """Whether the graph holds this ground triple (given as a canonical statement)."""
        return self.read.contains(graph, statement)

    def query(self, query: str, graphs: list[ox.NamedNode]) -> Any:
        """A SPARQL query whose dataset is exactly `graphs` (see `GraphReader.query`)."""
        return self.read.query(query, graphs)

    # --- writing -----------------------------------------------------------------------
    def check(self, patch: Patch, version: str | None = None) -> Plan:
        """Raise what `apply` would raise, changing nothing; the plan can be handed to `apply`.

        Publishers check before archiving, so a patch the store cannot apply is never archived.
        `version`, the graph's version if the caller has just read it, saves reading it again.
        """
        return self.planner.plan(patch, version)

    def chain(self, graph: str, version: str | None) -> Chain:
        """Plans for patches of `graph` that follow each other, from `version` on, each made on
        the graph as the ones before leave it (`check` for a chain; `apply_all` applies it)."""
        return Chain(self.planner, graph, version)

    def apply(self, patch: Patch, plan: Plan | None = None) -> None:
        """Apply a patch atomically (or, for a large add-only one, idempotently).

        ChainError when the graph is not at the patch's `prev`; PatchApplyError when a
        removed MSG is missing (nothing changes in either case). A `plan` from `check` is
        reused when the graph has not moved since.
        """
        with self._lock:
            if plan is None or plan.patch is not patch or self.version(patch.graph) != patch.prev:
                plan = self.planner.plan(patch)
            if not plan.delete_data and not plan.delete_lexical and len(plan.insert_data) > BULK_ADDITIONS:
                self._bulk_add(patch.graph, plan)
                if self._watchers:
                    plan.bulk_added = [s[:-2] for s in plan.insert_data]
                plan.insert_data, plan.insert_index, plan.insert_lexical = [], [], []
            self._update(patch.graph, [(patch, plan)])

    def apply_all(self, planned: list[tuple[Patch, Plan]]) -> None:
        """Apply a chain of patches of one graph in one transaction (a group commit): each
        with the plan a `Chain` made for it on the patches before it. A single patch (or a
        large one) goes through `apply`."""
        if len(planned) == 1 or any(len(plan.insert_data) > BULK_ADDITIONS for _patch, plan in planned):
            for patch, plan in planned:
                self.apply(patch, plan)
            return
        with self._lock:
            graph = planned[0][0].graph
            expected = self.version(graph)
            for patch, _plan in planned:
                if patch.graph != graph or patch.prev != expected:
                    raise ChainError(f"store holds {graph} at {expected}, patch {patch.id} follows {patch.prev}")
                expected = patch.id
            self._update(graph, planned)

    def _update(self, graph: str, planned: list[tuple[Patch, Plan]]) -> None:
        """One SPARQL update for the plans (under the writer's lock: snapshots take it too, so
        none sees a half-applied patch), then the graph's version and the watchers."""
        first, last = planned[0][0], planned[-1][0]
        try:
            self._store.update(" ;\n".join(plan.sparql() for _patch, plan in planned))
        except (SyntaxError, OSError) as exc:
            with self._versions_lock:  # read it again from the store next time
                self._versions.pop(graph, None)
            which = f"patch {first.id}" if first is last else f"patches {first.id}…{last.id}"
            raise StoreError(f"the store refused {which}: {exc}") from None
        with self._versions_lock:
            self._versions[graph] = last.id
        for patch, plan in planned:
            self._generation += 1
            if self._watchers:
                change = StoreChange(self._generation, graph, patch.id, patch.prev,
                                     [s[:-2] for s in plan.delete_data],
                                     [s[:-2] for s in plan.insert_data] + plan.bulk_added)
                for watcher in self._watchers:
                    watcher(change)

    def drop(self, graph: str) -> None:
        """Remove the graph, its blank-node index and its version."""
        with self._lock:
            self._generation += 1
            g, idx = ox.NamedNode(graph), index_graph(graph)
            for name in (g, idx, lexical.lexical_graph(graph)):
                if self._store.contains_named_graph(name):
                    self._store.remove_graph(name)
            for q in list(self._store.quads_for_pattern(g, VERSION, None, SYSTEM)):
                self._store.remove(q)
            with self._versions_lock:
                self._versions.pop(graph, None)
            for watcher in self._watchers:
                watcher(StoreChange(self._generation, graph, None, None, None, None))

    def _bulk_add(self, graph: str, plan: Plan) -> None:
        try:
            for lines, target in ((plan.insert_data, ox.NamedNode(graph)), (plan.insert_index, index_graph(graph)),
                                  (plan.insert_lexical, lexical.lexical_graph(graph))):
                if lines:
                    self._store.bulk_load(_LineReader(lines), format=ox.RdfFormat.N_TRIPLES, to_graph=target)
            self._store.flush()
        except (SyntaxError, OSError) as exc:
            raise StoreError(f"bulk load into {graph} failed: {exc}") from None

    def close(self) -> None:
        """Flush and release the store (its directory lock goes with the last reference to
        the pyoxigraph Store, which a traceback could otherwise keep alive)."""
        with self._lock:
            if self._store is not CLOSED:
                self._store.flush()
                self._store = CLOSED
                self.read.close()
            if self.path is not None:
                shutil.rmtree(_snapshots_dir(self.path), ignore_errors=True)


def _snapshots_dir(path: Path) -> Path:
    return path.parent / "snapshots" / path.name


class _LineReader(io.RawIOBase):
    """N-Triples lines as a binary stream, encoded as the store reads them: joining and
    encoding a large patch's lines first held its text twice more (the peak of a bulk PUT)."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = iter(lines)
        self._pending = b""
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._at == len(self._pending):
            self._pending = "".join(line + "\n" for line in itertools.islice(self._lines, 1024)).encode()
            self._at = 0
        n = min(len(view), len(self._pending) - self._at)
        view[:n] = self._pending[self._at:self._at + n]
        self._at += n
        return n


class Snapshot:
    """A checkpoint of the store on disk; removed when it is no longer the newest and no
    query uses it any more."""

    def __init__(self, path: Path, generation: int) -> None:
        self.path = path
        self.generation = generation
        self.users = 0
        self.current = True
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            self.users -= 1
        self.release_if_unused()

    def release_if_unused(self) -> None:
        with self._lock:
            if self.users <= 0 and not self.current:
                shutil.rmtree(self.path, ignore_errors=True)
