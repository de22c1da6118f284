"""A patch shown as a review shows a change: subjects, removed and added side by side."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyoxigraph as ox

from lucid_hub.rdf.msg import Msg
from lucid_hub.web.console.figures import FOLD

COMMON = {"rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#", "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
          "xsd": "http://www.w3.org/2001/XMLSchema#", "owl": "http://www.w3.org/2002/07/owl#",
          "skos": "http://www.w3.org/2004/02/skos/core#", "dct": "http://purl.org/dc/terms/",
          "foaf": "http://xmlns.com/foaf/0.1/", "schema": "https://schema.org/", "prov": "http://www.w3.org/ns/prov#"}
OWN = 5  # namespaces of the patch's own IRIs given a prefix (the most used)
_LOCAL = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")  # a local name shown after a prefix (else the whole IRI)


def _namespace(iri: str) -> str:
    cut = max(iri.rfind("#"), iri.rfind("/"))
    return iri[:cut + 1] if cut > 0 else ""


class Prefixes:
    """How a review writes IRIs: `ns1:x` for the namespaces the patch itself uses most, the
    common vocabularies by their usual prefixes, the whole IRI on hover."""

    def __init__(self, iris: Iterable[str]) -> None:
        common = set(COMMON.values())
        used: Counter[str] = Counter()
        for iri in iris:  # (only IRIs a prefix would shorten: their local part is a name)
            ns = _namespace(iri)
            if ns and ns not in common and _LOCAL.fullmatch(iri[len(ns):]):
                used[ns] += 1
        own = {f"ns{i}": ns for i, (ns, count) in enumerate(used.most_common(OWN), start=1) if count > 1}
        self.names = {**own, **COMMON}
        self._by_namespace = {ns: name for name, ns in self.names.items()}

    def iri(self, iri: str) -> str:
        name = self._by_namespace.get(_namespace(iri))
        local = iri[len(_namespace(iri)):]
        return f"{name}:{local}" if name is not None and (not local or _LOCAL.fullmatch(local)) else f"<{iri}>"

    def used(self, shown: Iterable[str]) -> list[tuple[str, str]]:
        """The prefixes the shown texts use, for the page's legend."""
        texts = list(shown)
        return [(name, ns) for name, ns in self.names.items() if any(t.startswith(f"{name}:") for t in texts)]


@dataclass
class Node:
    """A statement's object as the patch view shows it: a term, or a nested blank node."""

    predicate: str
    text: str = ""
    folded: str = ""  # the whole of a long literal (text is its start)
    children: list[Node] = field(default_factory=list)
    title: str = ""  # the term in full (N-Triples), shown on hover
    kind: str = ""  # a typed literal's datatype (its value is the text)


@dataclass
class SubjectChange:
    """One subject's removed and added statements."""

    subject: str
    removed: list[Node] = field(default_factory=list)
    added: list[Node] = field(default_factory=list)


def _term(term: Any, prefixes: Prefixes) -> tuple[str, str, str]:
    """(shown text, whole text when folded, datatype) of an object term: an IRI by its
    prefix, a typed literal as its value with its type beside it."""
    if isinstance(term, ox.NamedNode):
        return prefixes.iri(term.value), "", ""
    if isinstance(term, ox.Literal):
        plain = term.datatype.value in (COMMON["xsd"] + "string", COMMON["rdf"] + "langString")
        kind = "" if plain else prefixes.iri(term.datatype.value)
        text = (f'"{term.value}"' + (f"@{term.language}" if term.language else "")) if plain else term.value
        if len(term.value) > FOLD:
            return (f'"{term.value[:FOLD]}…"' if plain else f"{term.value[:FOLD]}…"), text, kind
        return text, "", kind
    return str(term), "", ""


def _nested(quads: list[ox.Quad], prefixes: Prefixes) -> list[tuple[str, Node]]:
    """An MSG's statements as (subject, node) trees: statements about blank nodes nest under
    the statement that names them (once: a cycle or a shared node is shown where first met)."""
    about: dict[str, list[ox.Quad]] = defaultdict(list)
    for q in quads:
        about[str(q.subject)].append(q)
    named = {str(q.object) for q in quads if isinstance(q.object, ox.BlankNode)}
    roots = [s for s in about if not s.startswith("_:") or s not in named] or list(about)[:1]
    seen: set[str] = set()

    def node(q: ox.Quad) -> Node:
        obj = q.object
        key = str(obj)
        if isinstance(obj, ox.BlankNode) and key in about and key not in seen:
            seen.add(key)
            return Node(prefixes.iri(q.predicate.value), "[ ]", children=[node(inner) for inner in about[key]],
                        title=str(q.predicate))
        text, whole, kind = _term(obj, prefixes)
        return Node(prefixes.iri(q.predicate.value), text, whole, title=f"{q.predicate} {obj}", kind=kind)

    out = []
    for subject in roots:
        seen.add(subject)
        shown = "[ ]" if subject.startswith("_:") else prefixes.iri(subject[1:-1])
        out += [(shown, node(q)) for q in about[subject]]
    return out


def review(patch: Any) -> list[SubjectChange]:
    """The patch's rows by subject, removed and added side by side, subjects in order; IRIs
    by prefix (`prefixes(changes)` is the legend)."""
    parsed = [(side, list(ox.parse(msg.nquads, format=ox.RdfFormat.N_QUADS)))
              for side, msgs in (("removed", patch.removed), ("added", patch.added)) for msg in msgs]
    prefixes = Prefixes(t.value for _side, quads in parsed for q in quads
                        for t in (q.subject, q.predicate, q.object) if isinstance(t, ox.NamedNode))
    changes: dict[str, SubjectChange] = {}
    for side, quads in parsed:
        for subject, node in _nested(quads, prefixes):
            change = changes.setdefault(subject, SubjectChange(subject))
            getattr(change, side).append(node)
    found = [changes[s] for s in sorted(changes)]
    texts = [t for c in found for t in (c.subject, *_texts(c.removed), *_texts(c.added))]
    return Review(found, prefixes.used(texts))


def _texts(nodes: list[Node]) -> Iterable[str]:
    for n in nodes:
        yield n.predicate
        yield n.text
        yield n.kind
        yield from _texts(n.children)


class Review(list[SubjectChange]):
    """The changes by subject, and the prefixes they are written with."""

    def __init__(self, changes: list[SubjectChange], prefixes: list[tuple[str, str]]) -> None:
        super().__init__(changes)
        self.prefixes = prefixes


# The most patches a comparison of two versions reads (each is parsed): farther apart, the
# page asks for nearer versions.
COMPARE_PATCHES = 2_000


@dataclass
class NetChange:
    """What changed between two versions of a graph: the patches between them composed."""

    removed: list[Msg]
    added: list[Msg]
