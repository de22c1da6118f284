"""The W3C SPARQL 1.1 Protocol and Graph Store Protocol test manifests, run as they are
written against a hub on loopback.

The manifests (w3c/rdf-tests, `sparql/sparql11/protocol` and `.../graph-store-protocol`,
copied into tests/w3c under the W3C test suite licence) describe each case as HTTP requests
(method, path, headers, body) and what each answer must be (status or status class, an ASK's
boolean, the result's kind, an RDF body isomorphic to one given). This runner sends them as
written, with the path prefix mapped (`/sparql/` to `/sparql`, `/gsp` to `/graphs`) and a
bearer token added (every request to this hub is authenticated), after loading the case's
data into the graphs it names.

Where the hub deliberately does otherwise, the case is in DEVIATIONS with its reason (also
in docs/http-api.md), and the test asserts that it still fails that way: a deviation that
starts passing is reported, so the list stays true.
"""

from __future__ import annotations

import http
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from rdflib import RDF, RDFS, Graph, Namespace
from rdflib.collection import Collection
from rdflib.compare import isomorphic

from tests.conftest import RunningHub, running_hub

W3C = Path(__file__).resolve().parents[1] / "w3c"
MF = Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#")
HT = Namespace("http://www.w3.org/2011/http#")
HTS = "http://www.w3.org/2011/http-statusCodes#"
CNT = Namespace("http://www.w3.org/2011/content#")
UT = Namespace("http://www.w3.org/2009/sparql/tests/test-update#")

NO_DEFAULT_GRAPH = "this hub has no default graph: every graph is named (docs/http-api.md, decision 75)"
CLEAR_ALL = "CLEAR ALL is refused: an update names the graphs it clears (docs/http-api.md, decision 75)"
DEVIATIONS = {
    "update_dataset_default_graph": CLEAR_ALL,
    "update_dataset_default_graphs": CLEAR_ALL,
    "update_dataset_named_graphs": CLEAR_ALL,
    "update_dataset_full": CLEAR_ALL,
    "update_post_form": CLEAR_ALL,
    "update_post_direct": CLEAR_ALL,
    "put_get_default": NO_DEFAULT_GRAPH,
    "post_get_post_get_indirect": "multipart/form-data bodies are refused: one RDF document per request",
    "post_get_post_get_direct": "multipart/form-data bodies are refused: one RDF document per request",
}


