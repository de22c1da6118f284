"""GraphStore: versioned graphs in pyoxigraph, patches applied atomically."""

from __future__ import annotations

import hashlib
import itertools
import re
import shutil
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from lucid_hub.errors import ChainError, InputError, PatchApplyError, StoreError
from lucid_hub.rdf.msg import GraphMsgs, Msg
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import document, relabel

RESERVED_PREFIX = "urn:lucid-hub:"
SKOLEM_PREFIX = "urn:lucid-hub:bnode:"
# Oxigraph normalises the XSD literals it understands ("01"^^xsd:integer is stored as "1",
# "1.50"^^xsd:decimal as "1.5"), which would change MSG hashes. Inside the store they carry
# this datatype namespace instead, which Oxigraph keeps verbatim; reads map it back. The
# look-behind skips `\"` inside a literal: only a literal's closing quote precedes `^^`.
_XSD_DATATYPE = re.compile(r'(?<!\\)"\^\^<http://www\.w3\.org/2001/XMLSchema#')
_XSD_STORED = '"^^<urn:lucid-hub:xsd:'
_XSD_PUBLIC = '"^^<http://www.w3.org/2001/XMLSchema#'
_SYSTEM = ox.NamedNode("urn:lucid-hub:system")
_VERSION = ox.NamedNode("urn:lucid-hub:version")
_MSG = ox.NamedNode("urn:lucid-hub:msg")
_SKOLEM = re.compile(r"<urn:lucid-hub:bnode:([0-9a-f]+)\.(\d+)>")
# Add-only patches larger than this go through bulk loading instead of one SPARQL update
# (a SPARQL update parses at ~20k triples/s; bulk loading is ~4x faster). Bulk loading is
# not atomic, but additions are idempotent (skolem IRIs derive from the patch id), and the
# version marker is written last, so a crash is repaired by applying the patch again.
BULK_ADDITIONS = 50_000


def instance_id(patch_id: str, row: int) -> str:
    """The id of the MSG instance that the `row`-th MSG of a patch creates: the same in
    every store that applies the same patches."""
    return hashlib.sha256(f"{patch_id}#{row}".encode()).hexdigest()[:24]


def _index_graph(graph: str) -> ox.NamedNode:
    return ox.NamedNode(f"urn:lucid-hub:msgs:{hashlib.sha256(graph.encode()).hexdigest()[:32]}")


def _skolemise(statement: str, instance: str) -> str:
    return relabel(statement, lambda label: f"<{SKOLEM_PREFIX}{instance}.{label[len('_:c14n'):]}>")


def to_stored(statement: str) -> str:
    """A statement as the store keeps it (XSD datatypes moved to the reserved namespace)."""
    return _XSD_DATATYPE.sub(_XSD_STORED, statement) if "XMLSchema#" in statement else statement


def from_stored(text: str) -> str:
    """Stored N-Triples text back in public form (the reserved namespace is never in input)."""
    return text.replace(_XSD_STORED, _XSD_PUBLIC)


XSD = "http://www.w3.org/2001/XMLSchema#"
XSD_STRING = XSD + "string"
STORED_XSD = "urn:lucid-hub:xsd:"


def stored_datatype(datatype: str) -> str:
    """A literal's datatype IRI as the store keeps it (to_stored, for one term; canonical
    N-Triples never writes xsd:string, so plain strings keep it)."""
    if datatype.startswith(XSD) and datatype != XSD_STRING:
        return STORED_XSD + datatype[len(XSD):]
    return datatype


def public_datatype(datatype: str) -> str:
    """A stored literal's datatype IRI as published (from_stored, for one term)."""
    return XSD + datatype[len(STORED_XSD):] if datatype.startswith(STORED_XSD) else datatype


def read_version(store: Any, graph: str) -> str | None:
    """The version marker of `graph` in a pyoxigraph store (this one, or a snapshot of it)."""
    for q in store.quads_for_pattern(ox.NamedNode(graph), _VERSION, None, _SYSTEM):
        return _iri(q.object)
    return None


