"""Access conditions in the eccenca authorization vocabulary: read from and written to RDF
(Turtle) and JSON, validated on the way in.

A condition applies to a party when all its required attributes hold (groups, account,
endpoint id, and any claim of its token: `requiresAttribute`); it then grants read or write
(write implies read) on graphs named one by one, on graph IRI patterns (a constant prefix
with a trailing `*`), or on all graphs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import pyoxigraph as ox

from lucid_hub.errors import PolicyError
from lucid_hub.rdf.syntax import term_limit_error

ECCAUTH = "https://vocab.eccenca.com/auth/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
RDFS_COMMENT = "http://www.w3.org/2000/01/rdf-schema#comment"
ACCESS_CONDITION = ECCAUTH + "AccessCondition"
# The all-graphs IRI: eccenca's own, and the one of Corporate Memory's older releases.
ALL_GRAPHS = ECCAUTH + "AllGraphs"
ALL_GRAPHS_ALIASES = frozenset({ALL_GRAPHS, "urn:elds-backend-all-graphs"})
# The group every party is in, including requests without credentials: a condition that
# requires it makes graphs public (open data). It may grant read only.
EVERYONE = "urn:lucid-hub:everyone"

# JSON field -> property IRI. requiresAttribute's sub-properties: all must hold.
PROPERTIES = {
    "requiresGroup": ECCAUTH + "requiresGroup",
    "requiresAccount": ECCAUTH + "requiresAccount",
    "requiresEndpointId": ECCAUTH + "requiresEndpointId",
    "requiresAttribute": ECCAUTH + "requiresAttribute",  # "claim=value"; sub-properties: below
    "readGraph": ECCAUTH + "readGraph",
    "writeGraph": ECCAUTH + "writeGraph",
    "grantReadGraphPattern": ECCAUTH + "grantReadGraphPattern",
    "grantWriteGraphPattern": ECCAUTH + "grantWriteGraphPattern",
}
REQUIREMENTS = ("requiresGroup", "requiresAccount", "requiresEndpointId", "requiresAttribute")
# Any other attribute, as LUCID describes it: a property declared a sub-property of
# eccauth:requiresAttribute, naming the token claim it tests (lh:claim; by default its local
# name after "requires": ex:requiresTier tests the claim "tier").
REQUIRES_ATTRIBUTE = ECCAUTH + "requiresAttribute"
RDFS_SUBPROPERTY = "http://www.w3.org/2000/01/rdf-schema#subPropertyOf"
LH_CLAIM = "https://w3id.org/lucid-hub#claim"
_CLAIM = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
GRAPH_FIELDS = ("readGraph", "writeGraph")
PATTERN_FIELDS = ("grantReadGraphPattern", "grantWriteGraphPattern")
_BY_IRI = {iri: name for name, iri in PROPERTIES.items()}
_ALLOWED = {RDF_TYPE, RDFS_LABEL, RDFS_COMMENT, *PROPERTIES.values()}
MAX_VALUES = 10_000


def _iri(value: str, what: str) -> str:
    try:
        ox.NamedNode(value)
    except (ValueError, TypeError):
        raise PolicyError(f"{what} {value!r} is not an absolute IRI") from None
    return value


def _pattern(value: str, what: str) -> str:
    if not value.endswith("*") or "*" in value[:-1]:
        raise PolicyError(f"{what} {value!r} must be a constant prefix with one trailing '*'")
    if len(value) < 2:
        raise PolicyError(f"{what} {value!r} must have a prefix before the '*' (use the all-graphs IRI instead)")
    return value


@dataclass(frozen=True)
class Condition:
    iri: str
    label: str = ""
    requiresGroup: tuple[str, ...] = ()  # field names are the vocabulary's
    requiresAccount: tuple[str, ...] = ()
    requiresEndpointId: tuple[str, ...] = ()
    requiresAttribute: tuple[str, ...] = ()  # "claim=value": the token's claim holds the value
    readGraph: tuple[str, ...] = ()
    writeGraph: tuple[str, ...] = ()
    grantReadGraphPattern: tuple[str, ...] = ()
    grantWriteGraphPattern: tuple[str, ...] = ()
    comment: str = field(default="", compare=False)

    def validate(self) -> Condition:
        """The condition itself when valid; PolicyError says what is wrong."""
        _iri(self.iri, "condition")
        if not any(getattr(self, f) for f in (*GRAPH_FIELDS, *PATTERN_FIELDS)):
            raise PolicyError(f"condition <{self.iri}> grants nothing: give readGraph, writeGraph or a pattern")
        for name in GRAPH_FIELDS:
            for value in getattr(self, name):
                _iri(value, name)
        for name in PATTERN_FIELDS:
            for value in getattr(self, name):
                _pattern(value, name)
        for name in REQUIREMENTS:
            for value in getattr(self, name):
                if not value or len(value) > 2048:
                    raise PolicyError(f"{name} values must be 1-2048 characters")
        for value in self.requiresAttribute:
            claim, sep, wanted = value.partition("=")
            if not sep or not _CLAIM.fullmatch(claim) or not wanted or len(wanted) > 256:
                raise PolicyError(f"requiresAttribute {value[:80]!r} must be claim=value (a claim name of letters, "
                                  "digits, '_', '.', ':', '-'; a value of 1-256 characters)")
        if EVERYONE in self.requiresGroup and (self.writeGraph or self.grantWriteGraphPattern):
            raise PolicyError(f"condition <{self.iri}> is for everyone ({EVERYONE}): it may grant read only, "
                              "never write")
        if sum(len(getattr(self, f)) for f in PROPERTIES) > MAX_VALUES:
            raise PolicyError(f"condition <{self.iri}> has more than {MAX_VALUES} values")
        return self

    @property
    def requirements(self) -> dict[str, tuple[str, ...]]:
        return {name: getattr(self, name) for name in REQUIREMENTS if getattr(self, name)}

    # --- JSON ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"iri": self.iri}
        if self.label:
            out["label"] = self.label
        if self.comment:
            out["comment"] = self.comment
        for name in PROPERTIES:
            out[name] = list(getattr(self, name))
        return out

    @classmethod
    def from_json(cls, data: Any, iri: str | None = None) -> Condition:
        if not isinstance(data, dict):
            raise PolicyError("a condition is a JSON object")
        known = {"iri", "label", "comment", *PROPERTIES}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PolicyError(f"unknown property {unknown[0]!r}; known: {', '.join(sorted(known))}")
        values: dict[str, Any] = {}
        for name in PROPERTIES:
            raw = data.get(name, [])
            if isinstance(raw, str):
                raw = [raw]
            if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
                raise PolicyError(f"{name} must be a list of strings")
            values[name] = tuple(dict.fromkeys(raw))
        for text_field in ("label", "comment"):
            if not isinstance(data.get(text_field, ""), str):
                raise PolicyError(f"{text_field} must be a string")
        condition_iri = iri or data.get("iri")
        if not isinstance(condition_iri, str) or not condition_iri:
            raise PolicyError("a condition needs an iri")
        if iri and data.get("iri") not in (None, iri):
            raise PolicyError(f"the body's iri {data.get('iri')!r} is not the condition's <{iri}>")
        return cls(iri=condition_iri, label=data.get("label", ""), comment=data.get("comment", ""),
                   **values).validate()

    # --- RDF -------------------------------------------------------------------------
    def statements(self) -> list[str]:
        """The condition as canonical N-Triples statements (no trailing ' .')."""
        s = ox.NamedNode(self.iri)
        out = [f"{s} <{RDF_TYPE}> <{ACCESS_CONDITION}>"]
        if self.label:
            out.append(f"{s} <{RDFS_LABEL}> {ox.Literal(self.label)}")
        if self.comment:
            out.append(f"{s} <{RDFS_COMMENT}> {ox.Literal(self.comment)}")
        for name, iri in PROPERTIES.items():
            for value in getattr(self, name):
                term = ox.NamedNode(value) if name in GRAPH_FIELDS else ox.Literal(value)
                out.append(f"{s} <{iri}> {term}")
        return out


def _attribute_claims(quads: list[ox.Quad], source: str) -> dict[str, str]:
    """The sub-properties of eccauth:requiresAttribute the document declares, and the claim
    each tests (its lh:claim, else its local name after "requires", first letter lowered)."""
    declared = {q.subject.value for q in quads if isinstance(q.subject, ox.NamedNode)
                and q.predicate.value == RDFS_SUBPROPERTY and q.object == ox.NamedNode(REQUIRES_ATTRIBUTE)}
    claims: dict[str, str] = {}
    for prop in declared:
        named = [q.object.value for q in quads if q.subject == ox.NamedNode(prop) and q.predicate.value == LH_CLAIM
                 and isinstance(q.object, ox.Literal)]
        local = re.split(r"[#/]", prop)[-1]
        local = local[len("requires"):] if local.startswith("requires") and len(local) > 8 else local
        claim = named[0] if named else local[:1].lower() + local[1:]
        if not _CLAIM.fullmatch(claim):
            raise PolicyError(f"{source}: <{prop}> tests the claim {claim!r}, which is not a claim name; give it "
                              "lh:claim")
        claims[prop] = claim
    return claims


def conditions_from_quads(quads: Iterable[ox.Quad], source: str) -> list[Condition]:
    """The access conditions in RDF; anything that is not one is an error, not ignored. The
    document may declare attribute properties (sub-properties of eccauth:requiresAttribute);
    a condition's value of one is kept as requiresAttribute "claim=value"."""
    quads = list(quads)
    attributes = _attribute_claims(quads, source)
    subjects: dict[str, dict[str, list[str]]] = {}
    typed: set[str] = set()
    for q in quads:
        if isinstance(q.subject, ox.NamedNode) and q.subject.value in attributes:
            if q.predicate.value not in (RDFS_SUBPROPERTY, LH_CLAIM, RDFS_LABEL, RDFS_COMMENT):
                raise PolicyError(f"{source}: the attribute property <{q.subject.value}> takes rdfs:subPropertyOf, "
                                  f"lh:claim, rdfs:label and rdfs:comment only, not <{q.predicate.value}>")
            continue
        if q.predicate.value in attributes and isinstance(q.object, ox.Literal | ox.NamedNode):
            q = ox.Quad(q.subject, ox.NamedNode(REQUIRES_ATTRIBUTE),
                        ox.Literal(f"{attributes[q.predicate.value]}={q.object.value}"), q.graph_name)
        if not isinstance(q.subject, ox.NamedNode):
            raise PolicyError(f"{source}: access conditions are named by IRIs, not blank nodes ({q.subject})")
        p = q.predicate.value
        if p not in _ALLOWED:
            raise PolicyError(f"{source}: unknown property <{p}> on <{q.subject.value}>")
        if p == RDF_TYPE:
            if not isinstance(q.object, ox.NamedNode) or q.object.value != ACCESS_CONDITION:
                raise PolicyError(f"{source}: <{q.subject.value}> has type {q.object}; only eccauth:AccessCondition")
            typed.add(q.subject.value)
            subjects.setdefault(q.subject.value, {})
            continue
        if not isinstance(q.object, ox.NamedNode | ox.Literal):
            raise PolicyError(f"{source}: <{q.subject.value}> <{p}> needs an IRI or a literal as value")
        value = q.object.value
        subjects.setdefault(q.subject.value, {}).setdefault(p, []).append(value)
    out = []
    for iri, props in sorted(subjects.items()):
        if iri not in typed:
            raise PolicyError(f"{source}: <{iri}> is not typed eccauth:AccessCondition")
        values: dict[str, Any] = {_BY_IRI[p]: tuple(sorted(set(v))) for p, v in props.items() if p in _BY_IRI}
        label = props.get(RDFS_LABEL, [""])[0]
        comment = props.get(RDFS_COMMENT, [""])[0]
        out.append(Condition(iri=iri, label=label, comment=comment, **values).validate())
    return out


