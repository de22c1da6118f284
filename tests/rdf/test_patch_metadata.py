"""Publisher metadata on patches (format 3): part of the canonical bytes, so hashed and signed
with the change; read back by every reader (RDF Patch fast and general, TriG, JSON-LD, rdflib);
malformed metadata refused with the reason. Patches without metadata keep format 2, so old
patches and their ids are untouched (the vectors of docs/patch-format.md check that)."""

from __future__ import annotations

import json

import pyoxigraph as ox
import pytest
import rdflib

from lucid_hub.errors import PatchFormatError, PatchIntegrityError
from lucid_hub.rdf import metadata as meta
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import (
    _read_rdf_patch,
    header_lines,
    read_canonical,
    read_rdf_patch,
    split_wire,
    write_rdf_patch,
)
from lucid_hub.rdf.revision import read_revision, write_revision
from lucid_hub.signing import TrustedKeys, generate_key, sign_patch

G = "http://example.org/graph/orders"
DCT = "http://purl.org/dc/terms/"
XSD = "http://www.w3.org/2001/XMLSchema#"
HEADER = json.dumps({
    f"{DCT}source": {"@id": "https://erp.example/orders/7"},
    "https://schema.example/tier": ["gold", {"@value": "3", "@type": f"{XSD}integer"}],
    f"{DCT}description": {"@value": 'Lager "Nord"\nRampe 2', "@language": "de"},
})
CONTENT = ('<http://ex/o7> <http://ex/status> "open" .\n<http://ex/o7> <http://ex/line> _:l .\n'
           '_:l <http://ex/qty> "3" .\n')


def _patch(canonicalizer: Canonicalizer, metadata: meta.Metadata, prev: str | None = None) -> Patch:
    quads = [ox.Quad(t.subject, t.predicate, t.object) for t in ox.parse(CONTENT, format=ox.RdfFormat.N_TRIPLES)]
    return Patch.build(G, prev, [], graph_msgs(quads, canonicalizer).msgs(), author="erp", message="order 7",
                       held=lambda _h: [], metadata=metadata)


def test_metadata_is_format_3_hashed_signed_and_read_back_by_every_reader(canonicalizer: Canonicalizer) -> None:
    metadata = meta.from_json(HEADER)
    key = generate_key()
    patch = sign_patch(_patch(canonicalizer, metadata), key)
    assert patch.format == 3 and len(patch.metadata) == 4
    raw = write_rdf_patch(patch)
    text = raw.decode()
    assert 'H format "3" .' in text
    assert text.count("\nH meta ") == 4
    assert f'H meta "<{DCT}source> <https://erp.example/orders/7>" .' in text
    # the fast reader (mirrors' hot path) and the general one agree, metadata included
    fast = read_canonical(split_wire(raw), canonicalizer)
    assert fast is not None and fast.metadata == metadata and fast.id == patch.id
    general = _read_rdf_patch(raw, canonicalizer)
    assert general.metadata == metadata and general.id == patch.id
    TrustedKeys({"keys": [key.public_jwk()]}).verify(general.id, general.signature)
    for fmt in ("trig", "jsonld"):
        again = read_revision(write_revision(patch, fmt), fmt, canonicalizer)
        assert again.id == patch.id and again.metadata == metadata
    # (from the headers alone, as `lucid-hub log` reads them)
    assert tuple(meta.from_header_text(t) for t in header_lines(raw, "meta")) == metadata
    assert meta.from_json(json.dumps(meta.to_json(metadata))) == metadata
    # the same change without metadata is another patch, format 2, with another id
    plain = _patch(canonicalizer, ())
    assert plain.format == 2 and "H meta" not in plain.canonical_bytes.decode()


def test_changing_or_dropping_one_metadata_line_breaks_the_id(canonicalizer: Canonicalizer) -> None:
    patch = sign_patch(_patch(canonicalizer, meta.from_json(HEADER)), generate_key())
    raw = write_rdf_patch(patch)
    changed = raw.replace(b"orders/7", b"orders/8")
    dropped = b"".join(line for line in raw.splitlines(keepends=True) if b"tier" not in line)
    for tampered in (changed, dropped):
        with pytest.raises(PatchIntegrityError):
            read_rdf_patch(tampered, canonicalizer)


