"""MSG decomposition, canonical hashing and the multiset state of a graph."""

from __future__ import annotations

import pyoxigraph as ox

from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import blank_components, dataset_msgs, graph_msgs, msg_hash
from tests.conftest import parse_nt

G = "http://ex/g"


def test_ground_triple_is_its_own_msg_hashed_over_its_canonical_line(canonicalizer: Canonicalizer) -> None:
    gm = graph_msgs(parse_nt('<http://ex/s> <http://ex/p> "v" .'), canonicalizer)
    (msg,) = gm.msgs()
    assert msg.nquads == '<http://ex/s> <http://ex/p> "v" .\n'
    assert msg.hash == msg_hash('<http://ex/s> <http://ex/p> "v" .\n')


def test_triples_linked_by_blank_nodes_form_one_msg(canonicalizer: Canonicalizer) -> None:
    gm = graph_msgs(parse_nt(
        '<http://ex/s> <http://ex/p> _:a .\n_:a <http://ex/q> _:b .\n_:b <http://ex/r> "x" .\n'
        '_:c <http://ex/r> "y" .\n<http://ex/s> <http://ex/t> "z" .\n'
    ), canonicalizer)
    sizes = sorted(m.nquads.count("\n") for m in gm.msgs())
    assert sizes == [1, 1, 3]


def test_blank_node_graph_name_links_the_graphs_statements(canonicalizer: Canonicalizer) -> None:
    quads = list(ox.parse(
        '<http://ex/a> <http://ex/p> "1" _:g .\n<http://ex/b> <http://ex/p> "2" _:g .\n'
        '<http://ex/c> <http://ex/p> "3" <http://ex/named> .\n', format=ox.RdfFormat.N_QUADS))
    msgs = dataset_msgs(quads, canonicalizer)
    assert sorted(m.nquads.count("\n") for m in msgs) == [1, 2]
    (blank_msg,) = [m for m in msgs if "_:c14n0" in m.nquads]
    assert blank_msg.nquads.endswith("_:c14n0 .\n")


def test_union_find_merges_chains_reached_from_both_ends() -> None:
    comps = blank_components(["_:a <p> _:b", "_:c <p> _:d", "_:b <p> _:c", "_:x <p> <o>"])
    assert sorted(sorted(c.labels) for c in comps) == [["_:a", "_:b", "_:c", "_:d"], ["_:x"]]


def test_non_lean_graph_keeps_msg_counts(canonicalizer: Canonicalizer) -> None:
    two = graph_msgs(parse_nt('<http://ex/a> <http://ex/p> _:x .\n<http://ex/a> <http://ex/p> _:y .'), canonicalizer)
    one = graph_msgs(parse_nt('<http://ex/a> <http://ex/p> _:x .'), canonicalizer)
    assert list(two.hashes().values()) == [2]
    assert list(one.hashes().values()) == [1]
    change = diff_graph(parse_nt('<http://ex/a> <http://ex/p> _:x .\n<http://ex/a> <http://ex/p> _:y .'),
                        parse_nt('<http://ex/a> <http://ex/p> _:z .'), G, canonicalizer)
    assert len(change.removed) == 1 and not change.added


def test_relabelled_blank_nodes_give_identical_msgs(canonicalizer: Canonicalizer) -> None:
    a = graph_msgs(parse_nt('_:a <http://ex/p> _:b .\n_:b <http://ex/p> "1" .\n_:a <http://ex/q> "2" .'), canonicalizer)
    b = graph_msgs(parse_nt('_:zz <http://ex/q> "2" .\n_:yy <http://ex/p> "1" .\n_:zz <http://ex/p> _:yy .'), canonicalizer)
    assert a.hashes() == b.hashes()


def test_the_same_triple_twice_in_a_file_is_one_triple(canonicalizer: Canonicalizer) -> None:
    gm = graph_msgs(parse_nt('_:a <http://ex/p> "1" .\n_:a <http://ex/p> "1" .\n<http://ex/s> <http://ex/p> "1" .\n'
                             '<http://ex/s> <http://ex/p> "1" .'), canonicalizer)
    assert len(gm) == 2
