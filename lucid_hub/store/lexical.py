"""Typed literals in the store: values for SPARQL, the exact lexical forms for everything else.

Oxigraph keeps a typed literal by its value: "01"^^xsd:integer and "1"^^xsd:integer are one
term there, "19.90"^^xsd:decimal comes back as "19.9". That is what SPARQL needs (FILTER,
ORDER BY and joins compare values), but patches, MSG hashes and graph reads need each literal
exactly as it was published. So the store holds every typed literal in oxigraph's own form
(its *native* form, which queries see), and where the forms published for a subject,
predicate and value differ from that, a record of them: one quad
`<urn:lucid-hub:lex:KEY> <urn:lucid-hub:form> "FORM"` per form, in a graph of its own beside
each data graph (KEY hashes subject, predicate and native object; FORM is the literal's
N-Triples text, kept as a plain string, which oxigraph never changes). No record: the
native form itself is the one present. "01" and "1" on one subject and predicate are one
stored triple with a record of both.

(Before store format 2, typed literals carried a datatype namespace of the hub's, which kept
them exact but made them opaque to SPARQL: FILTER(?qty > 2) matched nothing.)
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pyoxigraph as ox

from lucid_hub.errors import PatchApplyError
from lucid_hub.rdf.statements import terms

XSD = "http://www.w3.org/2001/XMLSchema#"
_TYPED = '"^^<' + XSD
_STRING = f'"^^<{XSD}string>'
FORM = ox.NamedNode("urn:lucid-hub:form")
_CACHE_SIZE = 200_000


def typed(term: str) -> bool:
    """Whether an object term (N-Triples text) is a literal of an XSD datatype oxigraph may
    keep by value (every XSD datatype but xsd:string, which canonical text never names)."""
    return term.endswith(">") and _TYPED in term and not term.endswith(_STRING)


def lexical_graph(graph: str) -> ox.NamedNode:
    return ox.NamedNode(f"urn:lucid-hub:lexical:{hashlib.sha256(graph.encode()).hexdigest()[:32]}")


def key(subject: str, predicate: str, native: str) -> str:
    """The record's subject IRI for a subject, predicate and native object (N-Triples texts)."""
    return f"urn:lucid-hub:lex:{hashlib.sha256(f'{subject} {predicate} {native}'.encode()).hexdigest()[:40]}"


class Natives:
    """What oxigraph makes of typed literals (their native forms), remembered."""

    def __init__(self) -> None:
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def of(self, objects: Iterable[str]) -> dict[str, str]:
        """Native form of each typed object term (N-Triples text) among `objects`."""
        wanted = {o for o in objects if typed(o)}
        with self._lock:
            found = {o: self._known[o] for o in wanted if o in self._known}
        missing = sorted(wanted - found.keys())
        if missing:
            # Oxigraph's own normalisation, asked directly: what it stores is what it does.
            scratch = ox.Store()
            scratch.load("".join(f"<urn:n:{i}> <urn:n:p> {o} .\n" for i, o in enumerate(missing)).encode(),
                         format=ox.RdfFormat.N_TRIPLES)
            for quad in scratch:
                assert isinstance(quad.subject, ox.NamedNode)
                found[missing[int(quad.subject.value[6:])]] = str(quad.object)
            with self._lock:
                if len(self._known) > _CACHE_SIZE:
                    self._known.clear()
                self._known.update((o, found[o]) for o in missing)
        return found


NATIVES = Natives()


def records(store: Any, graph: str) -> dict[str, list[str]]:
    """The forms recorded in a graph's lexical graph, by record IRI (usually none)."""
    out: dict[str, list[str]] = {}
    for quad in store.quads_for_pattern(None, FORM, None, lexical_graph(graph)):
        out.setdefault(quad.subject.value, []).append(quad.object.value)
    return out


