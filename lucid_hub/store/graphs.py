"""GraphStore: versioned graphs in pyoxigraph, patches applied atomically.

Layout of the store (format 2): each graph's triples in its named graph, blank nodes as
skolem IRIs `<urn:lucid-hub:bnode:INSTANCE.N>` (one INSTANCE per stored MSG), the MSG index
and the typed literals' lexical forms (store/lexical.py) in graphs of their own, versions
in `urn:lucid-hub:system`. A store of an older format is emptied at open, and `repair`
rebuilds it from the archive, the record of truth.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import logging
import re
import shutil
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from lucid_hub.errors import ChainError, InputError, PatchApplyError, StoreError
from lucid_hub.rdf.msg import GraphMsgs, Msg, chain_label
from lucid_hub.rdf.patch import Patch, occurrences
from lucid_hub.rdf.statements import document, relabel, terms
from lucid_hub.store import lexical

log = logging.getLogger(__name__)

RESERVED_PREFIX = "urn:lucid-hub:"
SKOLEM_PREFIX = "urn:lucid-hub:bnode:"
_SYSTEM = ox.NamedNode("urn:lucid-hub:system")
_VERSION = ox.NamedNode("urn:lucid-hub:version")
_MSG = ox.NamedNode("urn:lucid-hub:msg")
_OCCURRENCE = ox.NamedNode("urn:lucid-hub:occurrence")
FORMAT = 2
_FORMAT = ox.Quad(ox.NamedNode("urn:lucid-hub:store"), ox.NamedNode("urn:lucid-hub:format"), ox.Literal(str(FORMAT)),
                  _SYSTEM)
_SKOLEM = re.compile(r"<urn:lucid-hub:bnode:([0-9a-f]+)\.(\d+)>")
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


def instance_id(patch_id: str, row: int) -> str:
    """The id of the MSG instance that the `row`-th MSG of a patch creates: the same in
    every store that applies the same patches."""
    return hashlib.sha256(f"{patch_id}#{row}".encode()).hexdigest()[:24]


def _index_graph(graph: str) -> ox.NamedNode:
    return ox.NamedNode(f"urn:lucid-hub:msgs:{hashlib.sha256(graph.encode()).hexdigest()[:32]}")


def _skolemise(statement: str, instance: str) -> str:
    return relabel(statement, lambda label: f"<{SKOLEM_PREFIX}{instance}.{label[len('_:c14n'):]}>")


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
        if _FORMAT not in self._store:
            if next(iter(self._store.quads_for_pattern(None, _VERSION, None, _SYSTEM)), None) is not None:
                log.warning("the RDF store at %s has an older format: it is emptied and rebuilt from the "
                            "archive (this takes a while for a large archive)", path)
                self._store.clear()
            self._store.add(_FORMAT)
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
            if self._store is _CLOSED:
                raise StoreError("the RDF store is closed")
            return self._generation, self.version(graph), [str(q.triple) for q in
                                         self._store.quads_for_pattern(None, None, None, ox.NamedNode(graph))]

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
        """The graph's triples as canonical statements, blank nodes labelled as format-2
        patches label them (`_:hHASHoOCCbN`): a copy of the graph read here, then patched by
        label, stays exactly the graph."""
        text = self._dump(graph)
        instances = self._instances(graph)

        def label(match: re.Match[str]) -> str:
            found = instances.get(match.group(1))
            if found is None:  # (not indexed: cannot happen in a store of this format)
                return f"_:b{match.group(1)}x{match.group(2)}"
            return chain_label(found[0], found[1], f"_:c14n{match.group(2)}")

        return [line[:-2] for line in _SKOLEM.sub(label, text).split("\n")[:-1]]

    def _instances(self, graph: str) -> dict[str, tuple[str, int]]:
        """Each stored MSG instance of the graph: its MSG hash and occurrence."""
        hashes: dict[str, str] = {}
        occurrences: dict[str, int] = {}
        for q in self._store.quads_for_pattern(None, None, None, _index_graph(graph)):
            instance = _iri(q.subject)[len(SKOLEM_PREFIX):]
            if q.predicate == _MSG:
                hashes[instance] = q.object.value
            elif q.predicate == _OCCURRENCE:
                occurrences[instance] = int(q.object.value)
        return {i: (h, occurrences.get(i, 0)) for i, h in hashes.items()}

    def held(self, graph: str, msg_hash: str) -> dict[int, str]:
        """The instances of an MSG the graph holds, by occurrence."""
        idx = _index_graph(graph)
        out: dict[int, str] = {}
        for q in self._store.quads_for_pattern(None, _MSG, ox.Literal(msg_hash), idx):
            for o in self._store.quads_for_pattern(q.subject, _OCCURRENCE, None, idx):
                out[int(o.object.value)] = _iri(q.subject)
        return out

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
            statements.update(str(q.triple) for q in found)
        ordered = sorted(lexical.expand_all(statements, lexical.records(self._store, graph)))
        return ordered, document([_SKOLEM.sub(lambda m: f"_:c14n{m.group(2)}", s) for s in ordered])

    def _dump(self, graph: str) -> str:
        """The graph as published: N-Triples, typed literals in the forms recorded for them."""
        data = self._store.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(graph))
        assert data is not None
        text = data.decode()
        recorded = lexical.records(self._store, graph)
        if not recorded:
            return str(text)
        return "".join(f"{s} .\n" for s in lexical.expand_all((line[:-2] for line in text.split("\n")[:-1]),
                                                               recorded))

    def check(self, patch: Patch, version: str | None = None) -> Plan:
        """Raise what `apply` would raise, changing nothing; the plan can be handed to `apply`.

        Publishers check before archiving, so a patch the store cannot apply is never archived.
        `version`, the graph's version if the caller has just read it, saves reading it again.
        """
        return self._plan(patch, version)

    def chain(self, graph: str, version: str | None) -> Chain:
        """Plans for patches of `graph` that follow each other, from `version` on, each made on
        the graph as the ones before leave it (`check` for a chain; `apply_all` applies it)."""
        return Chain(self, graph, version)

    def apply(self, patch: Patch, plan: Plan | None = None) -> None:
        """Apply a patch atomically (or, for a large add-only one, idempotently).

        ChainError when the graph is not at the patch's `prev`; PatchApplyError when a
        removed MSG is missing (nothing changes in either case). A `plan` from `check` is
        reused when the graph has not moved since.
        """
        with self._lock:
            if plan is None or plan.patch is not patch or self.version(patch.graph) != patch.prev:
                plan = self._plan(patch)
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
            g, idx = ox.NamedNode(graph), _index_graph(graph)
            for name in (g, idx, lexical.lexical_graph(graph)):
                if self._store.contains_named_graph(name):
                    self._store.remove_graph(name)
            for q in list(self._store.quads_for_pattern(g, _VERSION, None, _SYSTEM)):
                self._store.remove(q)
            with self._versions_lock:
                self._versions.pop(graph, None)
            for watcher in self._watchers:
                watcher(StoreChange(self._generation, graph, None, None, None, None))

    def query(self, query: str, graphs: list[ox.NamedNode]) -> Any:
        """A SPARQL query whose dataset is exactly `graphs` (their union as the default graph,
        and as the named graphs), whatever FROM clauses the query has."""
        dataset = graphs or [ox.NamedNode(f"{RESERVED_PREFIX}no-graph")]
        return self._store.query(query, default_graph=dataset, named_graphs=dataset)

    def published(self, graph: str, statements: list[str]) -> list[str]:
        """Statements as the store holds them (typed literals in value form) as the graph's
        patches wrote them (their recorded lexical forms, lexical.py)."""
        recorded = lexical.records(self._store, graph)
        return list(lexical.expand_all(statements, recorded)) if recorded else list(statements)

    def holds_any(self, graph: str) -> bool:
        """Whether the graph holds at least one triple (a look at the first, not a count)."""
        return next(iter(self._store.quads_for_pattern(None, None, None, ox.NamedNode(graph))), None) is not None

    def contains(self, graph: str, statement: str) -> bool:
        """Whether the graph holds this ground triple (given as a canonical statement)."""
        return bool(self.holding(graph, (statement,)))

    def holding(self, graph: str, statements: Iterable[str]) -> set[str]:
        """Those of the ground triples (canonical statements) the graph holds: `contains` for
        many at once, parsed in one go (a POST asks for each triple it adds)."""
        plain: list[str] = []
        typed: list[str] = []
        for statement in statements:
            (typed if lexical.typed(statement) else plain).append(statement)
        found: set[str] = set()
        if plain:
            g = ox.NamedNode(graph)
            quads = ox.parse("".join(f"{s} .\n" for s in plain), format=ox.RdfFormat.N_TRIPLES)
            found.update(s for s, q in zip(plain, quads, strict=True)
                         if ox.Quad(q.subject, q.predicate, q.object, g) in self._store)
        if typed:
            forms = lexical.Forms(self._store, graph, lexical.NATIVES.of(terms(s)[2] for s in typed))
            found.update(s for s in typed if forms.holds(s))
        return found

    def _plan(self, patch: Patch, version: str | None = None, chain: Chain | None = None) -> Plan:
        """What applying the patch deletes and inserts. Removals first (each must be held),
        then additions; statements with typed literals go through their recorded forms
        (lexical.Forms), the others straight to the store. With a `chain`, on the graph as
        the chain's patches planned so far leave it."""
        current = version if version is not None else self.version(patch.graph)
        if current != patch.prev:
            raise ChainError(f"store holds {patch.graph} at {current}, patch {patch.id} follows {patch.prev}")
        plan = Plan(patch)
        removed: list[str] = []  # statements as stored (skolem IRIs), literals as published
        added: list[str] = []
        held_of: Callable[[str], dict[int, str]]
        if chain is not None:
            held_of = chain.held
        elif current is None:  # a new graph holds nothing (a clone's first patch: 25k lookups saved)
            held_of = _nothing_held
        else:
            held_of = functools.partial(self.held, patch.graph)
        removed_occ, added_occ, held = self._occurrences(patch, held_of)
        plan.removed_occurrences, plan.added_occurrences = removed_occ, added_occ
        for msg, occurrence in zip(patch.removed, removed_occ, strict=True):
            if "_:" not in msg.nquads:
                removed.append(msg.nquads[:-3])
                continue
            instance_iri = held[msg.hash][occurrence]
            instance = instance_iri[len(SKOLEM_PREFIX):]
            removed.extend(_skolemise(s, instance) for s in msg.statements)
            plan.delete_index.append(f'<{instance_iri}> <{_MSG.value}> "{msg.hash}" .')
            plan.delete_index.append(f'<{instance_iri}> <{_OCCURRENCE.value}> "{occurrence}" .')
        for row, (msg, occurrence) in enumerate(zip(patch.added, added_occ, strict=True),
                                                start=len(patch.removed)):
            if "_:" not in msg.nquads:
                added.append(msg.nquads[:-3])
                continue
            instance = instance_id(patch.id, row)
            added.extend(_skolemise(s, instance) for s in msg.statements)
            plan.insert_index.append(f'<{SKOLEM_PREFIX}{instance}> <{_MSG.value}> "{msg.hash}" .')
            plan.insert_index.append(f'<{SKOLEM_PREFIX}{instance}> <{_OCCURRENCE.value}> "{occurrence}" .')
        natives = lexical.NATIVES.of(terms(s)[2] for s in itertools.chain(removed, added) if lexical.typed(s))
        forms = lexical.Forms(self._store, patch.graph, natives, exists=current is not None,
                              known=chain.forms if chain is not None else None)
        for statement in removed:
            if lexical.typed(statement):
                forms.remove(statement, patch.id)
            elif "<urn:lucid-hub:bnode:" in statement or (
                    chain.contains(statement) if chain is not None else self.contains(patch.graph, statement)):
                plan.delete_data.append(f"{statement} .")
            else:
                raise PatchApplyError(f"patch {patch.id} removes a triple the graph does not hold: {statement}")
        for statement in added:
            if lexical.typed(statement):
                forms.add(statement)
            else:
                plan.insert_data.append(f"{statement} .")
        delete, insert, forget, record = forms.changes()
        plan.delete_data.extend(f"{s} ." for s in delete)
        plan.insert_data.extend(f"{s} ." for s in insert)
        plan.delete_lexical.extend(f"{s} ." for s in forget)
        plan.insert_lexical.extend(f"{s} ." for s in record)
        if chain is not None:  # (what the chain's next plan starts from)
            plan.forms = forms.current()
        return plan

    def _occurrences(self, patch: Patch, held_of: Callable[[str], dict[int, str]]
                     ) -> tuple[list[int], list[int], dict[str, dict[int, str]]]:
        """Which instance each blank-node MSG row removes, and which occurrence each added
        one becomes: as a format-2 patch names them (each must fit what the graph holds),
        or by the rule (rdf.patch.occurrences) for a format-1 patch. Also the instances held
        of each of the patch's blank-node MSGs, by hash and occurrence."""
        removed_occ = list(patch.removed_occurrences) or [0] * len(patch.removed)
        added_occ = list(patch.added_occurrences) or [0] * len(patch.added)
        removing, adding = _rows_by_hash(patch.removed), _rows_by_hash(patch.added)
        instances: dict[str, dict[int, str]] = {}
        for digest in removing.keys() | adding.keys():
            held = instances[digest] = held_of(digest)
            gone_rows, came_rows = removing.get(digest, []), adding.get(digest, [])
            if patch.format == 1:
                gone, came = occurrences(held, len(gone_rows), len(came_rows))
                for occs, rows, assigned in ((removed_occ, gone_rows, gone), (added_occ, came_rows, came)):
                    for i, occurrence in zip(rows, assigned, strict=True):
                        occs[i] = occurrence
                continue
            gone = [removed_occ[i] for i in gone_rows]
            came = [added_occ[i] for i in came_rows]
            if any(o not in held for o in gone):
                raise PatchApplyError(f"patch {patch.id} removes occurrences {gone} of MSG sha256:{digest}; "
                                      f"the graph holds {sorted(held)}: the replica has diverged")
            if any(o in held for o in came):
                raise PatchApplyError(f"patch {patch.id} adds occurrences {came} of MSG sha256:{digest}; "
                                      f"the graph holds {sorted(held)} already: the replica has diverged")
        return removed_occ, added_occ, instances

    def _bulk_add(self, graph: str, plan: Plan) -> None:
        try:
            for lines, target in ((plan.insert_data, ox.NamedNode(graph)), (plan.insert_index, _index_graph(graph)),
                                  (plan.insert_lexical, lexical.lexical_graph(graph))):
                if lines:
                    self._store.bulk_load(_LineReader(lines), format=ox.RdfFormat.N_TRIPLES, to_graph=target)
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


