"""Patches as RDF datasets: TriG and JSON-LD with the eccenca revision vocabulary.

The commit is described in the default graph (`eccrev:Commit`, `eccrev:previousCommit`,
`eccrev:commitAuthor`, `eccrev:commitMessage`, `eccrev:sha256`, `prov:atTime`); removed and
added triples sit in the named graphs `<id#delete>` and `<id#insert>`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyoxigraph as ox

from lucid_hub.errors import PatchFormatError, PatchIntegrityError
from lucid_hub.rdf import metadata as meta
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import graph_msgs, msgs_with_occurrences
from lucid_hub.rdf.patch import (
    ID_PREFIX,
    XSD_DATETIME,
    Patch,
    check_patch_id,
    format_created,
    parse_created,
)
from lucid_hub.rdf.rdfpatch import patch_format
from lucid_hub.rdf.syntax import read_quads, serialize

ECCREV = "https://vocab.eccenca.com/revision/"
PROV = "http://www.w3.org/ns/prov#"
LUCID = "urn:lucid-hub:ns:"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
PREFIXES = {
    "eccrev": ECCREV,
    "prov": PROV,
    "lucid": LUCID,
    "xsd": "http://www.w3.org/2001/XMLSchema#",
}
MEDIA_TYPES = {"trig": "application/trig", "jsonld": "application/ld+json"}
_FORMATS = {"trig": ox.RdfFormat.TRIG, "jsonld": ox.RdfFormat.JSON_LD}


def _n(local: str, ns: str = ECCREV) -> ox.NamedNode:
    return ox.NamedNode(ns + local)


def patch_quads(patch: Patch) -> Iterator[ox.Quad]:
    """The patch as quads, in a fixed order."""
    commit = ox.NamedNode(patch.id)
    revision = ox.NamedNode(patch.id + "#revision")
    delete = ox.NamedNode(patch.id + "#delete")
    insert = ox.NamedNode(patch.id + "#insert")
    yield ox.Quad(commit, ox.NamedNode(RDF_TYPE), _n("Commit"))
    yield ox.Quad(commit, _n("sha256"), ox.Literal(patch.id[len(ID_PREFIX) :]))
    if patch.prev is not None:
        yield ox.Quad(commit, _n("previousCommit"), ox.NamedNode(patch.prev))
    yield ox.Quad(commit, _n("commitAuthor"), ox.Literal(patch.author))
    yield ox.Quad(commit, _n("commitMessage"), ox.Literal(patch.message))
    created = ox.Literal(format_created(patch.created), datatype=ox.NamedNode(XSD_DATETIME))
    yield ox.Quad(commit, _n("atTime", PROV), created)
    if patch.signature is not None:
        yield ox.Quad(commit, _n("signature", LUCID), ox.Literal(patch.signature))
    yield ox.Quad(commit, _n("hasRevision"), revision)
    yield ox.Quad(revision, ox.NamedNode(RDF_TYPE), _n("Revision"))
    yield ox.Quad(revision, _n("hasRevisionGraph"), ox.NamedNode(patch.graph))
    yield ox.Quad(revision, _n("deltaDelete"), delete)
    yield ox.Quad(revision, _n("deltaInsert"), insert)
    if patch.format != 1:
        yield ox.Quad(commit, _n("format", LUCID), ox.Literal(str(patch.format)))
    for item in patch.metadata:  # (format 3: the publisher's own statements about the commit)
        yield ox.Quad(commit, *meta.terms(item))
    for op, statement in patch.labelled_rows():
        (triple,) = ox.parse(statement + " .", format=ox.RdfFormat.N_TRIPLES)
        yield ox.Quad(triple.subject, triple.predicate, triple.object, delete if op == "D" else insert)


def write_revision(patch: Patch, fmt: str) -> bytes:
    """The patch as TriG (`trig`) or JSON-LD (`jsonld`)."""
    return serialize(patch_quads(patch), _FORMATS[fmt], PREFIXES)


_FIXED = frozenset({*meta.RESERVED, LUCID + "signature", LUCID + "format"})


def _metadata(quads: list[ox.Quad], commit: ox.NamedNode) -> list[meta.Entry]:
    """The commit's statements beyond the fixed ones: its metadata (format 3)."""
    return [meta.entry(q.predicate.value, q.object) for q in quads
            if q.subject == commit and type(q.graph_name) is ox.DefaultGraph and q.predicate.value not in _FIXED]


