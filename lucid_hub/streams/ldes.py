"""The documents of a graph's Linked Data Event Stream (LDES 2.0 on TREE): the event stream,
its full-history view (a root node and time-ordered pages), the latest-state, last-N and
last-duration views, and their serialisations. docs/streams.md.

Statements are written as N-Triples text, not through an RDF library: every payload
statement is canonical N-Triples already, and N-Triples lines are valid Turtle, TriG and
N-Quads (only JSON-LD goes through oxigraph). A member's payload is its named graph (the
version's IRI), as the LDES specification allows; in Turtle and N-Triples, which have no
named graphs, the payload is the version object itself (the entity's IRI replaced by the
version's as subject), the form CBD-based clients materialise.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pyoxigraph as ox

from lucid_hub.errors import InputError
from lucid_hub.resources import graph_url, inbox_url, input_url, output_url, patch_url
from lucid_hub.streams.members import GraphStream, Member

LDES = "https://w3id.org/ldes#"
TREE = "https://w3id.org/tree#"
PROV = "http://www.w3.org/ns/prov#"
DCT = "http://purl.org/dc/terms/"
AS = "https://www.w3.org/ns/activitystreams#"
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
DCAT = "http://www.w3.org/ns/dcat#"
LDP = "http://www.w3.org/ns/ldp#"
LH = "https://w3id.org/lucid-hub#"
LDNS = "http://w3id.org/rsp/ldn-s#"  # LDN for RDF streams: a stream's input and output
PREFIXES = {"ldns": LDNS, "ldes": LDES, "tree": TREE, "prov": PROV, "dct": DCT, "as": AS, "xsd": XSD, "rdf": RDF,
            "rdfs": RDFS, "dcat": DCAT, "ldp": LDP, "lh": LH}
TYPE = f"<{RDF}type>"
KINDS = {"create": f"<{AS}Create>", "update": f"<{AS}Update>", "delete": f"<{AS}Delete>"}
MEDIA_TYPES = ["application/trig", "application/n-quads", "application/ld+json", "text/turtle",
               "application/n-triples"]
PAGE_MEMBERS = 500
_DURATION = re.compile(r"P(?:(\d{1,6})D)?(?:T(?:(\d{1,6})H)?(?:(\d{1,6})M)?(?:(\d{1,6}(?:\.\d{1,3})?)S)?)?")
MAX_VERSIONS = 1000


def iri(value: str) -> str:
    return f"<{value}>"


def literal(value: str, datatype: str | None = None) -> str:
    text = str(ox.Literal(value)) if datatype is None else str(ox.Literal(value, datatype=ox.NamedNode(datatype)))
    return text


def when(value: str) -> str:
    return literal(value, XSD + "dateTime")


def integer(value: int) -> str:
    return f'"{value}"^^<{XSD}integer>'


def parse_duration(text: str) -> timedelta:
    """An xsd:dayTimeDuration (`PT1H`, `P1DT12H`, `PT30M`); InputError otherwise. Years and
    months have no fixed length: not accepted."""
    match = _DURATION.fullmatch(text)
    if not match or text in ("P", "PT") or text.endswith("T"):
        raise InputError(f"{text!r} is not a duration of days, hours, minutes, seconds (e.g. PT1H, P1D)")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


class Urls:
    """The URLs of one graph's stream resources (one spelling: TREE clients compare them)."""

    def __init__(self, base: str, graph: str) -> None:
        self.base, self.graph = base, graph
        self.q = quote(graph, safe="")

    @property
    def stream(self) -> str:
        return f"{self.base}/streams?graph={self.q}"

    @property
    def root(self) -> str:
        return f"{self.base}/streams/pages?graph={self.q}"

    def page(self, number: int) -> str:
        return f"{self.base}/streams/pages?graph={self.q}&page={number}"

    def view(self, name: str, page: int = 0) -> str:
        url = f"{self.base}/streams/views/{name}?graph={self.q}"
        return url if page == 0 else f"{url}&page={page}"

    @property
    def events(self) -> str:
        return f"{self.base}/streams/events?graph={self.q}"

    @property
    def inbox(self) -> str:
        return inbox_url(self.base, self.graph)

    @property
    def input(self) -> str:
        return input_url(self.base, self.graph)

    @property
    def output(self) -> str:
        return output_url(self.base, self.graph)

    @property
    def channels(self) -> str:
        return f"{self.base}/channels?graph={self.q}"

    def version(self, member: Member) -> str:
        return f"{patch_url(self.base, member.activity.id)}#{member.version_id}"


