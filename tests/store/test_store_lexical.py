"""Typed literals in the store: queries see values, reads and patches see the literals exactly
as published (store/lexical.py), whatever sequence of patches put them there."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyoxigraph as ox
from hypothesis import given, settings
from hypothesis import strategies as st

from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.store import GraphStore
from lucid_hub.store.layout import FORMAT
from tests.conftest import parse_nt, whole_canonical

G = "http://ex/g"
XSD = "http://www.w3.org/2001/XMLSchema#"
# Several lexical forms of few values: "01", "1" and "+1" are one integer; "1.50" and "1.5" one decimal.
LITERALS = [f'"{v}"^^<{XSD}integer>' for v in ("1", "01", "+1", "2", "-0", "0")] + [
    f'"{v}"^^<{XSD}decimal>' for v in ("1.5", "1.50", "01.5", "2.0", "2")] + [
    f'"{v}"^^<{XSD}boolean>' for v in ("true", "1")] + [
    f'"{v}"^^<{XSD}dateTime>' for v in ("2026-01-15T09:30:00Z", "2026-01-15T09:30:00.000Z",
                                        "2026-01-15T10:30:00+01:00")] + ['"1"', '"x"@en']
SUBJECTS = ["<http://ex/a>", "<http://ex/b>"]
PREDICATES = ["<http://ex/p>", "<http://ex/q>"]

triples = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES), st.sampled_from(LITERALS))
blank = st.tuples(st.sampled_from(PREDICATES), st.sampled_from(LITERALS))  # _:x <p> literal, linked from a


def document(ground: set[tuple[str, str, str]], nodes: list[tuple[str, str]]) -> str:
    lines = [f"{s} {p} {o} .\n" for s, p, o in sorted(ground)]
    for n, (p, o) in enumerate(nodes):
        lines.append(f"<http://ex/a> <http://ex/line> _:n{n} .\n_:n{n} {p} {o} .\n")
    return "".join(lines)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sets(triples, max_size=6), st.lists(blank, max_size=2)), min_size=1, max_size=5))
def test_the_store_reads_back_every_version_exactly(canonicalizer: Canonicalizer,
                                                   versions: list[tuple[set[tuple[str, str, str]],
                                                                        list[tuple[str, str]]]]) -> None:
    store = GraphStore()
    previous = parse_nt("")
    head = None
    for ground, nodes in versions:
        text = document(ground, nodes)
        current = parse_nt(text)
        change = diff_graph(previous, current, G, canonicalizer)
        if change.is_empty:
            continue
        patch = change.to_patch(head)
        store.apply(patch)
        head = patch.id
        assert whole_canonical(store.statements(G)) == whole_canonical([str(q) for q in current])
        # every literal a query finds is a value the graph holds (here in its canonical form)
        found = {str(s["o"]) for s in store._store.query(
            f"SELECT ?o WHERE {{ GRAPH <{G}> {{ ?s ?p ?o FILTER(isLiteral(?o)) }} }}")}
        values = {str(o) for o in _natives(q for q in current if isinstance(q.object, ox.Literal))}
        assert found == values
        previous = current


def _natives(quads: Iterable[ox.Quad]) -> set[Any]:
    scratch = ox.Store()
    for q in quads:
        scratch.add(ox.Quad(ox.NamedNode("urn:x"), ox.NamedNode("urn:p"), q.object))
    return {q.object for q in scratch}


def test_two_forms_of_one_value_are_one_stored_triple_with_both_forms(canonicalizer: Canonicalizer) -> None:
    store = GraphStore()
    both = f'<http://ex/a> <http://ex/p> "01"^^<{XSD}integer> .\n<http://ex/a> <http://ex/p> "1"^^<{XSD}integer> .\n'
    first = diff_graph(parse_nt(""), parse_nt(both), G, canonicalizer).to_patch(None)
    store.apply(first)
    assert sorted(store.statements(G)) == sorted(line[:-2] for line in both.splitlines())
    assert len(list(store._store.quads_for_pattern(None, None, None, ox.NamedNode(G)))) == 1
    only_one = f'<http://ex/a> <http://ex/p> "1"^^<{XSD}integer> .\n'
    second = diff_graph(parse_nt(both), parse_nt(only_one), G, canonicalizer).to_patch(first.id)
    store.apply(second)
    assert store.statements(G) == [only_one[:-3]]
    assert store.contains(G, only_one[:-3]) and not store.contains(G, f'<http://ex/a> <http://ex/p> "01"^^<{XSD}integer>')
    from lucid_hub.store.lexical import records

    assert records(store._store, G) == {}  # only the native form left: no record


def test_a_store_of_the_earlier_format_is_emptied_for_a_rebuild(tmp_path: Path) -> None:
    old = ox.Store(str(tmp_path / "store"))
    old.add(ox.Quad(ox.NamedNode(G), ox.NamedNode("urn:lucid-hub:version"), ox.NamedNode("urn:sha256:" + "0" * 64),
                    ox.NamedNode("urn:lucid-hub:system")))
    old.add(ox.Quad(ox.NamedNode("http://ex/a"), ox.NamedNode("http://ex/p"),
                    ox.Literal("01", datatype=ox.NamedNode("urn:lucid-hub:xsd:integer")), ox.NamedNode(G)))
    old.flush()
    del old
    store = GraphStore(tmp_path / "store")
    assert store.version(G) is None and store.graphs() == [] and store.statements(G) == []
    store.close()
    reopened = GraphStore(tmp_path / "store")  # now of the current format: kept as it is
    assert ox.Quad(ox.NamedNode("urn:lucid-hub:store"), ox.NamedNode("urn:lucid-hub:format"),
                   ox.Literal(str(FORMAT)), ox.NamedNode("urn:lucid-hub:system")) in reopened._store
    reopened.close()


def test_the_bulk_path_stores_what_the_transactional_path_stores(canonicalizer: Canonicalizer,
                                                                 monkeypatch: Any) -> None:
    """A large add-only patch is bulk-loaded (streamed to the store in chunks): its graph, its
    blank-node index and its lexical records are the same as a transaction would write."""
    from lucid_hub.store import graphs

    text = "".join(f'<http://ex/s{i}> <http://ex/p> "0{i}"^^<{XSD}integer> .\n<http://ex/s{i}> <http://ex/q> _:b{i} .\n'
                   f'_:b{i} <http://ex/p> "v{i}" .\n' for i in range(3000))
    patch = diff_graph(parse_nt(""), parse_nt(text), G, canonicalizer).to_patch(None)
    normal = GraphStore()
    normal.apply(patch)
    monkeypatch.setattr(graphs, "BULK_ADDITIONS", 10)
    bulk = GraphStore()
    bulk.apply(patch)
    assert len(patch.added) == 6000  # more than one 1,024-line chunk of the bulk stream
    assert set(bulk._store) == set(normal._store)
    assert sorted(bulk.statements(G)) == sorted(normal.statements(G)) and bulk.version(G) == patch.id