def test_rdflib_reads_a_format_3_patch_as_rdf_patch(canonicalizer: Canonicalizer) -> None:
    """A generic RDF Patch reader takes the metadata lines as headers and applies the rows."""
    raw = write_rdf_patch(_patch(canonicalizer, meta.from_json(HEADER)))
    dataset = rdflib.Dataset()
    dataset.parse(data=raw.decode(), format="patch")
    assert len(dataset.graph(rdflib.URIRef(G))) == 3


@pytest.mark.parametrize(("header", "reason"), [
    ("not json", "not JSON"),
    ('["a"]', "JSON object"),
    ('{"relative": "x"}', "not an absolute IRI"),
    (f'{{"{DCT}source": {{"@id": "not an iri"}}}}', "source"),
    (f'{{"{DCT}source": 5}}', "a value is a string"),
    (f'{{"{DCT}source": {{"@value": "x", "@type": "{XSD}int", "@language": "de"}}}}', "not both"),
    ('{"https://vocab.eccenca.com/revision/commitAuthor": "mallory"}', "fixed header"),
    ('{"urn:lucid-hub:ns:signature": "x"}', "fixed header"),
    ('{"http://www.w3.org/1999/02/22-rdf-syntax-ns#type": {"@id": "http://x/Commit"}}', "fixed header"),
    (json.dumps({f"http://x/p{i}": "v" for i in range(meta.MAX_ENTRIES + 1)}), "at most 32"),
    (json.dumps({"http://x/p": "v" * (meta.MAX_BYTES + 1)}), "bytes"),
])
def test_malformed_metadata_is_refused_with_the_reason(header: str, reason: str) -> None:
    with pytest.raises(PatchFormatError, match=reason):
        meta.from_json(header)


def test_readers_refuse_metadata_outside_format_3_and_blank_node_values(canonicalizer: Canonicalizer) -> None:
    with pytest.raises(PatchFormatError, match="needs patch format 3"):
        Patch(G, None, "", "", _patch(canonicalizer, ()).created, (), (), format=2,
              metadata=((f"{DCT}source", "<http://x>"),))
    with pytest.raises(PatchFormatError, match="format 1"):  # (the offline diff: no occurrences, no metadata)
        Patch.build(G, None, [], [], metadata=((f"{DCT}source", "<http://x>"),))
    with pytest.raises(PatchFormatError, match="IRI or a literal"):
        meta.from_header_text(f"<{DCT}source> _:b0")
    with pytest.raises(PatchFormatError, match="sorted and distinct"):
        meta.check(((f"{DCT}z", '"1"'), (f"{DCT}a", '"1"')))
    # a format 2 patch with a meta line: the general reader says why it is refused
    plain = write_rdf_patch(_patch(canonicalizer, ())).decode()
    smuggled = plain.replace("TX .\n", f'H meta "<{DCT}source> <http://x>" .\nTX .\n').split("\n", 1)[1]
    with pytest.raises(PatchFormatError, match="needs patch format 3"):
        read_rdf_patch(smuggled.encode(), canonicalizer)
    unsupported = plain.replace('H format "2"', 'H format "4"').split("\n", 1)[1]
    with pytest.raises(PatchFormatError, match="formats 1, 2 and 3"):
        read_rdf_patch(unsupported.encode(), canonicalizer)


def test_cli_values_take_iris_literals_and_plain_text() -> None:
    assert meta.from_pair(f"{DCT}source", "<https://erp.example/o/7>") == (f"{DCT}source", "<https://erp.example/o/7>")
    assert meta.from_pair("http://x/q", f'"5"^^<{XSD}integer>') == ("http://x/q", f'"5"^^<{XSD}integer>')
    assert meta.from_pair("http://x/n", "Rampe 2") == ("http://x/n", '"Rampe 2"')
    with pytest.raises(PatchFormatError):
        meta.from_pair("http://x/n", "<not an iri>")
