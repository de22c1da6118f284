"""A patch shown as a review reads as people write RDF: the patch's own namespaces and the
common vocabularies by prefix (the full IRI on hover, a legend of the prefixes used), typed
literals as their value with the type beside it."""

from __future__ import annotations

import pyoxigraph as ox

from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.web.console.review import Prefixes, review

XSD = "http://www.w3.org/2001/XMLSchema#"
DATA = (f'<https://acme.example/kpi/otif> <https://acme.example/kpi/value> "100"^^<{XSD}integer> .\n'
        '<https://acme.example/kpi/otif> <http://www.w3.org/2000/01/rdf-schema#label> "On time"@en .\n'
        '<https://acme.example/kpi/otif> <https://acme.example/kpi/note> "plain" .\n'
        '<https://acme.example/kpi/otif> <https://acme.example/kpi/week> <https://acme.example/weeks/2026-47> .\n')


def test_a_review_writes_iris_by_prefix_and_typed_literals_as_values(canonicalizer: Canonicalizer) -> None:
    quads = [ox.Quad(t.subject, t.predicate, t.object) for t in ox.parse(DATA, format=ox.RdfFormat.N_TRIPLES)]
    patch = Patch.build("https://acme.example/graphs/kpi", None, [], graph_msgs(quads, canonicalizer).msgs())
    (change,) = changes = review(patch)
    assert change.subject == "ns1:otif"
    shown = {n.predicate: (n.text, n.kind, n.title) for n in change.added}
    assert shown["ns1:value"][:2] == ("100", "xsd:integer")
    assert shown["ns1:value"][2] == f'<https://acme.example/kpi/value> "100"^^<{XSD}integer>'  # the whole, on hover
    assert shown["rdfs:label"][:2] == ('"On time"@en', "")
    assert shown["ns1:note"][:2] == ('"plain"', "")
    assert shown["ns1:week"][0] == "<https://acme.example/weeks/2026-47>"  # (a namespace used once: in full)
    assert changes.prefixes == [("ns1", "https://acme.example/kpi/"), ("rdfs", "http://www.w3.org/2000/01/rdf-schema#"),
                                ("xsd", XSD)]


def test_iris_whose_local_part_is_not_a_name_stay_whole() -> None:
    prefixes = Prefixes(["http://example.org/po/1", "http://example.org/po/x", "http://example.org/po/y"])
    assert prefixes.iri("http://example.org/po/x") == "ns1:x"
    assert prefixes.iri("http://example.org/po/1") == "<http://example.org/po/1>"  # ns1:1 is not a name
    assert prefixes.iri("http://example.org/po/a b") == "<http://example.org/po/a b>"
