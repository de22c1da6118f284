"""docs/patch-format.md is the specification: its test vectors must be exactly what we produce."""

from __future__ import annotations

import hashlib
import re

import pytest

from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import split_wire, write_rdf_patch
from lucid_hub.signing import TrustedKeys, jwks_of, load_key, verify_patch_bytes
from tests.conftest import REPO
from tests.vectors.build import KEY_FILE, build

DOC = (REPO / "docs" / "patch-format.md").read_text()
DOC_VECTORS = dict(re.findall(r"```rdf-patch (vector-\d+)\n(.*?)```", DOC, re.S))


@pytest.fixture(scope="module")
def vectors(canonicalizer: Canonicalizer):  # type: ignore[no-untyped-def]
    return build(canonicalizer)


def test_doc_has_vectors_of_both_formats_covering_ground_blank_and_blank_removal(vectors) -> None:  # type: ignore[no-untyped-def]
    assert sorted(DOC_VECTORS) == [f"vector-{n}" for n in range(1, 9)]
    assert [p.format for _, _, p in vectors] == [1, 1, 1, 2, 2, 2, 2, 3]
    assert len(vectors[7][2].metadata) == 3
    _, _, v6 = vectors[5]
    _, _, v7 = vectors[6]
    assert "_:h" in DOC_VECTORS["vector-6"] and "_:m" not in DOC_VECTORS["vector-6"]
    # vector-6 removes the MSG vector-5 added, under the very label vector-5 gave it
    (removed,) = [m for m in v6.removed if "_:" in m.nquads]
    label = f"_:h{removed.hash[:24]}o0b0"
    assert label in DOC_VECTORS["vector-5"] and label in DOC_VECTORS["vector-6"]
    assert v7.added_occurrences == (1, 2)
    _, _, v1 = vectors[0]
    _, _, v2 = vectors[1]
    _, _, v3 = vectors[2]
    assert all("_:" not in m.nquads for m in v1.added) and not v1.removed
    assert any("_:c14n0" in m.nquads for m in v2.added)
    assert any("_:c14n0" in m.nquads for m in v3.removed)


def test_doc_vectors_are_byte_identical_to_what_the_implementation_builds(vectors) -> None:  # type: ignore[no-untyped-def]
    for name, _, patch in vectors:
        assert DOC_VECTORS[name].encode() == write_rdf_patch(patch), f"{name} in docs/patch-format.md is stale"
        assert f"id: `{patch.id}`" in DOC


def test_vector_ids_are_sha256_of_the_bytes_after_id_and_signature_lines() -> None:
    for text in DOC_VECTORS.values():
        parts = split_wire(text.encode())
        assert parts.claimed_id == "urn:sha256:" + hashlib.sha256(parts.preimage).hexdigest()
        assert parts.preimage.startswith(b"H graph <http://example.org/graph/kpi> .\n")


def test_vectors_form_one_chain_and_verify_with_the_published_test_key(canonicalizer: Canonicalizer) -> None:
    trusted = TrustedKeys(jwks_of([load_key(KEY_FILE)]))
    assert trusted.kids == ["kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"]  # RFC 8037 A.3
    for chain in (("vector-1", "vector-2", "vector-3"), ("vector-4", "vector-5", "vector-6", "vector-7", "vector-8")):
        prev = None
        for name in chain:
            patch = verify_patch_bytes(DOC_VECTORS[name].encode(), trusted, canonicalizer)
            assert patch.prev == prev
            prev = patch.id


def test_vector_msg_hashes_listed_in_the_doc_match(vectors) -> None:  # type: ignore[no-untyped-def]
    for _, _, patch in vectors:
        for op, msg in patch.rows():
            assert f"{op} sha256:{msg.hash}" in DOC


def test_every_vector_round_trips_through_trig_and_json_ld(vectors, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    from lucid_hub.rdf.serialization import read_patch, write_patch

    for name, _, patch in vectors:
        for fmt in ("trig", "jsonld"):
            back = read_patch(write_patch(patch, fmt), canonicalizer, fmt)
            assert (back.id, back.format, back.added_occurrences, back.signature) == (
                patch.id, patch.format, patch.added_occurrences, patch.signature), (name, fmt)


def test_a_format_2_label_that_does_not_name_its_msg_is_refused(canonicalizer: Canonicalizer) -> None:
    from lucid_hub.errors import PatchFormatError
    from lucid_hub.rdf.rdfpatch import read_rdf_patch

    text = DOC_VECTORS["vector-5"]
    body = text.split("\n", 2)[2]  # without its id and signature lines
    forged = body.replace("_:h191686db6dfce226fed9e7c7o0b0", "_:h000000000000000000000000o0b0")
    assert forged != body
    with pytest.raises(PatchFormatError, match="do not name their MSG's hash"):
        read_rdf_patch(forged.encode(), canonicalizer)
    mixed = body.replace("_:h191686db6dfce226fed9e7c7o0b0 <http://example.org/product>",
                         "_:h191686db6dfce226fed9e7c7o1b0 <http://example.org/product>", 1)
    with pytest.raises(PatchFormatError):  # the row left on its own names no MSG of its hash
        read_rdf_patch(mixed.encode(), canonicalizer)
    two_copies = body.replace("_:h191686db6dfce226fed9e7c7o0b0", "_:other")
    with pytest.raises(PatchFormatError, match="labelled _:hHASHoOCCbN"):
        read_rdf_patch(two_copies.encode(), canonicalizer)
