"""Publisher metadata on a patch (format 3): statements about the patch beyond its fixed
headers, e.g. the order or ticket a change answers, the source system, a partner tier.

LUCID's prototype left such "meta-information" out of the hash; here it is part of the
canonical bytes, so it is hashed and signed with the change (docs/patch-format.md §2.2).

An entry is (predicate IRI, object) with the object an IRI or a literal in canonical
N-Triples form. On the wire each entry is one header line `H meta "<P> OBJECT" .` (a string
literal holding the pair, so RDF Patch readers that take one term per header still read
the patch); entries are sorted and distinct. Blank nodes are refused: they could not be
labelled canonically without a second canonicalisation, and a patch's own statements are
the place for structured content.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyoxigraph as ox

from lucid_hub.errors import PatchFormatError

Entry = tuple[str, str]  # (predicate IRI, object term as canonical N-Triples)
Metadata = tuple[Entry, ...]

MAX_ENTRIES = 32
MAX_BYTES = 16 * 1024  # all entries' text together
HEADER = "X-Lucid-Metadata"

_ECCREV = "https://vocab.eccenca.com/revision/"
# What the fixed headers and the revision form already say about a commit: not metadata.
RESERVED = frozenset({
    "http://www.w3.org/1999/02/22-rdf-syntax-ns#type", "http://www.w3.org/ns/prov#atTime",
    *(_ECCREV + local for local in ("sha256", "previousCommit", "commitAuthor", "commitMessage",
                                    "hasRevision", "hasRevisionGraph", "deltaDelete", "deltaInsert")),
})
RESERVED_NAMESPACE = "urn:lucid-hub:ns:"


def entry(predicate: str, obj: ox.NamedNode | ox.Literal | object) -> Entry:
    """One checked entry: `predicate` an absolute IRI outside the fixed headers, `obj` an IRI or literal."""
    try:
        ox.NamedNode(predicate)
    except ValueError:
        raise PatchFormatError(f"metadata predicate {predicate!r} is not an absolute IRI") from None
    if predicate in RESERVED or predicate.startswith(RESERVED_NAMESPACE):
        raise PatchFormatError(f"<{predicate}> is a fixed header of every patch, not metadata")
    if type(obj) not in (ox.NamedNode, ox.Literal):
        raise PatchFormatError(f"metadata <{predicate}> must have an IRI or a literal as its value")
    return predicate, str(obj)


def normalise(entries: Iterable[Entry]) -> Metadata:
    """Entries sorted and distinct, within the limits (PatchFormatError otherwise)."""
    out = tuple(sorted(set(entries)))
    if len(out) > MAX_ENTRIES:
        raise PatchFormatError(f"a patch carries at most {MAX_ENTRIES} metadata entries, not {len(out)}")
    size = sum(len(p) + len(o) for p, o in out)
    if size > MAX_BYTES:
        raise PatchFormatError(f"a patch's metadata holds at most {MAX_BYTES} bytes, not {size}")
    return out


def check(metadata: Metadata) -> None:
    """PatchFormatError unless `metadata` is already normalised and every entry is well formed."""
    if metadata != normalise(metadata):
        raise PatchFormatError("a patch's metadata entries are sorted and distinct")
    for predicate, obj in metadata:
        if entry(predicate, _term(obj)) != (predicate, obj):
            raise PatchFormatError(f"metadata value {obj!r} is not in canonical N-Triples form")


def _term(text: str) -> ox.NamedNode | ox.Literal:
    try:
        (triple,) = ox.parse(f"<urn:x:s> <urn:x:p> {text} .", format=ox.RdfFormat.N_TRIPLES)
    except (SyntaxError, ValueError):
        raise PatchFormatError(f"metadata value {text[:80]!r} is not an N-Triples IRI or literal") from None
    term = triple.object
    if not isinstance(term, (ox.NamedNode, ox.Literal)):
        raise PatchFormatError("a metadata value is an IRI or a literal")
    return term


def header_text(item: Entry) -> str:
    """The text an `H meta` line holds (as a string literal): `<P> OBJECT`."""
    return f"<{item[0]}> {item[1]}"


def from_header_text(text: str) -> Entry:
    """The entry an `H meta` line's literal holds."""
    predicate, sep, obj = text.partition(" ")
    if not (sep and predicate.startswith("<") and predicate.endswith(">")):
        raise PatchFormatError(f"metadata {text[:80]!r} is not '<PREDICATE> VALUE'")
    return entry(predicate[1:-1], _term(obj))


