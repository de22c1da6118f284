"""A patch shown as a review shows a change: subjects, removed and added side by side."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyoxigraph as ox

from lucid_hub.rdf.msg import Msg
from lucid_hub.web.console.figures import FOLD


@dataclass
class Node:
    """A statement's object as the patch view shows it: a term, or a nested blank node."""

    predicate: str
    text: str = ""
    folded: str = ""  # the whole of a long literal (text is its start)
    children: list[Node] = field(default_factory=list)


@dataclass
class SubjectChange:
    """One subject's removed and added statements."""

    subject: str
    removed: list[Node] = field(default_factory=list)
    added: list[Node] = field(default_factory=list)


def _term(term: Any) -> tuple[str, str]:
    """(shown text, whole text when folded) of an object term."""
    text = str(term)
    if isinstance(term, ox.Literal) and len(term.value) > FOLD:
        return f'"{term.value[:FOLD]}…"', text
    return text, ""


def _nested(quads: list[ox.Quad]) -> list[tuple[str, Node]]:
    """An MSG's statements as (subject, node) trees: statements about blank nodes nest under
    the statement that names them (once: a cycle or a shared node is shown where first met)."""
    about: dict[str, list[ox.Quad]] = defaultdict(list)
    for q in quads:
        about[str(q.subject)].append(q)
    named = {str(q.object) for q in quads if isinstance(q.object, ox.BlankNode)}
    roots = [s for s in about if not s.startswith("_:") or s not in named] or list(about)[:1]
    seen: set[str] = set()

    def node(q: ox.Quad) -> Node:
        obj = q.object
        key = str(obj)
        if isinstance(obj, ox.BlankNode) and key in about and key not in seen:
            seen.add(key)
            return Node(str(q.predicate), "[ ]", children=[node(inner) for inner in about[key]])
        text, whole = _term(obj)
        return Node(str(q.predicate), text, whole)

    out = []
    for subject in roots:
        seen.add(subject)
        out += [("[ ]" if subject.startswith("_:") else subject, node(q)) for q in about[subject]]
    return out


def review(patch: Any) -> list[SubjectChange]:
    """The patch's rows by subject, removed and added side by side, subjects in order."""
    changes: dict[str, SubjectChange] = {}
    for side, msgs in (("removed", patch.removed), ("added", patch.added)):
        for msg in msgs:
            quads = list(ox.parse(msg.nquads, format=ox.RdfFormat.N_QUADS))
            for subject, node in _nested(quads):
                change = changes.setdefault(subject, SubjectChange(subject))
                getattr(change, side).append(node)
    return [changes[s] for s in sorted(changes)]


# The most patches a comparison of two versions reads (each is parsed): farther apart, the
# page asks for nearer versions.
COMPARE_PATCHES = 2_000


@dataclass
class NetChange:
    """What changed between two versions of a graph: the patches between them composed."""

    removed: list[Msg]
    added: list[Msg]