@dataclass
class Document:
    """Statements: the default graph's, and named graphs' (a member's payload)."""

    default: list[str]
    graphs: list[tuple[str, str, Sequence[str]]]  # (graph IRI, entity IRI, statements)

    def render(self, media_type: str) -> bytes:
        if media_type == "application/n-quads":
            return "".join(self._nquads()).encode()
        if media_type == "application/trig":
            parts = [f"{s} .\n" for s in self.default]
            for name, _entity, statements in self.graphs:
                parts.append(f"<{name}> {{\n")
                parts.extend(f"{s} .\n" for s in statements)
                parts.append("}\n")
            return "".join(parts).encode()
        if media_type in ("text/turtle", "application/n-triples"):
            parts = [f"{s} .\n" for s in self.default]
            for name, entity, statements in self.graphs:
                subject = f"<{entity}> "
                for s in statements:
                    parts.append(f"<{name}> {s[len(subject):]} .\n" if s.startswith(subject) else f"{s} .\n")
            return "".join(parts).encode()
        if media_type == "application/ld+json":
            return jsonld(self._nquads())
        raise ValueError(media_type)

    def _nquads(self) -> Iterator[str]:
        for s in self.default:
            yield f"{s} .\n"
        for name, _entity, statements in self.graphs:
            for s in statements:
                yield f"{s} <{name}> .\n"


def context() -> dict[str, object]:
    """The JSON-LD context of the hub's stream documents (served at /contexts/lucid-hub.jsonld
    and inlined in each JSON-LD answer: nothing is fetched from elsewhere)."""
    return {"@context": dict(PREFIXES)}


def jsonld(nquads: Iterable[str]) -> bytes:
    """JSON-LD of N-Quads: oxigraph's expanded form, its property names compacted with the
    hub's prefixes (hand-written: oxigraph writes no compacted JSON-LD, and a full JSON-LD
    compaction library is not needed to shorten keys)."""
    quads = ox.parse("".join(nquads), format=ox.RdfFormat.N_QUADS)
    expanded = json.loads(ox.serialize(quads, format=ox.RdfFormat.JSON_LD) or b"[]")
    ordered = sorted(PREFIXES.items(), key=lambda item: -len(item[1]))

    def compact(key: str) -> str:
        for prefix, namespace in ordered:
            if key.startswith(namespace) and len(key) > len(namespace):
                rest = key[len(namespace):]
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", rest):
                    return f"{prefix}:{rest}"
        return key

    def walk(node: object) -> object:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if isinstance(node, dict):
            return {(k if k.startswith("@") else compact(k)): walk(v) for k, v in node.items()}
        return node

    return json.dumps({"@context": context()["@context"], "@graph": walk(expanded)}, ensure_ascii=False).encode()


# --- the event stream and its views -------------------------------------------------------

def stream_description(urls: Urls, view: str) -> list[str]:
    """The event stream: how to read its members (LDES 2.0 paths and version types)."""
    es = iri(urls.stream)
    return [
        f"{es} {TYPE} <{LDES}EventStream>",
        f"{es} <{LDES}timestampPath> <{PROV}generatedAtTime>",
        f"{es} <{LDES}sequencePath> <{LH}streamPosition>",
        f"{es} <{LDES}versionOfPath> <{DCT}isVersionOf>",
        f"{es} <{LDES}versionCreateObject> <{AS}Create>",
        f"{es} <{LDES}versionUpdateObject> <{AS}Update>",
        f"{es} <{LDES}versionDeleteObject> <{AS}Delete>",
        f"{es} <{LDES}versionCreatePath> {TYPE}",
        f"{es} <{LDES}versionUpdatePath> {TYPE}",
        f"{es} <{LDES}versionDeletePath> {TYPE}",
        f"{es} <{DCT}title> {literal(f'Changes of {urls.graph}')}",
        f"{es} <{LH}graph> <{urls.graph}>",
        f"{es} <{DCT}isVersionOf> <{graph_url(urls.base, urls.graph)}>",
        f"{es} <{TREE}view> {iri(view)}",
    ]


