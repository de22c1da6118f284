"""The test vectors of docs/patch-format.md, rebuilt from their inputs.

`python -m tests.vectors.build` prints them as Markdown; tests/rdf/test_patch_format.py checks
that the document holds exactly what this rebuilds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.rdf.syntax import read_file
from lucid_hub.signing import load_key, sign_patch

HERE = Path(__file__).parent
GRAPH = "http://example.org/graph/kpi"
KEY_FILE = HERE / "rfc8037-ed25519.jwk"

# (name, what it shows, old file or None for empty, new file, author, message, created):
# vectors 1-3 are format 1, vectors 4-7 format 2 (a chain of their own), vector-8 format 3 (on that chain).
STEPS = [
    ("vector-1", "first patch, ground triples only", None, "v1.ttl", "alice@example.org",
     "Q3 figures", datetime(2026, 1, 15, 9, 30, tzinfo=UTC)),
    ("vector-2", "blank-node MSGs added (literals kept as written: \"01\", escapes)", "v1.ttl", "v2.ttl",
     "bob@example.org", "order 7 lines", datetime(2026, 1, 16, 10, 0, tzinfo=UTC)),
    ("vector-3", "a blank-node MSG removed (the other kept although relabelled), ground changes",
     "v2.ttl", "v3.ttl", "alice@example.org", "ship order 7\nfix lead time",
     datetime(2026, 1, 17, 11, 15, 30, 250000, tzinfo=UTC)),
]
STEPS_2 = [
    ("vector-4", "format 2: first patch, ground triples only (the format header)", None, "v1.ttl",
     "alice@example.org", "Q3 figures", datetime(2026, 1, 15, 9, 30, tzinfo=UTC)),
    ("vector-5", "format 2: blank-node MSGs added, labelled by MSG hash and occurrence", "v1.ttl", "v2.ttl",
     "bob@example.org", "order 7 lines", datetime(2026, 1, 16, 10, 0, tzinfo=UTC)),
    ("vector-6", "format 2: a blank-node MSG removed under the label it was added with", "v2.ttl", "v3.ttl",
     "alice@example.org", "ship order 7\nfix lead time", datetime(2026, 1, 17, 11, 15, 30, 250000, tzinfo=UTC)),
    ("vector-7", "format 2: two more copies of an MSG the graph holds: occurrences 1 and 2", "v3.ttl", "v4.ttl",
     "bob@example.org", "order 7: three of p2", datetime(2026, 1, 18, 8, 0, tzinfo=UTC)),
    ("vector-8", "format 3: the publisher's metadata, signed with the change", "v4.ttl", "v5.ttl",
     "erp@example.org", "order 7 delivered", datetime(2026, 1, 19, 14, 5, tzinfo=UTC)),
]
# Metadata a vector's publisher attached (it makes the patch format 3).
METADATA = {"vector-8": (
    ("http://purl.org/dc/terms/source", "<https://erp.example.org/deliveries/D-7>"),
    ("http://www.w3.org/ns/prov#generatedAtTime",
     '"2026-01-19T14:04:58Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'),
    ("https://example.org/ns#carrier", '"Spedition Müller \\"Nord\\""@de'),
)}


def build(canonicalizer: Canonicalizer) -> list[tuple[str, str, Patch]]:
    """The signed vector patches: the format 1 chain, then the format 2 chain (whose
    occurrences come from a replica of the graph that follows it)."""
    key = load_key(KEY_FILE)
    out: list[tuple[str, str, Patch]] = []
    for steps, fmt in ((STEPS, 1), (STEPS_2, 2)):
        prev = None
        replica = GraphReplica([], canonicalizer)
        for name, what, old, new, author, message, created in steps:
            old_quads = list(read_file(HERE / old)) if old else []
            change = diff_graph(old_quads, read_file(HERE / new), GRAPH, canonicalizer)
            unsigned = change.to_patch(prev, author=author, message=message, created=created,
                                       held=replica.held if fmt == 2 else None, metadata=METADATA.get(name, ()))
            patch = sign_patch(unsigned, key)
            replica.apply(patch)
            out.append((name, what, patch))
            prev = patch.id
    return out


def markdown(canonicalizer: Canonicalizer) -> str:
    parts = []
    for name, what, patch in build(canonicalizer):
        hashes = "\n".join(f"{op} sha256:{m.hash}" for op, m in patch.rows())
        parts.append(
            f"### {name}: {what}\n\nid: `{patch.id}`\n\nMSG hashes (row order):\n\n```text\n{hashes}\n```\n\n"
            f"```rdf-patch {name}\n{write_rdf_patch(patch).decode()}```\n"
        )
    return "\n".join(parts)


if __name__ == "__main__":
    with Canonicalizer() as c:
        print(markdown(c))