def read_revision(raw: bytes, fmt: str, canonicalizer: Canonicalizer) -> Patch:
    """Read a patch written by `write_revision`; its id must match its content."""
    quads = list(read_quads(raw, _FORMATS[fmt], name=f"{fmt} patch"))
    commits = [q.subject for q in quads
               if q.predicate.value == RDF_TYPE and q.object == _n("Commit")
               and type(q.graph_name) is ox.DefaultGraph]
    if len(commits) != 1 or type(commits[0]) is not ox.NamedNode:
        raise PatchFormatError(f"a {fmt} patch describes exactly one eccrev:Commit named by an IRI")
    commit = commits[0]
    claimed = check_patch_id(commit.value)

    def values(subject: ox.NamedNode | ox.BlankNode, local: str, ns: str = ECCREV) -> list[ox.Quad]:
        return [q for q in quads if q.subject == subject and q.predicate == _n(local, ns)
                and type(q.graph_name) is ox.DefaultGraph]

    def one(subject: ox.NamedNode | ox.BlankNode, local: str, ns: str = ECCREV,
            optional: bool = False) -> ox.NamedNode | ox.Literal | None:
        found = values(subject, local, ns)
        if not found and optional:
            return None
        if len(found) != 1:
            raise PatchFormatError(f"commit needs exactly one {ns}{local}")
        term = found[0].object
        assert type(term) in (ox.NamedNode, ox.Literal, ox.BlankNode)
        return term  # type: ignore[return-value]

    def literal(term: object, what: str) -> str:
        if type(term) is not ox.Literal:
            raise PatchFormatError(f"{what} must be a literal")
        return term.value

    revision = one(commit, "hasRevision")
    if type(revision) is not ox.NamedNode:
        raise PatchFormatError("eccrev:hasRevision must name the revision by an IRI")
    graph = one(revision, "hasRevisionGraph")
    delete, insert = one(revision, "deltaDelete"), one(revision, "deltaInsert")
    if not (type(graph) is type(delete) is type(insert) is ox.NamedNode):
        raise PatchFormatError("revision graph, deltaDelete and deltaInsert must be IRIs")
    prev = one(commit, "previousCommit", optional=True)
    signature = one(commit, "signature", LUCID, optional=True)
    created = one(commit, "atTime", PROV)
    if type(created) is not ox.Literal or created.datatype.value != XSD_DATETIME:
        raise PatchFormatError("prov:atTime must be an xsd:dateTime literal")
    if type(prev) not in (ox.NamedNode, type(None)):
        raise PatchFormatError("eccrev:previousCommit must be an IRI")
    removed_quads = [q for q in quads if q.graph_name == delete]
    added_quads = [q for q in quads if q.graph_name == insert]
    version = patch_format(one(commit, "format", LUCID, optional=True))
    if version == 1:
        removed = [(m, 0) for m in graph_msgs(removed_quads, canonicalizer).msgs()]
        added = [(m, 0) for m in graph_msgs(added_quads, canonicalizer).msgs()]
    else:
        removed = msgs_with_occurrences(removed_quads, canonicalizer, "the deleted triples")
        added = msgs_with_occurrences(added_quads, canonicalizer, "the inserted triples")
    patch = Patch(
        graph=graph.value,
        prev=check_patch_id(prev.value, "previous patch id") if isinstance(prev, ox.NamedNode) else None,
        author=literal(one(commit, "commitAuthor"), "eccrev:commitAuthor"),
        message=literal(one(commit, "commitMessage"), "eccrev:commitMessage"),
        created=parse_created(created.value),
        removed=tuple(m for m, _ in removed),
        added=tuple(m for m, _ in added),
        signature=literal(signature, "lucid:signature") if signature is not None else None,
        format=version,
        removed_occurrences=tuple(o for _, o in removed) if version != 1 else (),
        added_occurrences=tuple(o for _, o in added) if version != 1 else (),
        metadata=meta.normalise(_metadata(quads, commit)),
    )
    if patch.id != claimed:
        raise PatchIntegrityError(f"patch content hashes to {patch.id}, not to the claimed id {claimed}")
    sha = literal(one(commit, "sha256"), "eccrev:sha256")
    if sha != claimed[len(ID_PREFIX) :]:
        raise PatchIntegrityError("eccrev:sha256 does not match the commit id")
    return patch