def _nothing_held(_digest: str) -> dict[int, str]:
    return {}


def _rows_by_hash(msgs: tuple[Msg, ...]) -> dict[str, list[int]]:
    """The rows of each blank-node MSG, by hash (one pass: a patch can have many)."""
    rows: dict[str, list[int]] = {}
    for i, msg in enumerate(msgs):
        if "_:" in msg.nquads:
            rows.setdefault(msg.hash, []).append(i)
    return rows


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


class _ClosedStore:
    """Stands in for a closed pyoxigraph Store: any use is a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise StoreError("the RDF store is closed")

    def __contains__(self, item: object) -> bool:
        raise StoreError("the RDF store is closed")


_CLOSED: Any = _ClosedStore()


class Chain:
    """Plans of patches of one graph that follow each other, made before any is applied (a
    group commit, a mirror's catch-up page): each on the graph as the patches before it leave
    it. What they changed is kept here — ground triples, blank-node MSG instances by hash
    and occurrence, typed literals' recorded forms — and the store answers the rest."""

    def __init__(self, store: GraphStore, graph: str, version: str | None) -> None:
        self.store = store
        self.graph = graph
        self.version = version
        self._new = version is None  # a graph the store does not hold yet
        self.planned: list[tuple[Patch, Plan]] = []
        self.rows = 0
        self._state: dict[str, bool] = {}
        self._held: dict[str, dict[int, str]] = {}
        self.forms: dict[tuple[str, str, str], set[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.planned)

    def plan(self, patch: Patch) -> Plan:
        """Plan the next patch (raising what `check` raises, with nothing planned)."""
        plan = self.store._plan(patch, self.version, self)
        for msg, occurrence in zip(patch.removed, plan.removed_occurrences, strict=True):
            if "_:" in msg.nquads:
                del self.held(msg.hash)[occurrence]
            else:
                self._state[msg.nquads[:-3]] = False
        for row, (msg, occurrence) in enumerate(zip(patch.added, plan.added_occurrences, strict=True),
                                                start=len(patch.removed)):
            if "_:" in msg.nquads:
                self.held(msg.hash)[occurrence] = f"{SKOLEM_PREFIX}{instance_id(patch.id, row)}"
            else:
                self._state[msg.nquads[:-3]] = True
        self.forms.update(plan.forms)
        self.planned.append((patch, plan))
        self.rows += len(patch.removed) + len(patch.added)
        self.version = patch.id
        return plan

    def touched(self, statement: str) -> bool | None:
        """Whether the planned patches leave the ground triple in the graph (None: untouched)."""
        return self._state.get(statement)

    def contains(self, statement: str) -> bool:
        found = self._state.get(statement)
        return found if found is not None else self.store.contains(self.graph, statement)

    def held(self, digest: str) -> dict[int, str]:
        """The instances of an MSG the graph holds after the planned patches, by occurrence."""
        found = self._held.get(digest)
        if found is None:
            found = self._held[digest] = {} if self._new else dict(self.store.held(self.graph, digest))
        return found


class Plan:
    """What applying one patch deletes and inserts, as SPARQL DATA blocks."""

    def __init__(self, patch: Patch) -> None:
        self.patch = patch
        self.delete_data: list[str] = []
        self.delete_index: list[str] = []
        self.delete_lexical: list[str] = []
        self.insert_data: list[str] = []
        self.insert_index: list[str] = []
        self.insert_lexical: list[str] = []
        self.bulk_added: list[str] = []  # data lines bulk-loaded before the update (for watchers)
        # The occurrence of each removed and added row's MSG, and the typed literals' forms
        # after the patch (what a Chain needs to plan the next patch on top of this one).
        self.removed_occurrences: list[int] = []
        self.added_occurrences: list[int] = []
        self.forms: dict[tuple[str, str, str], set[str]] = {}

    def sparql(self) -> str:
        patch = self.patch
        g, idx, system = f"<{patch.graph}>", f"<{_index_graph(patch.graph).value}>", f"<{_SYSTEM.value}>"
        lex = f"<{lexical.lexical_graph(patch.graph).value}>"
        marker_old = f"{g} <{_VERSION.value}> <{patch.prev}> ." if patch.prev else ""
        marker_new = f"{g} <{_VERSION.value}> <{patch.id}> ."
        return (
            f"DELETE DATA {{ GRAPH {g} {{ {' '.join(self.delete_data)} }} "
            f"GRAPH {idx} {{ {' '.join(self.delete_index)} }} GRAPH {lex} {{ {' '.join(self.delete_lexical)} }} "
            f"GRAPH {system} {{ {marker_old} }} }} ;\n"
            f"INSERT DATA {{ GRAPH {g} {{ {' '.join(self.insert_data)} }} "
            f"GRAPH {idx} {{ {' '.join(self.insert_index)} }} GRAPH {lex} {{ {' '.join(self.insert_lexical)} }} "
            f"GRAPH {system} {{ {marker_new} }} }}"
        )


def _iri(term: object) -> str:
    assert isinstance(term, ox.NamedNode)
    return term.value
