"""`lucid-hub demo`: the whole patch chain on embedded defaults, narrated step by step.

A publisher versions a graph (blank nodes included), signs hash-chained patches; a partner
verifies each one from raw bytes and applies it to its replica; tampering and replay are
refused. Nothing to install, no network.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pyoxigraph as ox

from lucid_hub.diff.local import diff_graph
from lucid_hub.errors import ChainError, PatchIntegrityError
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.rdf.syntax import rdf_format, read_quads
from lucid_hub.signing import KeyRing, TrustedKeys, sign_patch, verify_patch_bytes

GRAPH = "https://acme.example/graphs/kpi"
_PREFIXES = """@prefix ex: <https://acme.example/kpi/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""
VERSIONS = [
    ("initial KPIs", """
ex:leadTime ex:value "12.50"^^xsd:decimal ; ex:unit "days" .
ex:otif ex:value "0.93"^^xsd:decimal ;
    ex:measuredAt [ ex:site ex:plantA ; ex:week "2026-W46" ] .
"""),
    ("week 47 figures", """
ex:leadTime ex:value "11.75"^^xsd:decimal ; ex:unit "days" .
ex:otif ex:value "0.95"^^xsd:decimal ;
    ex:measuredAt [ ex:site ex:plantA ; ex:week "2026-W47" ] .
ex:scrapRate ex:value "0.021"^^xsd:decimal ; ex:comment "first report\\nplant A only" .
"""),
    ("add plant B", """
ex:leadTime ex:value "11.75"^^xsd:decimal ; ex:unit "days" .
ex:otif ex:value "0.95"^^xsd:decimal ;
    ex:measuredAt [ ex:site ex:plantA ; ex:week "2026-W47" ] , [ ex:site ex:plantB ; ex:week "2026-W47" ] .
ex:scrapRate ex:value "0.021"^^xsd:decimal ; ex:comment "first report\\nplant A only" .
"""),
]


def run(workdir: Path | None = None, echo: Callable[[str], None] = print,
        canonicalizer: Canonicalizer | None = None) -> None:
    """Run the demonstration; raises if any step does not behave as promised."""
    with tempfile.TemporaryDirectory(prefix="lucid-demo-") as tmp:
        base = workdir or Path(tmp)
        if canonicalizer is not None:
            _run(base, echo, canonicalizer)
        else:
            with Canonicalizer() as canon:
                _run(base, echo, canon)
        where = str(base) if workdir else "a temporary directory (use --dir to keep them)"
        echo(f"demo complete: the replica equals the publisher's graph; keys and patches were in {where}")


def _graph(turtle: str) -> list[ox.Quad]:
    return list(read_quads((_PREFIXES + turtle).encode(), rdf_format("ttl"), name="demo"))


def _run(base: Path, echo: Callable[[str], None], canon: Canonicalizer) -> None:
    ring = KeyRing(base / "publisher-keys")
    key = ring.ensure()
    echo(f"publisher: signing key kid={key.kid} (public keys in {ring.directory / 'jwks.json'})")
    trusted = TrustedKeys(ring.jwks())
    replica = GraphReplica([], canon)
    echo(f"partner:   empty replica of <{GRAPH}>, trusting the publisher's JWKS")

    previous: list[ox.Quad] = []
    prev_id: str | None = None
    wire: list[bytes] = []
    for number, (message, turtle) in enumerate(VERSIONS, start=1):
        current = _graph(turtle)
        change = diff_graph(previous, current, GRAPH, canon)
        patch = sign_patch(change.to_patch(prev_id, author="publisher@acme.example", message=message), key)
        raw = write_rdf_patch(patch)
        wire.append(raw)
        (base / f"patch-{number}.rdfp").write_bytes(raw)
        echo(f"publisher: version {number} '{message}': -{len(patch.removed)} +{len(patch.added)} MSGs "
             f"-> {patch.id[:27]}… ({len(raw)} bytes, signed)")
        received = verify_patch_bytes(raw, trusted, canon)
        replica.apply(received)
        echo(f"partner:   verified id and signature from raw bytes, applied; replica at {patch.id[:27]}…")
        _check_same(replica, current, canon)
        previous, prev_id = current, patch.id

    relabelled = diff_graph(previous, _graph(VERSIONS[-1][1]), GRAPH, canon)
    echo(f"publisher: same data re-read (fresh blank nodes) -> empty change: {relabelled.is_empty}")
    if not relabelled.is_empty:
        raise AssertionError("re-parsed data gave a non-empty change")

    tampered = wire[-1].replace(b"plantB", b"plantX")
    try:
        verify_patch_bytes(tampered, trusted, canon)
        raise AssertionError("a tampered patch was accepted")
    except PatchIntegrityError as exc:
        echo(f"partner:   tampered patch refused: {exc}")
    try:
        replica.apply(verify_patch_bytes(wire[1], trusted, canon))
        raise AssertionError("a replayed patch was applied")
    except ChainError as exc:
        echo(f"partner:   replayed patch refused: {exc}")


def _check_same(replica: GraphReplica, expected: list[ox.Quad], canon: Canonicalizer) -> None:
    ours = canon.canonicalize(list(replica.statements()))
    theirs = canon.canonicalize([str(q) for q in expected])
    if ours != theirs:
        raise AssertionError("replica differs from the publisher's graph")