def check_no_skolem(statements: Iterable[str], source: str) -> None:
    """Refuse input that uses the reserved `urn:lucid-hub:` namespace (the store's own terms)."""
    for s in statements:
        if RESERVED_PREFIX in s:
            raise InputError(f"{source}: the IRI namespace {RESERVED_PREFIX} is reserved by lucid-hub")


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
        if path is not None:
            shutil.rmtree(self._snapshots_dir(), ignore_errors=True)  # a previous run's

    def _snapshots_dir(self) -> Path:
        assert self.path is not None
        return self.path.parent / "snapshots" / self.path.name

    def snapshot(self) -> Snapshot:
        """A read-only copy of the store as it is now, shared until the store changes
        (hard links to its immutable files: 10-20 ms to make). The caller `release`s it."""
        if self.path is None:
            raise StoreError("an in-memory store has no snapshots")
        with self._lock:
            current = self._snapshot
            if current is None or current.generation != self._generation:
                target = self._snapshots_dir() / str(self._generation)
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

    def version(self, graph: str) -> str | None:
        """The id of the last patch applied to `graph` (None: nothing applied yet)."""
        if self._store is _CLOSED:
            raise StoreError("the RDF store is closed")
        with self._versions_lock:
            if graph not in self._versions:
                self._versions[graph] = read_version(self._store, graph)
            return self._versions[graph]

    def graphs(self) -> list[str]:
        """IRIs of the graphs that have a version."""
        return sorted(_iri(q.subject) for q in self._store.quads_for_pattern(None, _VERSION, None, _SYSTEM))

    def statements(self, graph: str) -> list[str]:
        """The graph's triples as canonical statements, blank nodes as `_:bINSTANCExN`."""
        text = self._dump(graph)
        return [line[:-2] for line in _SKOLEM.sub(r"_:b\1x\2", text).split("\n")[:-1]]

    def graph_msgs(self, graph: str) -> GraphMsgs:
        """The graph's MSG multiset, read without canonicalising: each stored instance is
        its MSG's canonical form with `_:c14nN` renamed `<…INSTANCE.N>`."""
        ground: set[str] = set()
        instances: dict[str, list[str]] = {}
        for line in self._dump(graph).split("\n")[:-1]:
            statement = line[:-2]
            match = _SKOLEM.search(statement)
            if match is None:
                ground.add(statement)
            else:
                instances.setdefault(match.group(1), []).append(
                    _SKOLEM.sub(lambda m: f"_:c14n{m.group(2)}", statement))
        return GraphMsgs(ground, Counter(document(s) for s in instances.values()))

    def instance(self, graph: str, instance: str) -> tuple[list[str], str]:
        """One stored MSG instance (the blank nodes `<…bnode:INSTANCE.N>`): its statements as
        stored (skolem IRIs, public literals) and its MSG's canonical document. Empty
        statements when the graph holds no such instance."""
        g = ox.NamedNode(graph)
        statements: set[str] = set()
        for n in itertools.count():
            node = ox.NamedNode(f"{SKOLEM_PREFIX}{instance}.{n}")
            found = [q for q in itertools.chain(self._store.quads_for_pattern(node, None, None, g),
                                                self._store.quads_for_pattern(None, None, node, g))]
            if not found:
                break  # canonical labels are consecutive: _:c14n0, _:c14n1, …
            statements.update(from_stored(str(q.triple)) for q in found)
        ordered = sorted(statements)
        return ordered, document([_SKOLEM.sub(lambda m: f"_:c14n{m.group(2)}", s) for s in ordered])

    def _dump(self, graph: str) -> str:
        data = self._store.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(graph))
        assert data is not None
        return from_stored(data.decode())

    def check(self, patch: Patch, version: str | None = None) -> Plan:
        """Raise what `apply` would raise, changing nothing; the plan can be handed to `apply`.

        Publishers check before archiving, so a patch the store cannot apply is never archived.
        `version`, the graph's version if the caller has just read it, saves reading it again.
        """
        return self._plan(patch, version)

    def apply(self, patch: Patch, plan: Plan | None = None) -> None:
        """Apply a patch atomically (or, for a large add-only one, idempotently).

        ChainError when the graph is not at the patch's `prev`; PatchApplyError when a
        removed MSG is missing (nothing changes in either case). A `plan` from `check` is
        reused when the graph has not moved since.
        """
        with self._lock:
            self._generation += 1  # (snapshots take this lock: none sees a half-applied patch)
            if plan is None or plan.patch is not patch or self.version(patch.graph) != patch.prev:
                plan = self._plan(patch)
            if not plan.delete_data and len(plan.insert_data) > BULK_ADDITIONS:
                self._bulk_add(patch.graph, plan.insert_data, plan.insert_index)
                plan.insert_data, plan.insert_index = [], []
            try:
                self._store.update(plan.sparql())
            except (SyntaxError, OSError) as exc:
                with self._versions_lock:  # read it again from the store next time
                    self._versions.pop(patch.graph, None)
                raise StoreError(f"the store refused patch {patch.id}: {exc}") from None
            with self._versions_lock:
                self._versions[patch.graph] = patch.id

    def drop(self, graph: str) -> None:
        """Remove the graph, its blank-node index and its version."""
        with self._lock:
            self._generation += 1
            g, idx = ox.NamedNode(graph), _index_graph(graph)
            for name in (g, idx):
                if self._store.contains_named_graph(name):
                    self._store.remove_graph(name)
            for q in list(self._store.quads_for_pattern(g, _VERSION, None, _SYSTEM)):
                self._store.remove(q)
            with self._versions_lock:
                self._versions.pop(graph, None)

    def query(self, query: str, graphs: list[ox.NamedNode]) -> Any:
        """A SPARQL query whose dataset is exactly `graphs` (their union as the default graph,
        and as the named graphs), whatever FROM clauses the query has."""
        dataset = graphs or [ox.NamedNode(f"{RESERVED_PREFIX}no-graph")]
        return self._store.query(query, default_graph=dataset, named_graphs=dataset)

    def contains(self, graph: str, statement: str) -> bool:
        """Whether the graph holds this ground triple (given as a canonical statement)."""
        return ox.Quad(*_triple(to_stored(statement)), ox.NamedNode(graph)) in self._store

    def _plan(self, patch: Patch, version: str | None = None) -> Plan:
        current = version if version is not None else self.version(patch.graph)
        if current != patch.prev:
            raise ChainError(f"store holds {patch.graph} at {current}, patch {patch.id} follows {patch.prev}")
        plan = Plan(patch)
        for text, count in Counter(m.nquads for m in patch.removed).items():
            msg = Msg.of(text)
            statements = msg.statements
            if "_:" not in text:
                if not self.contains(patch.graph, statements[0]):
                    raise PatchApplyError(f"patch {patch.id} removes a triple the graph does not hold: "
                                          f"{statements[0]}")
                plan.delete_data.append(f"{to_stored(statements[0])} .")
                continue
            found = sorted(_iri(q.subject) for q in self._store.quads_for_pattern(
                None, _MSG, ox.Literal(msg.hash), _index_graph(patch.graph)))
            if len(found) < count:
                raise PatchApplyError(f"patch {patch.id} removes MSG sha256:{msg.hash} {count}x, the "
                                      f"graph holds it {len(found)}x")
            for instance_iri in found[:count]:
                instance = instance_iri[len(SKOLEM_PREFIX):]
                plan.delete_data.extend(f"{to_stored(_skolemise(s, instance))} ." for s in statements)
                plan.delete_index.append(f'<{instance_iri}> <{_MSG.value}> "{msg.hash}" .')
        plan.insert_data, plan.insert_index = self._additions(patch)
        return plan

    @staticmethod
    def _additions(patch: Patch) -> tuple[list[str], list[str]]:
        data: list[str] = []
        index: list[str] = []
        offset = len(patch.removed)
        for row, msg in enumerate(patch.added, start=offset):
            if "_:" not in msg.nquads:
                data.append(to_stored(msg.nquads[:-1]))
                continue
            instance = instance_id(patch.id, row)
            data.extend(f"{to_stored(_skolemise(s, instance))} ." for s in msg.statements)
            index.append(f'<{SKOLEM_PREFIX}{instance}> <{_MSG.value}> "{msg.hash}" .')
        return data, index

    def _bulk_add(self, graph: str, data: list[str], index: list[str]) -> None:
        try:
            self._store.bulk_load("\n".join(data).encode(), format=ox.RdfFormat.N_TRIPLES,
                                  to_graph=ox.NamedNode(graph))
            if index:
                self._store.bulk_load("\n".join(index).encode(), format=ox.RdfFormat.N_TRIPLES,
                                      to_graph=_index_graph(graph))
            self._store.flush()
        except (SyntaxError, OSError) as exc:
            raise StoreError(f"bulk load into {graph} failed: {exc}") from None

    def flush(self) -> None:
        self._store.flush()

    def close(self) -> None:
        """Flush and release the store (its directory lock goes with the last reference to
        the pyoxigraph Store, which a traceback could otherwise keep alive)."""
        with self._lock:
            if self._store is not _CLOSED:
                self._store.flush()
                self._store = _CLOSED
            if self.path is not None:
                shutil.rmtree(self._snapshots_dir(), ignore_errors=True)


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


