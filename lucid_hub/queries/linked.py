"""A windowed query's results as Linked Data (Streaming Linked Data, Barbieri and Della Valle):
the query's s-graph describes its output stream and links one i-graph per evaluation; each
i-graph holds that evaluation's results. The same elements are an LDES, so that standard
clients harvest query results as they harvest graph histories. docs/queries.md.

IRIs: the s-graph is the query's own URL (`/windows/{name}`), an i-graph the URL of its
element (`/windows/{name}/results/{N}`); N is the element's sequence, which count and
triple windows have where they have no time.

What an i-graph holds: a CONSTRUCT's triples; a SELECT's or ASK's result in the W3C
result-set vocabulary (`rs:ResultSet`, the vocabulary of the SPARQL test suites), so that
every result is RDF.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyoxigraph as ox

from lucid_hub.queries.window_content import Window
from lucid_hub.queries.window_records import Element
from lucid_hub.streams.ldes import DCT, LDES, LH, PROV, RDF, RDFS, TREE, XSD, Document, integer, iri, literal, when

SLD = "http://www.streaminglinkeddata.org/schema#"
RS = "http://www.w3.org/2001/sw/DataAccess/tests/result-set#"
TYPE = f"<{RDF}type>"
PAGE = 100  # elements on one LDES page


class ResultUrls:
    def __init__(self, base: str, name: str) -> None:
        self.sgraph = f"{base}/windows/{name}"

    def igraph(self, sequence: int) -> str:
        return f"{self.sgraph}/results/{sequence}"

    @property
    def stream(self) -> str:
        return f"{self.sgraph}/ldes"

    def page(self, number: int) -> str:
        return f"{self.stream}?page={number}"


def stamp(value: datetime) -> str:
    return when(value.isoformat())


def sgraph(urls: ResultUrls, window: Window, elements: Sequence[Element], next_end: datetime | None) -> Document:
    """The s-graph: when the stream was last updated and when it expires (the next window's
    end; count and triple windows have none), the window's type and size, and each kept
    i-graph with the time it was received."""
    s = iri(urls.sgraph)
    kind, size = window.describe()
    out = [f"{s} {TYPE} <{SLD}StreamGraph>", f"{s} <{SLD}windowType> <{SLD}{kind}>",
           f"{s} <{SLD}windowSize> " + (literal(size, XSD + "duration") if size.startswith("P")
                                        else integer(int(size))),
           f"{s} <{LH}stream> {iri(urls.stream)}"]
    if elements:
        out.append(f"{s} <{SLD}lastUpdate> {stamp(elements[-1].received)}")
    if next_end is not None:
        out.append(f"{s} <{SLD}expires> {stamp(next_end)}")
    for element in elements:
        i = iri(urls.igraph(element.sequence))
        out += [f"{s} <{RDFS}seeAlso> {i}", f"{i} <{SLD}receivedAt> {stamp(element.received)}"]
    return Document(out, [])


def igraph(urls: ResultUrls, element: Element) -> Document:
    """One i-graph: its metadata and its results (named graph: the i-graph's IRI)."""
    i = iri(urls.igraph(element.sequence))
    meta = [f"{i} <{SLD}receivedAt> {stamp(element.received)}", f"{i} <{RDFS}seeAlso> {iri(urls.sgraph)}",
            *_bounds(i, element.body)]
    member = urls.igraph(element.sequence)
    return Document(meta, [(member, member, results(i, element.body, f"e{element.sequence}"))])


def _bounds(i: str, body: dict[str, Any]) -> list[str]:
    out = []
    for key in ("windowStart", "windowEnd"):
        value = body.get(key)
        if isinstance(value, str):
            out.append(f"{i} <{LH}{key}> {when(value)}")
        elif isinstance(value, int):
            out.append(f"{i} <{LH}{key}> {integer(value)}")
    return out


def results(i: str, body: dict[str, Any], scope: str) -> list[str]:
    """The element's results as statements: a CONSTRUCT's triples as they are; a SELECT's
    rows and an ASK's answer in the result-set vocabulary, hung from `i`. Blank node labels
    start with `scope` (one element's are apart from another's in one document)."""
    answer = body.get("results") or {}
    if "boolean" in answer:
        truth = str(bool(answer["boolean"])).lower()
        return [f"{i} {TYPE} <{RS}ResultSet>", f'{i} <{RS}boolean> "{truth}"^^<{XSD}boolean>']
    variables = list(answer.get("head", {}).get("vars", []))
    rows = answer.get("results", {}).get("bindings", [])
    if variables == ["subject", "predicate", "object"]:
        return [" ".join(_term(row[v], scope) for v in variables) for row in rows
                if all(v in row for v in variables)]
    out = [f"{i} {TYPE} <{RS}ResultSet>", *(f"{i} <{RS}resultVariable> {literal(v)}" for v in variables)]
    for n, row in enumerate(rows):
        solution = f"_:{scope}s{n}"
        out += [f"{i} <{RS}solution> {solution}", f"{solution} <{RS}index> {integer(n + 1)}"]
        for m, (variable, value) in enumerate(sorted(row.items())):
            binding = f"_:{scope}s{n}b{m}"
            out += [f"{solution} <{RS}binding> {binding}", f"{binding} <{RS}variable> {literal(variable)}",
                    f"{binding} <{RS}value> {_term(value, scope)}"]
    return out


def _term(value: dict[str, Any], scope: str) -> str:
    """An N-Triples term from a SPARQL JSON results term."""
    kind, text = value.get("type"), str(value.get("value", ""))
    if kind == "uri":
        return iri(text)
    if kind == "bnode":
        return f"_:{scope}r{''.join(c for c in text if c.isalnum())}"
    if "xml:lang" in value:
        return str(ox.Literal(text, language=str(value["xml:lang"])))
    datatype = value.get("datatype")
    return literal(text, datatype) if datatype else literal(text)


# --- the LDES of the results ---------------------------------------------------------------

def event_stream(urls: ResultUrls, first: int) -> Document:
    """The event stream of the query's elements: each i-graph a member (its results its
    payload, a named graph), ordered by time and sequence; its view, the pages in order."""
    es = iri(urls.stream)
    root = iri(urls.page(_page_of(first)))
    out = [f"{es} {TYPE} <{LDES}EventStream>", f"{es} <{LDES}timestampPath> <{PROV}generatedAtTime>",
           f"{es} <{LDES}sequencePath> <{LH}streamPosition>", f"{es} <{LDES}versionOfPath> <{DCT}isVersionOf>",
           f"{es} <{DCT}isVersionOf> {iri(urls.sgraph)}", f"{es} <{TREE}view> {root}"]
    return Document(out, [])


def _page_of(sequence: int) -> int:
    return max(0, sequence) // PAGE


def page(urls: ResultUrls, number: int, elements: Sequence[Element], last: int, retain: int) -> Document:
    """Page `number`: the elements numbered number*PAGE … (number+1)*PAGE - 1 still kept, and
    a relation to the next page while there is one. No page is immutable: the query keeps its
    last `retain` elements only (the stream's retention policy says so), so old pages empty."""
    es, node = iri(urls.stream), iri(urls.page(number))
    out = [f"{node} {TYPE} <{TREE}Node>"]
    if (number + 1) * PAGE <= last:
        out += [f"{node} <{TREE}relation> _:next", f"_:next {TYPE} <{TREE}Relation>",
                f"_:next <{TREE}node> {iri(urls.page(number + 1))}"]
    out += [f"{node} <{LDES}retentionPolicy> _:kept", f"_:kept {TYPE} <{LDES}LatestVersionSubset>",
            f"_:kept <{LDES}amount> {integer(retain)}"]
    graphs: list[tuple[str, str, Sequence[str]]] = []
    for element in elements:
        member = urls.igraph(element.sequence)
        m = iri(member)
        out += [f"{es} <{TREE}member> {m}", f"{m} <{DCT}isVersionOf> {iri(urls.sgraph)}",
                f"{m} <{PROV}generatedAtTime> {stamp(element.received)}",
                f"{m} <{LH}streamPosition> {integer(element.sequence)}",
                f"{m} <{SLD}receivedAt> {stamp(element.received)}", *_bounds(m, element.body)]
        graphs.append((member, member, results(m, element.body, f"e{element.sequence}")))
    return Document(out, graphs)


def table(body: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """An element's results as a table for people: the variables and each row's values."""
    answer = body.get("results") or {}
    if "boolean" in answer:
        return ["answer"], [["true" if answer["boolean"] else "false"]]
    variables = list(answer.get("head", {}).get("vars", []))
    rows = answer.get("results", {}).get("bindings", [])
    return variables, [[str(row[v]["value"]) if v in row else "" for v in variables] for row in rows]