def parse_turtle(data: bytes | str, source: str, base_iri: str | None = None) -> list[Condition]:
    try:
        quads = list(ox.parse(data, format=ox.RdfFormat.TURTLE, base_iri=base_iri))
    except SyntaxError as exc:
        raise PolicyError(f"{source}: not valid Turtle: {' '.join(str(exc).split())}") from None
    except MemoryError as exc:
        raise term_limit_error(exc, source) from None
    return conditions_from_quads(quads, source)


def to_turtle(conditions: Iterable[Condition]) -> str:
    lines = [f"@prefix eccauth: <{ECCAUTH}> .", f"@prefix rdfs: <{RDFS_LABEL[:-5]}> .", ""]
    for c in conditions:
        body = ["a eccauth:AccessCondition"]
        if c.label:
            body.append(f"rdfs:label {ox.Literal(c.label)}")
        if c.comment:
            body.append(f"rdfs:comment {ox.Literal(c.comment)}")
        for name in PROPERTIES:
            values = getattr(c, name)
            if values:
                terms = [str(ox.NamedNode(v) if name in GRAPH_FIELDS else ox.Literal(v)) for v in values]
                body.append(f"eccauth:{name} " + ", ".join(terms))
        lines.append(f"<{c.iri}>\n    " + " ;\n    ".join(body) + " .\n")
    return "\n".join(lines)


assert {f.name for f in fields(Condition)} >= set(PROPERTIES)
