"""Properties over random graphs with blank nodes (chains, trees, RDF lists, shared nodes,
non-lean duplicates, literals with newlines, quotes, unicode, language tags, datatypes)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucid_hub.diff.local import diff_graph
from lucid_hub.errors import LucidError
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer, canonicalize_document
from lucid_hub.rdf.msg import blank_components
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.rdf.statements import terms
from lucid_hub.signing import SigningKey, TrustedKeys, jwks_of, sign_patch, verify_patch_bytes
from tests.conftest import whole_canonical

G = "http://example.org/g"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
WHEN = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

iris = st.integers(0, 5).map(lambda n: ox.NamedNode(f"http://example.org/i{n}"))
predicates = st.integers(0, 3).map(lambda n: ox.NamedNode(f"http://example.org/p{n}"))
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["line1\nline2", 'say "hi"', "back\\slash", "tab\there", "ünïcødé ☃ 😀", "", " ", "\r\n"])
literals = st.one_of(
    texts.map(ox.Literal),
    st.tuples(texts, st.sampled_from(["en", "de-CH", "fr"])).map(lambda t: ox.Literal(t[0], language=t[1])),
    st.tuples(st.sampled_from(["01", "1", "abc", "1.50", "-0", "1e3"]),
              st.sampled_from(["integer", "decimal", "double", "date"])).map(
        lambda t: ox.Literal(t[0], datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#" + t[1]))),
)


def _bnode(n: int) -> ox.BlankNode:
    return ox.BlankNode(f"b{n}")


@st.composite
def structures(draw: st.DrawFn) -> list[ox.Triple]:
    """One blank-node structure: a chain, a tree, an RDF list or random shared nodes."""
    kind = draw(st.sampled_from(["chain", "tree", "list", "shared"]))
    base = draw(st.integers(0, 10_000)) * 100
    out: list[ox.Triple] = []
    if kind == "chain":
        n = draw(st.integers(1, 5))
        out += [ox.Triple(_bnode(base + i), draw(predicates), _bnode(base + i + 1)) for i in range(n)]
        out.append(ox.Triple(_bnode(base + n), draw(predicates), draw(literals)))
    elif kind == "tree":
        n = draw(st.integers(2, 6))
        for i in range(1, n):
            out.append(ox.Triple(_bnode(base + draw(st.integers(0, i - 1))), draw(predicates), _bnode(base + i)))
        out += [ox.Triple(_bnode(base + i), draw(predicates), draw(literals | iris)) for i in range(n)]
    elif kind == "list":
        items = draw(st.lists(literals | iris, min_size=1, max_size=4))
        for i, item in enumerate(items):
            out.append(ox.Triple(_bnode(base + i), ox.NamedNode(RDF + "first"), item))
            rest = _bnode(base + i + 1) if i + 1 < len(items) else ox.NamedNode(RDF + "nil")
            out.append(ox.Triple(_bnode(base + i), ox.NamedNode(RDF + "rest"), rest))
        out.append(ox.Triple(draw(iris), draw(predicates), _bnode(base)))
    else:
        for _ in range(draw(st.integers(1, 6))):
            s = _bnode(base + draw(st.integers(0, 3))) if draw(st.booleans()) else draw(iris)
            o = _bnode(base + draw(st.integers(0, 3))) if draw(st.booleans()) else draw(literals | iris)
            out.append(ox.Triple(s, draw(predicates), o))
    if draw(st.booleans()):  # a non-lean duplicate of the whole structure, other labels
        out += [ox.Triple(_shift(t.subject), t.predicate, _shift(t.object)) for t in out]
    return out


def _shift(term: ox.NamedNode | ox.BlankNode | ox.Literal) -> ox.NamedNode | ox.BlankNode | ox.Literal:
    return ox.BlankNode(term.value + "d") if isinstance(term, ox.BlankNode) else term


@st.composite
def graphs(draw: st.DrawFn) -> list[ox.Quad]:
    ground = draw(st.lists(st.builds(ox.Triple, iris, predicates, literals | iris), max_size=8))
    triples = list(ground)
    for structure in draw(st.lists(structures(), max_size=3)):
        triples += structure
    return [ox.Quad(t.subject, t.predicate, t.object) for t in triples]


def relabel(quads: list[ox.Quad], seed: int) -> list[ox.Quad]:
    """The same graph with other blank-node labels, in another order."""
    rng = random.Random(seed)
    mapping: dict[str, ox.BlankNode] = {}

    def fresh(term):  # type: ignore[no-untyped-def]
        if isinstance(term, ox.BlankNode):
            return mapping.setdefault(term.value, ox.BlankNode(f"r{rng.randrange(10**9)}x{len(mapping)}"))
        return term

    out = [ox.Quad(fresh(q.subject), q.predicate, fresh(q.object)) for q in quads]
    rng.shuffle(out)
    return out


@SETTINGS
@given(a=graphs(), b=graphs())
def test_applying_the_diff_of_a_to_b_onto_a_gives_b(a: list[ox.Quad], b: list[ox.Quad], canonicalizer: Canonicalizer) -> None:
    patch = diff_graph(a, b, G, canonicalizer).to_patch(None, created=WHEN)
    replica = GraphReplica(relabel(a, 1), canonicalizer)
    replica.apply(patch)
    assert whole_canonical(list(replica.statements())) == whole_canonical([str(q) for q in b])


@SETTINGS
@given(a=graphs(), seed=st.integers())
def test_diff_against_a_relabelled_copy_is_empty(a: list[ox.Quad], seed: int, canonicalizer: Canonicalizer) -> None:
    assert diff_graph(a, relabel(a, seed), G, canonicalizer).is_empty


@SETTINGS
@given(a=graphs(), b=graphs(), seed=st.integers())
def test_patch_id_does_not_depend_on_blank_node_labels_or_triple_order(
        a: list[ox.Quad], b: list[ox.Quad], seed: int, canonicalizer: Canonicalizer) -> None:
    one = diff_graph(a, b, G, canonicalizer).to_patch(None, author="a", message="m", created=WHEN)
    two = diff_graph(relabel(a, seed), relabel(b, seed + 1), G, canonicalizer).to_patch(
        None, author="a", message="m", created=WHEN)
    assert one.id == two.id and one.canonical_bytes == two.canonical_bytes


@SETTINGS
@given(a=graphs(), b=graphs(), data=st.data())
def test_any_changed_byte_of_a_signed_patch_fails_verification(
        a: list[ox.Quad], b: list[ox.Quad], data: st.DataObject, canonicalizer: Canonicalizer,
        signing_key: SigningKey) -> None:
    patch = sign_patch(diff_graph(a, b, G, canonicalizer).to_patch(None, created=WHEN), signing_key)
    raw = bytearray(write_rdf_patch(patch))
    trusted = TrustedKeys(jwks_of([signing_key]))
    assert verify_patch_bytes(bytes(raw), trusted, canonicalizer).id == patch.id
    index = data.draw(st.integers(0, len(raw) - 1), label="index")
    value = data.draw(st.integers(0, 255).filter(lambda v: v != raw[index]), label="value")
    raw[index] = value
    with pytest.raises(LucidError):
        verify_patch_bytes(bytes(raw), trusted, canonicalizer)


@SETTINGS
@given(a=graphs())
def test_fast_canonical_paths_equal_pyoxigraph_rdfc10(a: list[ox.Quad], canonicalizer: Canonicalizer) -> None:
    statements = {str(q) for q in a if "_:" in str(q)}
    for component in blank_components(statements):
        expected = canonicalize_document("".join(f"{s} .\n" for s in component.statements))
        assert canonicalizer.canonicalize(component.statements) == expected


@SETTINGS
@given(s=iris | st.integers(0, 3).map(_bnode), o=literals | iris | st.integers(0, 3).map(_bnode),
       g=st.none() | iris | st.integers(0, 3).map(_bnode))
def test_statement_terms_agree_with_pyoxigraph(s, o, g) -> None:  # type: ignore[no-untyped-def]
    p = ox.NamedNode("http://example.org/p")
    quad = ox.Quad(s, p, o, g) if g is not None else ox.Quad(s, p, o)
    expected = [str(s), str(p), str(o)] + ([str(g)] if g is not None else [])
    assert terms(str(quad)) == expected