def event_stream(urls: Urls, stream: GraphStream) -> Document:
    """`/streams?graph=`: the event stream, its full-history view, the other views and the
    push channels (one `tree:view`, so that clients that take the first view take the full
    history; the others are `rdfs:seeAlso`)."""
    es = iri(urls.stream)
    out = stream_description(urls, urls.root)
    for name in ("latest", "last/10", "since/PT1H"):
        out.append(f"{es} <{RDFS}seeAlso> {iri(urls.view(name))}")
    out += [f"{es} <{LDP}inbox> {iri(urls.inbox)}", f"{es} <{LDNS}input> {iri(urls.input)}",
            f"{es} <{LDNS}output> {iri(urls.output)}",
            f"{es} <{LH}events> {iri(urls.events)}",
            f"{es} <{LH}channels> {iri(urls.channels)}",
            f"{es} <{LH}members> {integer(len(stream.members))}",
            f"{es} <{LH}patches> {integer(stream.seq)}"]
    return Document(out, [])


def page_count(stream: GraphStream, size: int) -> int:
    """Pages of the full-history view: at least one (empty while the graph has no members),
    and one more after a full last page."""
    return len(stream.members) // size + 1


def is_full(stream: GraphStream, number: int, size: int) -> bool:
    return len(stream.members) >= (number + 1) * size


def root_node(urls: Urls, stream: GraphStream, size: int) -> Document:
    """The full-history view's root: relations to every page, bounded by their timestamps,
    so that a client after time T fetches only the pages that can hold it."""
    out = stream_description(urls, urls.root)
    root = iri(urls.root)
    out += [f"{root} {TYPE} <{TREE}Node>", f"{root} <{TREE}viewDescription> {iri(urls.root + '#description')}",
            f"{iri(urls.root + '#description')} <{DCT}description> "
            f"{literal('every version of every entity since the first patch, by time')}"]
    members = stream.members
    for number in range(page_count(stream, size)):
        chunk = members[number * size:(number + 1) * size]
        first = chunk[0].activity.timestamp if chunk else (members[-1].activity.timestamp if members else None)
        target = iri(urls.page(number))
        if first is None:
            out += [f"{root} <{TREE}relation> _:r{number}", f"_:r{number} {TYPE} <{TREE}Relation>",
                    f"_:r{number} <{TREE}node> {target}"]
            continue
        out += [f"{root} <{TREE}relation> _:r{number}g", f"_:r{number}g {TYPE} <{TREE}GreaterThanOrEqualToRelation>",
                f"_:r{number}g <{TREE}path> <{PROV}generatedAtTime>", f"_:r{number}g <{TREE}value> {when(first)}",
                f"_:r{number}g <{TREE}node> {target}"]
        if is_full(stream, number, size):
            last = chunk[-1].activity.timestamp
            out += [f"{root} <{TREE}relation> _:r{number}l", f"_:r{number}l {TYPE} <{TREE}LessThanOrEqualToRelation>",
                    f"_:r{number}l <{TREE}path> <{PROV}generatedAtTime>", f"_:r{number}l <{TREE}value> {when(last)}",
                    f"_:r{number}l <{TREE}node> {target}"]
    return Document(out, [])


def page(urls: Urls, stream: GraphStream, number: int, size: int) -> Document:
    """Page `number` of the full history: members number*size … (number+1)*size - 1; once
    full it never changes. Pages carry no relations: the root is the one index (docs/decisions.md)."""
    members = stream.members[number * size:(number + 1) * size]
    node = iri(urls.page(number))
    out = [f"{node} {TYPE} <{TREE}Node>", f"{node} <{DCT}isPartOf> {iri(urls.root)}"]
    if is_full(stream, number, size):
        out.append(f'{node} <{LDES}immutable> "true"^^<{XSD}boolean>')
    return _with_members(urls, out, members)


def _with_members(urls: Urls, out: list[str], members: Sequence[Member]) -> Document:
    es = iri(urls.stream)
    graphs: list[tuple[str, str, Sequence[str]]] = []
    activities: dict[str, Member] = {}
    for m in members:
        v = urls.version(m)
        vi = iri(v)
        out += [f"{es} <{TREE}member> {vi}", f"{vi} {TYPE} {KINDS[m.kind]}", f"{vi} <{DCT}isVersionOf> {iri(m.entity)}",
                f"{vi} <{PROV}generatedAtTime> {when(m.activity.timestamp)}",
                f"{vi} <{LH}streamPosition> {integer(m.index)}",
                f"{vi} <{PROV}wasGeneratedBy> {iri(patch_url(urls.base, m.activity.id))}"]
        activities.setdefault(m.activity.id, m)
        graphs.append((v, m.entity, m.statements))
    for patch_id, m in activities.items():
        a = m.activity
        p = iri(patch_url(urls.base, patch_id))
        out += [f"{p} {TYPE} <{PROV}Activity>", f"{p} <{DCT}identifier> {literal(patch_id)}",
                f"{p} <{DCT}creator> {literal(a.author)}", f"{p} <{DCT}description> {literal(a.message)}",
                f"{p} <{PROV}endedAtTime> {when(a.created)}", f"{p} <{LH}chainPosition> {integer(a.seq)}"]
        if a.prev:
            out.append(f"{p} <{PROV}wasInformedBy> {iri(patch_url(urls.base, a.prev))}")
        out += [f"{p} <{predicate}> {value}" for predicate, value in a.metadata]  # (the publisher's, signed)
    return Document(out, graphs)


