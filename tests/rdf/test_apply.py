"""Applying patches: removal by canonical MSG, fresh blank nodes, chain checks, nothing half-done."""

from __future__ import annotations

from collections.abc import Iterator

import pyoxigraph as ox
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lucid_hub.diff.local import diff_graph
from lucid_hub.errors import ChainError, PatchApplyError
from lucid_hub.rdf.apply import GraphReplica, apply_to_msgs
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs, graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import statement_quads
from lucid_hub.store import GraphStore
from tests.conftest import parse_nt, whole_canonical

G = "http://ex/g"
V1 = '<http://ex/o> <http://ex/line> _:a .\n_:a <http://ex/qty> "1" .\n<http://ex/o> <http://ex/status> "open" .\n'
V2 = '<http://ex/o> <http://ex/line> _:b .\n_:b <http://ex/qty> "2" .\n<http://ex/o> <http://ex/status> "open" .\n'


def test_removed_msg_with_blank_nodes_matches_isomorphic_copy(canonicalizer: Canonicalizer) -> None:
    patch = diff_graph(parse_nt(V1), parse_nt(V2), G, canonicalizer).to_patch(None)
    # The replica holds V1 with other blank-node labels than the publisher's file.
    replica = GraphReplica(parse_nt(V1.replace("_:a", "_:local42")), canonicalizer)
    replica.apply(patch)
    assert replica.version == patch.id
    assert whole_canonical(list(replica.statements())) == whole_canonical([str(q) for q in parse_nt(V2)])


def test_chain_mismatch_changes_nothing(canonicalizer: Canonicalizer) -> None:
    patch = diff_graph(parse_nt(V1), parse_nt(V2), G, canonicalizer).to_patch(None)
    replica = GraphReplica(parse_nt(V1), canonicalizer, version="urn:sha256:" + "0" * 64)
    before = sorted(replica.statements())
    with pytest.raises(ChainError, match="follows none"):
        replica.apply(patch)
    assert sorted(replica.statements()) == before and replica.version == "urn:sha256:" + "0" * 64


def test_replayed_patch_is_a_chain_error(canonicalizer: Canonicalizer) -> None:
    patch = diff_graph(parse_nt(V1), parse_nt(V2), G, canonicalizer).to_patch(None)
    replica = GraphReplica(parse_nt(V1), canonicalizer)
    replica.apply(patch)
    with pytest.raises(ChainError):
        replica.apply(patch)


def test_missing_removed_msg_is_an_apply_error_and_changes_nothing(canonicalizer: Canonicalizer) -> None:
    patch = diff_graph(parse_nt(V1), parse_nt(V2), G, canonicalizer).to_patch(None)
    diverged = GraphReplica(parse_nt(V1.replace('"1"', '"9"')), canonicalizer)
    before = sorted(diverged.statements())
    with pytest.raises(PatchApplyError, match="diverged"):
        diverged.apply(patch)
    assert sorted(diverged.statements()) == before and diverged.version is None


def test_counts_are_respected_for_non_lean_graphs(canonicalizer: Canonicalizer) -> None:
    two = '<http://ex/a> <http://ex/p> _:x .\n<http://ex/a> <http://ex/p> _:y .\n'
    three = two + '<http://ex/a> <http://ex/p> _:z .\n'
    patch = diff_graph(parse_nt(three), parse_nt(""), G, canonicalizer).to_patch(None)
    assert len(patch.removed) == 3
    with pytest.raises(PatchApplyError, match="3x, but the graph holds it 2x"):
        GraphReplica(parse_nt(two), canonicalizer).apply(patch)
    replica = GraphReplica(parse_nt(three), canonicalizer)
    replica.apply(patch)
    assert len(replica) == 0


def test_added_msgs_get_fresh_blank_nodes(canonicalizer: Canonicalizer) -> None:
    patch = diff_graph(parse_nt(""), parse_nt('<http://ex/a> <http://ex/p> _:x .\n<http://ex/a> <http://ex/p> _:y .'),
                       G, canonicalizer).to_patch(None)
    replica = GraphReplica(parse_nt('_:c14n0 <http://ex/q> "keep" .'), canonicalizer)
    replica.apply(patch)
    objects = [s.split(" ")[2] for s in replica.statements() if "<http://ex/p>" in s]
    assert len(set(objects)) == 2 and "_:c14n0" not in objects
    assert len(list(replica.triples())) == 3


copies = st.lists(st.sampled_from(['_:x <http://ex/qty> "1" .', '_:x <http://ex/qty> "2" .',
                                   '_:x <http://ex/qty> "1" .\n_:x <http://ex/unit> "kg" .']), max_size=5)


def version_text(version: list[str], ground: bool = False) -> str:
    """One version of an order graph: a line per copy (blank nodes), and with `ground` a
    ground triple that changes with the number of lines."""
    head = f'<http://ex/o> <http://ex/lines> "{len(version)}" .\n' if ground else ""
    return head + "".join(f'<http://ex/o> <http://ex/line> _:n{i} .\n{copy.replace("_:x", f"_:n{i}")}\n'
                          for i, copy in enumerate(version))


def chain(versions: list[list[str]], replica: GraphReplica, canonicalizer: Canonicalizer,
          ground: bool = False) -> Iterator[Patch]:
    """The format-2 patches from each version to the next (empty changes skipped), built
    from the replica's occurrences and applied to it."""
    previous: list[ox.Quad] = []
    for version in versions:
        current = parse_nt(version_text(version, ground))
        change = diff_graph(previous, current, G, canonicalizer)
        previous = current
        if not change.is_empty:
            patch = change.to_patch(replica.version, held=replica.held)
            replica.apply(patch)
            yield patch


@settings(max_examples=40, deadline=None)
@given(st.lists(copies, min_size=1, max_size=5))
def test_replica_and_store_agree_on_occurrences_through_a_format_2_chain(canonicalizer: Canonicalizer,
                                                                          versions: list[list[str]]) -> None:
    """Format-2 patches built from a replica's occurrences (GraphReplica.held) apply to a store,
    and both then hold the same occurrences of every MSG, repeated copies included."""
    replica = GraphReplica([], canonicalizer)
    store = GraphStore()
    for patch in chain(versions, replica, canonicalizer):
        assert patch.format == 2
        store.apply(patch)
        assert sorted(replica.statements()) == sorted(store.statements(G))
        for msg in {*patch.removed, *patch.added}:
            assert sorted(replica.held(msg.hash)) == sorted(store.held(G, msg.hash))


@settings(max_examples=40, deadline=None)
@given(st.lists(copies, min_size=1, max_size=5))
def test_msg_multiset_follows_a_chain_as_the_replica_does(canonicalizer: Canonicalizer,
                                                          versions: list[list[str]]) -> None:
    """apply_to_msgs (the publisher's cache, the policy graph) and GraphReplica (labelled
    content) reach the same MSG multiset through any chain, repeated copies included; and
    that multiset is the one the last version decomposes into."""
    replica = GraphReplica([], canonicalizer)
    msgs = GraphMsgs()
    for patch in chain(versions, replica, canonicalizer, ground=True):
        apply_to_msgs(msgs, patch)
        assert msgs.hashes() == graph_msgs(statement_quads(replica.statements()), canonicalizer).hashes()
    assert msgs.hashes() == graph_msgs(parse_nt(version_text(versions[-1], ground=True)), canonicalizer).hashes()
