"""The test vectors of docs/patch-format.md, rebuilt from their inputs.

`python -m tests.vectors.build` prints them as Markdown; tests/test_patch_format.py checks
that the document holds exactly what this rebuilds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from lucid_hub.diff.local import diff_graph
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.rdf.syntax import read_file
from lucid_hub.signing import load_key, sign_patch

HERE = Path(__file__).parent
GRAPH = "http://example.org/graph/kpi"
KEY_FILE = HERE / "rfc8037-ed25519.jwk"

# (name, what it shows, old file or None for empty, new file, author, message, created)
STEPS = [
    ("vector-1", "first patch, ground triples only", None, "v1.ttl", "alice@example.org",
     "Q3 figures", datetime(2026, 1, 15, 9, 30, tzinfo=UTC)),
    ("vector-2", "blank-node MSGs added (literals kept as written: \"01\", escapes)", "v1.ttl", "v2.ttl",
     "bob@example.org", "order 7 lines", datetime(2026, 1, 16, 10, 0, tzinfo=UTC)),
    ("vector-3", "a blank-node MSG removed (the other kept although relabelled), ground changes",
     "v2.ttl", "v3.ttl", "alice@example.org", "ship order 7\nfix lead time",
     datetime(2026, 1, 17, 11, 15, 30, 250000, tzinfo=UTC)),
]


def build(canonicalizer: Canonicalizer) -> list[tuple[str, str, Patch]]:
    """The signed vector patches, each chained to the one before."""
    key = load_key(KEY_FILE)
    out: list[tuple[str, str, Patch]] = []
    prev = None
    for name, what, old, new, author, message, created in STEPS:
        old_quads = list(read_file(HERE / old)) if old else []
        change = diff_graph(old_quads, read_file(HERE / new), GRAPH, canonicalizer)
        patch = sign_patch(change.to_patch(prev, author=author, message=message, created=created), key)
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
