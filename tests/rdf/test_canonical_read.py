"""The one-pass reader of format 2 patches (`read_canonical`, the mirrors' hot path) against
the general reader: on every patch the hub writes it returns exactly what the general reader
returns; on bytes not in canonical form it declines (None), never returning a patch whose
canonical bytes differ from what it read."""

from __future__ import annotations

import dataclasses

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import WireParts, _read_rdf_patch, read_canonical, split_wire, write_rdf_patch
from lucid_hub.store import GraphStore

G = "http://example.org/graphs/g"
LINES = [
    '<http://example.org/s{n}> <http://example.org/p> "v{n}" .',
    '<http://example.org/s> <http://example.org/p> "tab\\there \\"q\\" \\u0001 {n}"@en .',
    '<http://example.org/s> <http://example.org/p> "{n}"^^<http://www.w3.org/2001/XMLSchema#integer> .',
    '<http://example.org/s> <http://example.org/p> _:b{n} . _:b{n} <http://example.org/q> "1" .',
    '<http://example.org/s> <http://example.org/p> _:b{n} . _:b{n} <http://example.org/q> "_:not a node" .',
    '_:c{n} <http://example.org/p> _:d{n} . _:d{n} <http://example.org/p> _:c{n} .',
    '<http://example.org/s> <http://example.org/list> _:l{n} . _:l{n} <http://www.w3.org/1999/02/22-rdf-syntax-ns#first> '
    '"x" . _:l{n} <http://www.w3.org/1999/02/22-rdf-syntax-ns#rest> <http://www.w3.org/1999/02/22-rdf-syntax-ns#nil> .',
]
versions = st.lists(st.lists(st.tuples(st.sampled_from(LINES), st.integers(0, 2)), max_size=6), min_size=1, max_size=4)


def patches(canonicalizer: Canonicalizer, texts: list[str]) -> list[Patch]:
    store = GraphStore()
    previous: list[ox.Quad] = []
    head = None
    out = []
    for text in texts:
        current = list(ox.parse(text, format=ox.RdfFormat.TURTLE))
        change = diff_graph(previous, current, G, canonicalizer)
        if change.is_empty:
            continue
        patch = change.to_patch(head, held=lambda digest: store.held(G, digest).keys(), author="a \"b\"",
                                message="line\nbreak")
        store.apply(patch)
        head, previous = patch.id, current
        out.append(patch)
    return out


def fresh(patch: Patch) -> Patch:
    """The same patch without the cached bytes and id the one-pass reader primed."""
    return dataclasses.replace(patch)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(versions)
def test_it_reads_every_patch_the_hub_writes_as_the_general_reader_does(
        canonicalizer: Canonicalizer, chosen: list[list[tuple[str, int]]]) -> None:
    texts = ["\n".join(line.format(n=f"{i}x{n}") for i, (line, n) in enumerate(v)) for v in chosen]
    for patch in patches(canonicalizer, texts):
        raw = write_rdf_patch(patch)
        parts = split_wire(raw)
        fast = read_canonical(parts, canonicalizer)
        assert fast is not None
        general = _read_rdf_patch(raw, canonicalizer)
        assert fast == general and fast.id == general.id == patch.id
        assert (fast.removed_occurrences, fast.added_occurrences) == (general.removed_occurrences,
                                                                      general.added_occurrences)
        assert fresh(fast).canonical_bytes == parts.preimage and fresh(fast).id == patch.id


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_bytes_not_in_canonical_form_are_declined(canonicalizer: Canonicalizer, data: st.DataObject) -> None:
    texts = [LINES[3].format(n=1) + "\n" + LINES[0].format(n=2) + "\n" + LINES[5].format(n=3),
             LINES[0].format(n=2) + "\n" + LINES[6].format(n=4) + "\n" + LINES[3].format(n=5) + "\n"
             + LINES[3].format(n=6)]
    patch = patches(canonicalizer, texts)[-1]
    preimage = write_rdf_patch(patch).split(b"\n", 1)[1]
    lines = preimage.decode().split("\n")
    how = data.draw(st.sampled_from(["swap", "duplicate", "drop", "edit", "space"]))
    i = data.draw(st.integers(0, len(lines) - 2))
    j = data.draw(st.integers(0, len(lines) - 2))
    if how == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif how == "duplicate":
        lines.insert(i, lines[i])
    elif how == "drop":
        del lines[i]
    elif how == "edit":
        at = data.draw(st.integers(0, max(0, len(lines[i]) - 1)))
        lines[i] = lines[i][:at] + data.draw(st.sampled_from(["0", "a", "_", " ", "\\u0041", '"'])) + lines[i][at + 1:]
    else:
        lines[i] = lines[i] + " "
    mutated = "\n".join(lines).encode()
    found = read_canonical(WireParts("urn:sha256:" + "0" * 64, None, mutated), canonicalizer)
    if found is not None:  # only where the mutation left the canonical bytes of a patch
        assert fresh(found).canonical_bytes == mutated


def test_other_formats_are_left_to_the_general_reader(canonicalizer: Canonicalizer) -> None:
    change = diff_graph([], list(ox.parse(LINES[3].format(n=1), format=ox.RdfFormat.TURTLE)), G, canonicalizer)
    first = change.to_patch(None)  # format 1
    assert first.format == 1
    assert read_canonical(split_wire(write_rdf_patch(first)), canonicalizer) is None
    assert read_canonical(WireParts("urn:sha256:" + "0" * 64, None, b"\xff\xfe"), canonicalizer) is None


@pytest.mark.parametrize("header", ['H author "x"@en .', 'H created "2026-01-01T00:00:00Z"^^'
                                    '<http://www.w3.org/2001/XMLSchema#dateTime> .', "H extra <urn:x> ."])
def test_headers_not_as_the_canonical_form_writes_them_are_declined(canonicalizer: Canonicalizer,
                                                                    header: str) -> None:
    (patch,) = patches(canonicalizer, [LINES[0].format(n=1)])
    lines = patch.canonical_bytes.decode().split("\n")
    name = header.split(" ")[1]
    at = next((k for k, line in enumerate(lines) if line.startswith(f"H {name} ")), 3)
    if name == "extra":
        lines.insert(at, header)
    else:
        lines[at] = header
    assert read_canonical(WireParts(patch.id, None, "\n".join(lines).encode()), canonicalizer) is None