def page_of_members(urls: Urls, members: Sequence[Member]) -> Document:
    """The members one patch made, as a document of their own (push events)."""
    return _with_members(urls, [], members)


# --- views --------------------------------------------------------------------------------

@dataclass(frozen=True)
class View:
    """A view of the stream: which members it keeps, and how its retention is described."""

    name: str  # as in its IRI: latest, last/N, since/DURATION
    versions: int | None = None
    duration: timedelta | None = None
    duration_text: str = ""

    @classmethod
    def parse(cls, name: str) -> View:
        if name == "latest":
            return cls("latest", versions=1)
        kind, _, value = name.partition("/")
        if kind == "last" and value.isdigit() and len(value) <= 4 and 1 <= int(value) <= MAX_VERSIONS:
            return cls(f"last/{int(value)}", versions=int(value))
        if kind == "since" and value:
            return cls(f"since/{value}", duration=parse_duration(value), duration_text=value)
        raise InputError(f"unknown view {name!r}: latest, last/N (N from 1 to {MAX_VERSIONS}) or "
                         "since/DURATION (e.g. since/PT1H)")

    def select(self, stream: GraphStream, now: datetime | None = None) -> list[Member]:
        members = stream.members
        if self.duration is not None:
            cut = ((now or datetime.now(UTC)) - self.duration).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            return [m for m in members if m.activity.timestamp >= cut]
        assert self.versions is not None
        kept: list[Member] = []
        seen: dict[str, int] = {}
        for m in reversed(members):
            count = seen.get(m.entity, 0)
            if count >= self.versions:
                continue
            seen[m.entity] = count + 1
            if self.name == "latest" and m.kind == "delete":
                continue
            kept.append(m)
        kept.reverse()
        return kept

    def retention(self, node: str) -> list[str]:
        policy = f"{node}#retention"
        out = [f"{iri(node)} <{LDES}retentionPolicy> {iri(policy)}"]
        if self.duration is not None:
            value = literal(self.duration_text, XSD + "dayTimeDuration")
            out += [f"{iri(policy)} <{LDES}fullLogDuration> {value}",
                    f"{iri(policy)} {TYPE} <{LDES}DurationAgoPolicy>",
                    f"{iri(policy)} <{TREE}path> <{PROV}generatedAtTime>", f"{iri(policy)} <{TREE}value> {value}"]
            return out
        out += [f"{iri(policy)} <{LDES}versionAmount> {integer(self.versions or 1)}",
                f"{iri(policy)} {TYPE} <{LDES}LatestVersionSubset>",
                f"{iri(policy)} <{LDES}amount> {integer(self.versions or 1)}"]
        if self.name == "latest":
            out.append(f'{iri(policy)} <{LDES}versionDeleteDuration> "PT0S"^^<{XSD}dayTimeDuration>')
        return out


def view_page(urls: Urls, view: View, kept: Sequence[Member], number: int, size: int) -> Document:
    """Page `number` of a view whose members are `kept` (`view.select`; mutable: the window
    moves); page 0 is the view's root node, which states the event stream, its retention
    policy and the window in its IRI."""
    node = urls.view(view.name, number)
    out = [f"{iri(node)} {TYPE} <{TREE}Node>"]
    if number == 0:
        out = stream_description(urls, node) + out + view.retention(node)
    else:
        out.append(f"{iri(node)} <{DCT}isPartOf> {iri(urls.view(view.name))}")
    if len(kept) > (number + 1) * size:
        out += [f"{iri(node)} <{TREE}relation> _:next", f"_:next {TYPE} <{TREE}Relation>",
                f"_:next <{TREE}node> {iri(urls.view(view.name, number + 1))}"]
    return _with_members(urls, out, kept[number * size:(number + 1) * size])


def first_page_after(stream: GraphStream, timestamp: str, size: int) -> int:
    """The page that holds the first member timestamped after `timestamp` (the last page
    when none is)."""
    return bisect.bisect_right(stream.members, timestamp, key=lambda m: m.activity.timestamp) // size


