"""The store's layout (format 2): where a graph's triples, its blank-node index, its lexical
forms and its version live, and how a stored blank node is named.

Each graph's triples are in its named graph, blank nodes as skolem IRIs
`<urn:lucid-hub:bnode:INSTANCE.N>` (one INSTANCE per stored MSG); the MSG index (each
instance's MSG hash and occurrence) in a graph of its own; the typed literals' lexical forms
(store/lexical.py) in another; versions in `urn:lucid-hub:system`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import pyoxigraph as ox

from lucid_hub.errors import InputError, StoreError
from lucid_hub.rdf.statements import relabel

RESERVED_PREFIX = "urn:lucid-hub:"
SKOLEM_PREFIX = "urn:lucid-hub:bnode:"
SYSTEM = ox.NamedNode("urn:lucid-hub:system")
VERSION = ox.NamedNode("urn:lucid-hub:version")
MSG = ox.NamedNode("urn:lucid-hub:msg")
OCCURRENCE = ox.NamedNode("urn:lucid-hub:occurrence")
FORMAT = 2
FORMAT_QUAD = ox.Quad(ox.NamedNode("urn:lucid-hub:store"), ox.NamedNode("urn:lucid-hub:format"),
                      ox.Literal(str(FORMAT)), SYSTEM)
SKOLEM = re.compile(r"<urn:lucid-hub:bnode:([0-9a-f]+)\.(\d+)>")


def instance_id(patch_id: str, row: int) -> str:
    """The id of the MSG instance that the `row`-th MSG of a patch creates: the same in
    every store that applies the same patches."""
    return hashlib.sha256(f"{patch_id}#{row}".encode()).hexdigest()[:24]


def index_graph(graph: str) -> ox.NamedNode:
    """The graph holding `graph`'s blank-node index (each instance's MSG hash and occurrence)."""
    return ox.NamedNode(f"urn:lucid-hub:msgs:{hashlib.sha256(graph.encode()).hexdigest()[:32]}")


def skolemise(statement: str, instance: str) -> str:
    """A canonical statement with its `_:c14nN` blank nodes named as the instance's."""
    return relabel(statement, lambda label: f"<{SKOLEM_PREFIX}{instance}.{label[len('_:c14n'):]}>")


def read_version(store: Any, graph: str) -> str | None:
    """The version marker of `graph` in a pyoxigraph store (the hub's, or a snapshot of it)."""
    for q in store.quads_for_pattern(ox.NamedNode(graph), VERSION, None, SYSTEM):
        return iri(q.object)
    return None


def check_no_skolem(statements: Iterable[str], source: str) -> None:
    """Refuse input that uses the reserved `urn:lucid-hub:` namespace (the store's own terms)."""
    for s in statements:
        if RESERVED_PREFIX in s:
            raise InputError(f"{source}: the IRI namespace {RESERVED_PREFIX} is reserved by lucid-hub")


def iri(term: object) -> str:
    assert isinstance(term, ox.NamedNode)
    return term.value


class _ClosedStore:
    """Stands in for a closed pyoxigraph Store: any use is a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise StoreError("the RDF store is closed")

    def __contains__(self, item: object) -> bool:
        raise StoreError("the RDF store is closed")


CLOSED: Any = _ClosedStore()