@dataclass
class Exchange:
    """One request of a case and what its answer must be."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None
    statuses: list[str]  # status names (OK, Created) or classes (StatusCode2xx)
    boolean: bool | None = None
    kind: str | None = None  # boolean, tabular, RDF
    answer_type: str | None = None
    answer_body: str | None = None
    location: bool = False  # the answer's Location is $LOCATION$ in later requests


@dataclass
class Case:
    name: str
    title: str
    data: list[tuple[Path, str]] = field(default_factory=list)  # (file, graph IRI)
    exchanges: list[Exchange] = field(default_factory=list)


def _items(graph: Graph, head: Any) -> list[Any]:
    return list(Collection(graph, head)) if head is not None else []


def _headers(graph: Graph, node: Any) -> dict[str, str]:
    return {str(graph.value(h, HT.fieldName)): str(graph.value(h, HT.fieldValue))
            for h in _items(graph, graph.value(node, HT.headers))}


def _body(graph: Graph, node: Any) -> tuple[str | None, str]:
    body = graph.value(node, HT.body)
    if body is None:
        return None, "UTF-8"
    return str(graph.value(body, CNT.chars)), str(graph.value(body, CNT.characterEncoding) or "UTF-8")


def cases(manifest: Path) -> list[Case]:
    graph = Graph().parse(manifest, format="turtle", publicID=manifest.as_uri())
    (root,) = graph.subjects(RDF.type, MF.Manifest)
    found = []
    for entry in _items(graph, graph.value(root, MF.entries)):
        case = Case(str(entry).rsplit("#", 1)[-1], str(graph.value(entry, MF.name)))
        for data in graph.objects(entry, UT.graphData):
            case.data.append((Path(str(graph.value(data, UT.graph)).removeprefix("file://")),
                              str(graph.value(data, RDFS.label))))
        action = graph.value(entry, MF.action)
        for request in _items(graph, graph.value(action, HT.requests)):
            text, encoding = _body(graph, request)
            answer = graph.value(request, HT.resp)
            expected_text, _enc = _body(graph, answer)
            boolean = graph.value(answer, MF.expectedBoolean)
            case.exchanges.append(Exchange(
                method=str(graph.value(request, HT.methodName)), path=str(graph.value(request, HT.absolutePath)),
                headers=_headers(graph, request), body=None if text is None else text.encode(encoding),
                statuses=sorted(str(s).removeprefix(HTS) for s in graph.objects(answer, MF.expectedStatus)),
                boolean=None if boolean is None else bool(boolean.toPython()),
                kind=str(graph.value(answer, MF.expectedFormat) or "") or None,
                answer_type=_headers(graph, answer).get("content-type"), answer_body=expected_text,
                location=graph.value(answer, MF.expectedLocation) is not None))
        found.append(case)
    return found


PROTOCOL = cases(W3C / "protocol" / "manifest.ttl")
GRAPH_STORE = [*cases(W3C / "graph-store-protocol" / "manifest-indirect.ttl"),
               *cases(W3C / "graph-store-protocol" / "manifest-direct.ttl")]


def _status_ok(status: int, names: list[str]) -> bool:
    for name in names:
        found = re.fullmatch(r"StatusCode(\d)xx", name)
        if found and status // 100 == int(found.group(1)):
            return True
        if not found and status == http.HTTPStatus[re.sub(r"(?<=[a-z])([A-Z])", r"_\1", name).upper()]:
            return True
    return False


def _path(raw: str, location: str | None) -> str:
    if location is not None:
        raw = raw.replace("$LOCATION$", quote(location, safe=""))
    if raw.startswith("/sparql/"):
        return "/sparql" + raw[len("/sparql/"):]
    if raw.startswith("/gsp"):
        return "/graphs" + raw[len("/gsp"):]
    raise AssertionError(f"unexpected path {raw}")


def _boolean(answer: requests.Response) -> bool:
    kind = answer.headers.get("Content-Type", "")
    if "json" in kind:
        return bool(answer.json()["boolean"])
    if "xml" in kind:
        found = re.search(r"<boolean>\s*(true|false)\s*</boolean>", answer.text)
        assert found, answer.text[:300]
        return found.group(1) == "true"
    raise AssertionError(f"an ASK answered as {kind}")


def _rdf_format(media_type: str) -> str:
    return {"text/turtle": "turtle", "application/n-triples": "nt", "application/rdf+xml": "xml",
            "application/ld+json": "json-ld", "application/trig": "trig", "application/n-quads": "nquads"}[media_type]


def run(hub: RunningHub, case: Case) -> Iterator[str]:
    """Send the case's requests; each failed expectation as a sentence (none: it passed)."""
    for data, iri in case.data:
        loaded = hub.http.put(f"{hub.url}/graphs", params={"graph": iri}, data=(W3C / "protocol" / data.name).read_bytes(),
                              headers={"Content-Type": "application/n-triples"}, timeout=30)
        assert loaded.status_code in (200, 201), loaded.text
    location: str | None = None
    for number, exchange in enumerate(case.exchanges, 1):
        body = exchange.body
        if body is not None and location is not None:
            body = body.replace(b"$LOCATION$", location.encode())
        answer = hub.http.request(exchange.method, hub.url + _path(exchange.path, location), data=body,
                                  headers=exchange.headers, timeout=60, allow_redirects=False)
        where = f"request {number} ({exchange.method} {exchange.path[:60]})"
        if not _status_ok(answer.status_code, exchange.statuses):
            yield f"{where}: {answer.status_code} {answer.text[:200]!r}, expected {'/'.join(exchange.statuses)}"
            return
        if exchange.location:
            location = answer.headers.get("Location")
            if not location:
                yield f"{where}: no Location"
                return
        media_type = answer.headers.get("Content-Type", "").split(";")[0].strip()
        if exchange.kind == "boolean":
            answered = _boolean(answer)
            if exchange.boolean is not None and answered != exchange.boolean:
                yield f"{where}: ASK answered {answered}"
        if exchange.kind == "tabular" and ("json" not in media_type or "results" not in json.loads(answer.text)):
            yield f"{where}: not a table of results ({media_type})"
        if exchange.kind == "RDF":
            try:
                Graph().parse(data=answer.text, format=_rdf_format(media_type))
            except (KeyError, ValueError) as exc:
                yield f"{where}: not RDF ({media_type}): {exc}"
        if exchange.answer_type and media_type != exchange.answer_type.split(";")[0].strip():
            yield f"{where}: answered {media_type}, expected {exchange.answer_type}"
        if exchange.answer_body is not None and exchange.method != "HEAD":
            expected = Graph().parse(data=exchange.answer_body, format=_rdf_format(media_type))
            got = Graph().parse(data=answer.text, format=_rdf_format(media_type))
            if not isomorphic(expected, got):
                yield f"{where}: the graph is not the one expected:\n{answer.text[:500]}"


@pytest.fixture(scope="module")
def shared_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    where = tmp_path_factory.mktemp("w3c")
    with running_hub(where / "data", f"sqlite:///{where / 'hub.db'}") as hub:
        yield hub


@pytest.fixture
def w3c_hub(shared_hub: RunningHub) -> RunningHub:
    """The cases expect an empty Graph Store (each PUT of them creates): every graph the cases
    made before is deleted (GSP §5.4: gone, 404, created again by a PUT), the hub's own kept."""
    hub = shared_hub
    for graph in hub.runtime.archive.graphs():
        if not graph.iri.startswith("urn:lucid-hub:") and not hub.runtime.archive.deleted(graph.iri):
            assert hub.http.delete(f"{hub.url}/graphs", params={"graph": graph.iri}, timeout=30).status_code == 200
    return hub


@pytest.mark.parametrize("case", PROTOCOL + GRAPH_STORE, ids=lambda c: c.name)
def test_w3c_manifest_case(w3c_hub: RunningHub, case: Case) -> None:
    failures = list(run(w3c_hub, case))
    reason = DEVIATIONS.get(case.name)
    if reason is None:
        assert failures == [], f"{case.title}: " + "; ".join(failures)
    else:  # a deviation must still be one, or leave the list
        assert failures, f"{case.name} passes now: take it off DEVIATIONS ({reason})"


def test_the_manifests_were_read_whole() -> None:
    assert len(PROTOCOL) == 34 and sum(len(c.exchanges) for c in PROTOCOL) == 39
    assert len(GRAPH_STORE) == 13
    assert set(DEVIATIONS) <= {c.name for c in PROTOCOL + GRAPH_STORE}
    with_data = [c for c in PROTOCOL if c.data]
    assert with_data and all((W3C / "protocol" / d.name).is_file() for c in with_data for d, _iri in c.data)