class _ClosedStore:
    """Stands in for a closed pyoxigraph Store: any use is a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise StoreError("the RDF store is closed")

    def __contains__(self, item: object) -> bool:
        raise StoreError("the RDF store is closed")


_CLOSED: Any = _ClosedStore()


class Plan:
    """What applying one patch deletes and inserts, as SPARQL DATA blocks."""

    def __init__(self, patch: Patch) -> None:
        self.patch = patch
        self.delete_data: list[str] = []
        self.delete_index: list[str] = []
        self.insert_data: list[str] = []
        self.insert_index: list[str] = []

    def sparql(self) -> str:
        patch = self.patch
        g, idx, system = f"<{patch.graph}>", f"<{_index_graph(patch.graph).value}>", f"<{_SYSTEM.value}>"
        marker_old = f"{g} <{_VERSION.value}> <{patch.prev}> ." if patch.prev else ""
        marker_new = f"{g} <{_VERSION.value}> <{patch.id}> ."
        return (
            f"DELETE DATA {{ GRAPH {g} {{ {' '.join(self.delete_data)} }} "
            f"GRAPH {idx} {{ {' '.join(self.delete_index)} }} GRAPH {system} {{ {marker_old} }} }} ;\n"
            f"INSERT DATA {{ GRAPH {g} {{ {' '.join(self.insert_data)} }} "
            f"GRAPH {idx} {{ {' '.join(self.insert_index)} }} GRAPH {system} {{ {marker_new} }} }}"
        )


def _triple(statement: str) -> tuple[ox.NamedNode | ox.BlankNode, ox.NamedNode, ox.NamedNode | ox.Literal]:
    (quad,) = ox.parse(statement + " .", format=ox.RdfFormat.N_TRIPLES)
    assert not isinstance(quad.object, ox.Triple | ox.BlankNode) and not isinstance(quad.subject, ox.Triple)
    return quad.subject, quad.predicate, quad.object


def _iri(term: object) -> str:
    assert isinstance(term, ox.NamedNode)
    return term.value
