"""Canonical N-Quads statements as text: the cheap representation MSG work runs on.

A statement is the canonical N-Quads form of one quad without the terminating ` .`
(`str(quad)` in pyoxigraph). Working on these strings instead of pyoxigraph term objects
(each attribute access allocates one) is what makes diffing a million triples fast.
"""

from __future__ import annotations

import re

# Terms in canonical N-Quads: IRI, blank node, or literal with escapes and an optional
# language tag or datatype. Canonical form has single spaces between terms.
_TERM = r'<[^>]*>|_:[^ ]+|"(?:[^"\\]|\\.)*"(?:@[A-Za-z0-9-]+|\^\^<[^>]*>)?'
_STATEMENT = re.compile(rf"({_TERM}) ({_TERM}) ({_TERM})(?: ({_TERM}))?")


def terms(statement: str) -> list[str]:
    """The 3 or 4 terms of a canonical statement (subject, predicate, object[, graph])."""
    match = _STATEMENT.fullmatch(statement)
    if match is None:
        raise ValueError(f"not a canonical N-Quads statement: {statement[:80]!r}")
    found = match.groups()
    return list(found if found[3] is not None else found[:3])


def blank_labels(statement: str) -> list[str]:
    """Blank-node labels (with `_:`) in subject, object and graph position, in that order."""
    return [t for t in terms(statement) if t.startswith("_:")]


def relabel(statement: str, mapping: dict[str, str]) -> str:
    """The statement with blank-node labels replaced as `mapping` says."""
    return " ".join(mapping.get(t, t) if t.startswith("_:") else t for t in terms(statement))


def document(statements: list[str]) -> str:
    """Statements as a sorted canonical N-Quads document (code point order, per RDFC-1.0)."""
    return "".join(sorted(f"{s} .\n" for s in statements))