def terms(item: Entry) -> tuple[ox.NamedNode, ox.NamedNode | ox.Literal]:
    """The entry as pyoxigraph terms (predicate, object)."""
    return ox.NamedNode(item[0]), _term(item[1])


def from_pair(predicate: str, value: str) -> Entry:
    """An entry as a person types it (CLI): VALUE is `<IRI>`, an N-Triples literal
    (`"5"^^<...#integer>`, `"Lager"@de`), or else plain text, taken as a string literal."""
    obj = _term(value) if value.startswith(("<", '"')) else ox.Literal(value)
    return entry(predicate, obj)


def from_json(text: str) -> Metadata:
    """The `X-Lucid-Metadata` header: a JSON object from predicate IRI to a value or a list
    of values, each a string (a string literal) or a JSON-LD value object: `{"@id": IRI}`,
    `{"@value": text, "@type": IRI}` or `{"@value": text, "@language": tag}`."""
    if len(text) > MAX_BYTES * 2:
        raise PatchFormatError(f"the {HEADER} header is longer than {MAX_BYTES * 2} characters")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PatchFormatError(f"the {HEADER} header is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise PatchFormatError(f"the {HEADER} header is a JSON object from predicate IRI to values")
    out: list[Entry] = []
    for predicate, values in document.items():
        for value in values if isinstance(values, list) else [values]:
            out.append(entry(predicate, _json_term(predicate, value)))
    return normalise(out)


def _json_term(predicate: str, value: object) -> ox.NamedNode | ox.Literal:
    if isinstance(value, str):
        return ox.Literal(value)
    if isinstance(value, bool) or not isinstance(value, dict) or not value.keys() <= {"@id", "@value", "@type",
                                                                                      "@language"}:
        raise PatchFormatError(f"metadata <{predicate}>: a value is a string, {{\"@id\": IRI}} or "
                               "{\"@value\": ..., \"@type\"|\"@language\": ...}")
    try:
        if "@id" in value:
            if len(value) != 1 or not isinstance(value["@id"], str):
                raise ValueError("an @id object holds one IRI")
            return ox.NamedNode(value["@id"])
        text, kind, language = value.get("@value"), value.get("@type"), value.get("@language")
        if not isinstance(text, str) or (kind is not None and language is not None):
            raise ValueError("@value is a string, with @type or @language (not both)")
        if kind is not None:
            return ox.Literal(text, datatype=ox.NamedNode(str(kind)))
        return ox.Literal(text, language=str(language)) if language is not None else ox.Literal(text)
    except (ValueError, TypeError) as exc:
        raise PatchFormatError(f"metadata <{predicate}>: {exc}") from None


def to_json(metadata: Metadata) -> dict[str, list[object]]:
    """The entries in the `X-Lucid-Metadata` JSON form (lists of values per predicate)."""
    out: dict[str, list[object]] = {}
    for item in metadata:
        _, obj = terms(item)
        if type(obj) is ox.NamedNode:
            value: object = {"@id": obj.value}
        elif obj.language:
            value = {"@value": obj.value, "@language": obj.language}
        elif obj.datatype.value != "http://www.w3.org/2001/XMLSchema#string":
            value = {"@value": obj.value, "@type": obj.datatype.value}
        else:
            value = obj.value
        out.setdefault(item[0], []).append(value)
    return out
