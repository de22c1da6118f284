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


def test_doc_has_three_vectors_covering_ground_blank_and_blank_removal(vectors) -> None:  # type: ignore[no-untyped-def]
    assert sorted(DOC_VECTORS) == ["vector-1", "vector-2", "vector-3"]
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
    prev = None
    for name in ("vector-1", "vector-2", "vector-3"):
        patch = verify_patch_bytes(DOC_VECTORS[name].encode(), trusted, canonicalizer)
        assert patch.prev == prev
        prev = patch.id


def test_vector_msg_hashes_listed_in_the_doc_match(vectors) -> None:  # type: ignore[no-untyped-def]
    for _, _, patch in vectors:
        for op, msg in patch.rows():
            assert f"{op} sha256:{msg.hash}" in DOC
