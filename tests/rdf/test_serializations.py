"""RDF Patch, TriG and JSON-LD: each round-trips a patch exactly, id and signature included."""

from __future__ import annotations

import pytest
import rdflib

from lucid_hub.errors import PatchFormatError, PatchIntegrityError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import parse_rdf_patch, read_rdf_patch
from lucid_hub.rdf.serialization import PATCH_FORMATS, read_patch, sniff_patch_format, write_patch
from tests.vectors.build import build


@pytest.fixture(scope="module")
def patches(canonicalizer: Canonicalizer):  # type: ignore[no-untyped-def]
    return [p for _, _, p in build(canonicalizer)]


@pytest.mark.parametrize("fmt", PATCH_FORMATS)
def test_round_trip_is_exact(fmt: str, patches, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    for patch in patches:
        raw = write_patch(patch, fmt)
        back = read_patch(raw, canonicalizer, fmt)
        assert back == patch
        assert back.id == patch.id and back.signature == patch.signature
        assert write_patch(back, fmt) == raw
        assert sniff_patch_format(raw) == fmt


def test_rdflib_patch_parser_reads_our_rdf_patch(patches) -> None:  # type: ignore[no-untyped-def]
    first, second, _ = patches[:3]  # the format 1 chain
    ds = rdflib.Dataset()
    ds.parse(data=write_patch(first).decode() , format="patch")
    ds.parse(data=write_patch(second).decode(), format="patch")
    graph = ds.graph(rdflib.URIRef("http://example.org/graph/kpi"))
    assert len(graph) == 3 + 7


def test_every_header_line_ends_with_space_dot(patches) -> None:  # type: ignore[no-untyped-def]
    for patch in patches:
        for line in write_patch(patch).decode().splitlines():
            assert line.endswith(" ."), line


def test_trig_uses_the_eccenca_revision_vocabulary(patches) -> None:  # type: ignore[no-untyped-def]
    trig = write_patch(patches[1], "trig").decode()
    for term in ("eccrev:Commit", "eccrev:previousCommit", "eccrev:commitAuthor", "eccrev:commitMessage",
                 "eccrev:sha256", "prov:atTime", "eccrev:deltaInsert", "eccrev:hasRevisionGraph"):
        assert term in trig


@pytest.mark.parametrize("fmt", PATCH_FORMATS)
def test_changed_content_is_an_integrity_error(fmt: str, patches, canonicalizer: Canonicalizer) -> None:  # type: ignore[no-untyped-def]
    raw = write_patch(patches[0], fmt).replace(b"Lead time", b"Lead tim3")
    with pytest.raises(PatchIntegrityError):
        read_patch(raw, canonicalizer, fmt)


@pytest.mark.parametrize(("text", "message"), [
    (b"H graph <http://ex/g> .\nTX .\nA <http://ex/s> <http://ex/p> \"x .\nTC .\n", "line 3"),
    (b"H graph <http://ex/g> .\nTX .\nA <http://ex/s> <http://ex/p> \"x\" .\n", "not closed"),
    (b"H graph <http://ex/g> .\nTX .\nA <http://ex/s> <http://ex/p> \"x\" .\nD <http://ex/s> <http://ex/p> \"y\" .\nTC .\n",
     "D rows must come before A rows"),
    (b"H graph <http://ex/g> .\nPA ex: <http://ex/> .\n", "prefix rows"),
    (b"H graph <http://ex/g> .\nTX .\nTA .\n", "aborted"),
    (b"H graph <http://ex/g> .\nTX .\nA <http://ex/s> <http://ex/p> \"x\" <http://ex/other> .\nTC .\n", "graph"),
    (b"H graph <http://ex/g> .\nTX .\nD _:b <http://ex/p> \"x\" .\nA _:b <http://ex/p> \"y\" .\nTC .\n",
     "both D and A"),
    (b"H graph \"not an iri\" .\nTX .\nTC .\n", "IRI"),
    (b"H graph <http://ex/g> .\nXX .\n", "not an RDF Patch row"),
    (b"\xff\xfe", "UTF-8"),
])
def test_malformed_rdf_patch_gives_a_clear_error(text: bytes, message: str, canonicalizer: Canonicalizer) -> None:
    with pytest.raises(PatchFormatError, match=message):
        read_rdf_patch(text, canonicalizer)


def test_missing_headers_are_named(canonicalizer: Canonicalizer) -> None:
    with pytest.raises(PatchFormatError, match="author, message, created"):
        read_rdf_patch(b"H graph <http://ex/g> .\nTX .\nTC .\n", canonicalizer)


def test_other_tools_patches_with_triple_rows_parse_as_the_named_graph(canonicalizer: Canonicalizer) -> None:
    doc = parse_rdf_patch(b"TX .\nA <http://ex/s> <http://ex/p> _:x .\nA _:x <http://ex/q> \"1\" .\nTC .\n",
                          canonicalizer, graph="http://ex/g")
    assert len(doc.added) == 1 and not doc.removed


@pytest.mark.parametrize("fmt", PATCH_FORMATS)
def test_literals_with_unicode_line_separators_round_trip(fmt: str, canonicalizer: Canonicalizer) -> None:
    # U+2028, U+0085 and U+001E stay unescaped in canonical N-Triples; str.splitlines() broke on them.
    from lucid_hub.diff.local import diff_graph
    from tests.conftest import parse_nt

    new = parse_nt('_:x <http://ex/p> "a\u2028b\u0085c\u001ed" .\n<http://ex/s> <http://ex/p> "e\u2029f" .')
    patch = diff_graph([], new, "http://ex/g", canonicalizer).to_patch(None)
    assert read_patch(write_patch(patch, fmt), canonicalizer, fmt) == patch