def expand(statement: str, recorded: dict[str, list[str]]) -> list[str]:
    """A stored statement (native objects) as the statements published: one per recorded
    form, or itself when none is recorded."""
    if not recorded or not typed(statement):
        return [statement]
    subject, predicate, obj = terms(statement)
    forms = recorded.get(key(subject, predicate, obj))
    if forms is None:
        return [statement]
    return [f"{subject} {predicate} {form}" for form in sorted(forms)]


def expand_all(lines: Iterable[str], recorded: dict[str, list[str]]) -> Iterator[str]:
    for line in lines:
        yield from expand(line, recorded)


def _triple(subject: str, predicate: str, obj: str) -> ox.Triple:
    (quad,) = ox.parse(f"{subject} {predicate} {obj} .", format=ox.RdfFormat.N_TRIPLES)
    triple: ox.Triple = quad.triple
    return triple


class Forms:
    """The forms of typed literals of one graph as a patch changes them, and what that
    takes in the store: native triples removed and added, records removed and added."""

    def __init__(self, store: Any, graph: str, natives: dict[str, str], exists: bool = True,
                 known: dict[tuple[str, str, str], set[str]] | None = None) -> None:
        """`known`: forms of some keys as earlier patches not yet in the store leave them."""
        self.store = store
        self.known = known
        self.graph = ox.NamedNode(graph)
        self.lexical = lexical_graph(graph)
        self.natives = natives
        self.exists = exists  # a new graph holds nothing: no need to look
        self._initial: dict[tuple[str, str, str], frozenset[str]] = {}
        self._current: dict[tuple[str, str, str], set[str]] = {}

    def _forms(self, subject: str, predicate: str, native: str) -> set[str]:
        k = (subject, predicate, native)
        current = self._current.get(k)
        if current is None:
            present: frozenset[str] = frozenset()
            if self.known is not None and k in self.known:
                present = frozenset(self.known[k])
            elif self.exists:
                s, p, o = _triple(subject, predicate, native)
                if ox.Quad(s, p, o, self.graph) in self.store:
                    recorded = {q.object.value for q in self.store.quads_for_pattern(
                        ox.NamedNode(key(subject, predicate, native)), FORM, None, self.lexical)}
                    present = frozenset(recorded or {native})
            self._initial[k] = present
            current = self._current[k] = set(present)
        return current

    def holds(self, statement: str) -> bool:
        subject, predicate, obj = terms(statement)
        return obj in self._forms(subject, predicate, self.natives[obj])

    def remove(self, statement: str, patch_id: str) -> None:
        subject, predicate, obj = terms(statement)
        forms = self._forms(subject, predicate, self.natives[obj])
        if obj not in forms:
            raise PatchApplyError(f"patch {patch_id} removes a triple the graph does not hold: {statement}")
        forms.discard(obj)

    def add(self, statement: str) -> None:
        subject, predicate, obj = terms(statement)
        self._forms(subject, predicate, self.natives[obj]).add(obj)

    def current(self) -> dict[tuple[str, str, str], set[str]]:
        """The forms of each key the patch looked at, after it (a copy)."""
        return {k: set(v) for k, v in self._current.items()}

    def changes(self) -> tuple[list[str], list[str], list[str], list[str]]:
        """(native statements to delete, to insert, record statements to delete, to insert)."""
        delete: list[str] = []
        insert: list[str] = []
        forget: list[str] = []
        record: list[str] = []
        for (subject, predicate, native), before in self._initial.items():
            after = self._current[subject, predicate, native]
            if before and not after:
                delete.append(f"{subject} {predicate} {native}")
            elif after and not before:
                insert.append(f"{subject} {predicate} {native}")
            kept_before = before if before != {native} else frozenset()
            kept_after = after if after != {native} else set()
            if kept_before != kept_after:
                k = f"<{key(subject, predicate, native)}> <{FORM.value}>"
                forget.extend(f"{k} {ox.Literal(form)}" for form in sorted(kept_before - kept_after))
                record.extend(f"{k} {ox.Literal(form)}" for form in sorted(kept_after - kept_before))
        return delete, insert, forget, record
