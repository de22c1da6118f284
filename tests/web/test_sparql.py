"""SPARQL at /sparql against hostile input and standard clients (issue 14, points 1, 2, 11):
no query or update fetches anything, updates write exactly the graphs they name, the
protocol's dataset and formats as SPARQLWrapper and rdflib's SPARQLStore use them, and a time
limit that holds without the client."""

from __future__ import annotations

import http.server
import os
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
import requests

from lucid_hub.demo.processes import wait_until
from tests.conftest import RunningHub, assert_consistent, running_hub

ACME = "https://acme.example/graphs/"
W, V = ACME + "w", ACME + "v"
UPDATE = {"Content-Type": "application/sparql-update"}
XSD = "http://www.w3.org/2001/XMLSchema#"


class Target:
    """A loopback HTTP server standing for anything a hub must never be made to fetch."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _hit(self) -> None:
                target.hits.append(f"{self.command} {self.path}")
                body = b'<urn:stolen> <urn:p> "secret" .\n'
                self.send_response(200)
                self.send_header("Content-Type", "application/n-triples")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _hit

            def log_message(self, *args: object) -> None:
                pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.server.shutdown()


def put(hub: RunningHub, graph: str, turtle: str) -> None:
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, data=turtle.encode(), timeout=30,
                          headers={"Content-Type": "text/turtle"})
    assert answer.status_code in (200, 201), answer.text


def update(session: Any, hub: RunningHub, text: str, **params: str) -> requests.Response:
    return session.post(f"{hub.url}/sparql", data=text.encode(), headers=UPDATE, params=params, timeout=60)


def content(hub: RunningHub, graph: str) -> set[str]:
    answer = hub.http.get(f"{hub.url}/graphs", params={"graph": graph}, timeout=30,
                          headers={"Accept": "application/n-triples"})
    return set(answer.text.splitlines()) if answer.status_code == 200 else set()


def select(session: Any, hub: RunningHub, query: str, **params: str) -> list[dict[str, str]]:
    answer = session.get(f"{hub.url}/sparql", params={"query": query, **params}, timeout=60)
    assert answer.status_code == 200, answer.text
    return [{k: v["value"] for k, v in b.items()} for b in answer.json()["results"]["bindings"]]


# --- 1. nothing is fetched, whatever the clause -----------------------------------------------

def test_no_update_or_query_fetches_a_url_or_reads_a_file(hub: RunningHub, target: Target, tmp_path: Path) -> None:
    put(hub, W, "<urn:a> <urn:p> <urn:o> .")
    secret = tmp_path / "secret.nt"
    secret.write_text('<urn:file> <urn:p> "from a local file" .\n')
    before = content(hub, W)
    for text in (f"INSERT {{ GRAPH <{W}> {{ ?s ?p ?o }} }} USING <{target.url}/x> WHERE {{ ?s ?p ?o }}",
                 f"INSERT {{ GRAPH <{W}> {{ ?s ?p ?o }} }} USING <file://{secret}> WHERE {{ ?s ?p ?o }}",
                 f"INSERT {{ GRAPH <{W}> {{ ?s ?p ?o }} }} USING NAMED <{target.url}/n> "
                 f"WHERE {{ GRAPH <{target.url}/n> {{ ?s ?p ?o }} }}",
                 f"INSERT {{ GRAPH <{W}> {{ ?s ?p ?o }} }} WHERE {{ GRAPH <{target.url}/g> {{ ?s ?p ?o }} }}"):
        answer = update(hub.http, hub, text)
        assert answer.status_code == 200 and answer.json()["patches"] == [], answer.text  # empty graphs
    for text, reason in ((f"LOAD <{target.url}/x> INTO GRAPH <{W}>", "LOAD is not allowed"),
                         (f"LOAD <file://{secret}> INTO GRAPH <{W}>", "LOAD is not allowed"),
                         (f"INSERT {{ GRAPH <{W}> {{ ?s ?p ?o }} }} WHERE {{ SERVICE <{target.url}/sparql> "
                          "{ ?s ?p ?o } }", "SERVICE is not allowed"),
                         (f"insert {{ graph <{W}> {{ ?s ?p ?o }} }} where {{ service silent <{target.url}/s> "
                          "{ ?s ?p ?o } }", "SERVICE is not allowed")):
        answer = update(hub.http, hub, text)
        assert answer.status_code == 400 and reason in answer.text, (text, answer.text)
    for query in (f"SELECT * WHERE {{ SERVICE <{target.url}/sparql> {{ ?s ?p ?o }} }}",
                  f"SELECT * WHERE {{ ?s ?p ?o FILTER EXISTS {{ SERVICE <{target.url}/q> {{ ?s ?p ?o }} }} }}"):
        for _ in range(2):  # asked again: refused again (the worker keeps only what it parsed cleanly)
            answer = hub.http.get(f"{hub.url}/sparql", params={"query": query}, timeout=30)
            assert answer.status_code == 400 and "SERVICE is not allowed" in answer.text
    assert select(hub.http, hub, f"SELECT * FROM <{target.url}/x> WHERE {{ ?s ?p ?o }}") == []
    assert target.hits == [] and content(hub, W) == before
    # the words themselves are harmless data
    said = update(hub.http, hub, f'INSERT DATA {{ GRAPH <{W}> {{ <urn:truck> <urn:note> "LOAD the truck; call '
                                 f'customer SERVICE" }} }}')
    assert said.status_code == 200 and said.json()["patches"][0]["added"] == 1
    assert select(hub.http, hub, 'SELECT ?n WHERE { ?s <urn:note> ?n FILTER(CONTAINS(?n, "SERVICE")) }')


def test_an_update_is_authorised_before_anything_is_evaluated(hub: RunningHub, target: Target) -> None:
    put(hub, W, "<urn:a> <urn:p> <urn:o> .")
    reader = hub.session(hub.token("reader", ("partner",), ("graphs:read", "graphs:write")))
    denied = update(reader, hub, f"INSERT {{ GRAPH <{W}> {{ ?s ?p ?o }} }} WHERE {{ GRAPH <{target.url}/g> "
                                 "{ ?s ?p ?o } }")
    assert denied.status_code == 403 and W in denied.text
    assert target.hits == []


def test_the_sparql_worker_cannot_open_an_internet_socket(target: Target) -> None:
    """The second wall: even a SERVICE the parse check missed could not connect."""
    from lucid_hub.guard import Frame, GuardProcess

    guard = GuardProcess("tests.guard_targets:oxigraph_service", 512, {"LUCID_GUARD_NO_NETWORK": "1"})
    try:
        answer = guard.call(Frame({"url": f"{target.url}/sparql"}), 30)
    finally:
        guard.kill()
    assert "Permission denied" in answer.header["message"] and target.hits == []


# --- 2. updates write exactly the graphs they name -------------------------------------------

def test_base_prefix_and_with_resolve_to_the_graph_and_nothing_is_replaced(hub: RunningHub) -> None:
    put(hub, W, "<urn:kept> <urn:p> <urn:o> .")
    answer = update(hub.http, hub, f'BASE <{ACME}> INSERT DATA {{ GRAPH <w> {{ <urn:new> <urn:p> "x" }} }}')
    assert answer.status_code == 200 and answer.json()["patches"][0]["added"] == 1
    update(hub.http, hub, f'PREFIX g: <{ACME}> INSERT DATA {{ GRAPH g:w {{ <urn:new2> <urn:p> "y" }} }}')
    update(hub.http, hub, f"WITH <{W}> INSERT {{ ?s <urn:q> 1 }} WHERE {{ ?s <urn:p> <urn:o> }}")
    assert content(hub, W) == {
        "<urn:kept> <urn:p> <urn:o> .", '<urn:new> <urn:p> "x" .', '<urn:new2> <urn:p> "y" .',
        f'<urn:kept> <urn:q> "1"^^<{XSD}integer> .'}
    assert_consistent(hub.runtime)


def test_updates_whose_targets_cannot_be_named_are_refused_or_reach_only_writable_graphs(hub: RunningHub) -> None:
    put(hub, W, '<urn:s> <urn:p> "w" . <urn:t> <urn:p> "w" .')
    put(hub, V, '<urn:s> <urn:p> "v" .')
    for text, reason in (("CLEAR ALL", "name the graphs"), ("DROP ALL", "name the graphs"),
                         ("CLEAR NAMED", "name the graphs"), ("DROP DEFAULT", "no default graph"),
                         ('INSERT DATA { <urn:a> <urn:b> "c" }', "write into named graphs"),
                         ("INSERT { <urn:a> <urn:b> ?o } WHERE { ?s ?p ?o }", "write into named graphs")):
        answer = update(hub.http, hub, text)
        assert answer.status_code == 400 and reason in answer.text, (text, answer.text)
    # GRAPH ?g: every graph the party may write where the pattern matches ...
    answer = update(hub.http, hub, "DELETE WHERE { GRAPH ?g { <urn:s> ?p ?o } }")
    assert sorted(p["graph"] for p in answer.json()["patches"]) == [V, W]
    assert content(hub, W) == {'<urn:t> <urn:p> "w" .'} and content(hub, V) == set()
    # ... and a party that may read V but write only W: refused as a whole, nothing written
    put(hub, V, '<urn:t> <urn:p> "v" .')
    body = {"iri": "urn:c:writes-w", "requiresGroup": ["partner"], "writeGraph": [W], "readGraph": [V]}
    assert hub.http.post(f"{hub.url}/admin/conditions", json=body, timeout=30).status_code == 201
    partner = hub.session(hub.token("partner", ("partner",), ("graphs:read", "graphs:write")))
    refused = update(partner, hub, "DELETE WHERE { GRAPH ?g { <urn:t> ?p ?o } }")
    assert refused.status_code == 403 and V in refused.text
    assert content(hub, W) == {'<urn:t> <urn:p> "w" .'} and content(hub, V) == {'<urn:t> <urn:p> "v" .'}
    assert_consistent(hub.runtime)


def test_an_update_of_two_graphs_is_two_patches_published_together(hub: RunningHub) -> None:
    put(hub, W, "<urn:a> <urn:p> 1 .")
    answer = update(hub.http, hub, f"DELETE {{ GRAPH <{W}> {{ ?s ?p ?o }} }} INSERT {{ GRAPH <{V}> {{ ?s ?p ?o }} }} "
                                   f"WHERE {{ GRAPH <{W}> {{ ?s ?p ?o }} }}")
    patches = answer.json()["patches"]
    assert [(p["graph"], p["removed"], p["added"]) for p in patches] == [(V, 0, 1), (W, 1, 0)]
    assert content(hub, V) == {f'<urn:a> <urn:p> "1"^^<{XSD}integer> .'} and content(hub, W) == set()
    moved = update(hub.http, hub, f"MOVE <{V}> TO <{W}>")
    assert moved.status_code == 200 and content(hub, W) == {f'<urn:a> <urn:p> "1"^^<{XSD}integer> .'}
    assert_consistent(hub.runtime)


def test_updates_change_blank_node_structures_by_whole_msgs(hub: RunningHub) -> None:
    put(hub, W, '<urn:order> <urn:line> [ <urn:qty> "01"^^<http://www.w3.org/2001/XMLSchema#integer> ; '
                '<urn:item> <urn:x> ] .')
    # change one triple inside the blank-node structure: the MSG is replaced, lexical forms kept
    answer = update(hub.http, hub, f"DELETE {{ GRAPH <{W}> {{ ?l <urn:item> <urn:x> }} }} "
                                   f"INSERT {{ GRAPH <{W}> {{ ?l <urn:item> <urn:y> }} }} "
                                   f"WHERE {{ GRAPH <{W}> {{ <urn:order> <urn:line> ?l }} }}")
    assert answer.status_code == 200, answer.text
    assert (answer.json()["patches"][0]["removed"], answer.json()["patches"][0]["added"]) == (1, 1)
    text = "\n".join(sorted(content(hub, W)))
    assert '"01"^^<http://www.w3.org/2001/XMLSchema#integer>' in text and "<urn:y>" in text and "<urn:x>" not in text
    # a numeric FILTER compares values, the lexical form stays as written
    raised = update(hub.http, hub, f"DELETE {{ GRAPH <{W}> {{ ?l <urn:qty> ?q }} }} INSERT {{ GRAPH <{W}> {{ ?l "
                                   f"<urn:qty> 2 }} }} WHERE {{ GRAPH <{W}> {{ ?l <urn:qty> ?q FILTER(?q = 1) }} }}")
    assert raised.json()["patches"][0]["added"] == 1
    assert f'"2"^^<{XSD}integer>' in "\n".join(content(hub, W))
    assert_consistent(hub.runtime)


def test_a_large_insert_data_is_one_patch(hub: RunningHub) -> None:
    triples = " ".join(f'<urn:s{i}> <urn:p> "v{i}" .' for i in range(4000))
    answer = update(hub.http, hub, f"INSERT DATA {{ GRAPH <{W}> {{ {triples} }} }}")
    assert answer.status_code == 200 and answer.json()["patches"][0]["added"] == 4000, answer.text[:300]


def test_updates_and_queries_longer_than_their_limits_are_413(tmp_path: Path) -> None:
    env = {"LUCID_MAX_UPDATE_BYTES": "1000", "LUCID_MAX_QUERY_BYTES": "500"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'l.db'}", env) as hub:
        too_big = update(hub.http, hub, "#" * 1001)
        assert too_big.status_code == 413 and "LUCID_MAX_UPDATE_BYTES" in too_big.text
        form = hub.http.post(f"{hub.url}/sparql", data={"query": "#" * 501}, timeout=30)
        assert form.status_code == 413 and "LUCID_MAX_QUERY_BYTES" in form.text


def test_an_update_whose_prefixes_expand_its_data_past_the_limit_is_413_and_writes_nothing(tmp_path: Path) -> None:
    """A 900-byte update (under its 1,000-byte limit) whose prefix makes each of 30 statements
    1,200 bytes long: what its DATA blocks parse into is bounded too (4x the limit)."""
    env = {"LUCID_MAX_UPDATE_BYTES": "1000"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'l.db'}", env) as hub:
        prefix = "PREFIX p: <http://example.org/" + "n" * 400 + "#> "
        statements = " ".join(f"p:s p:p p:o{i} ." for i in range(30))
        text = prefix + f"INSERT DATA {{ GRAPH <{W}> {{ {statements} }} }}"
        assert len(text) < 1000
        answer = update(hub.http, hub, text)
        assert answer.status_code == 413, answer.text
        assert "LUCID_MAX_UPDATE_BYTES" in answer.text and "parse into more than 4,000 bytes" in answer.text
        assert W not in [g.iri for g in hub.runtime.archive.graphs()]
        small = prefix + f"INSERT DATA {{ GRAPH <{W}> {{ p:s p:p p:o1 . }} }}"
        assert update(hub.http, hub, small).status_code == 200


# --- the time limit -----------------------------------------------------------------------------

@pytest.fixture
def limited_hub(tmp_path: Path) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'q.db'}", {"LUCID_SPARQL_TIMEOUT": "2"}) as hub:
        put(hub, W, " ".join(f"<urn:s{i}> <urn:p> {i} ." for i in range(300)))
        yield hub


HEAVY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"


def _busy_pids(hub: RunningHub) -> set[int]:
    return {w.proc.pid for w in hub.runtime.sparql._workers if w is not None and w.alive()}


def test_a_query_over_the_time_limit_is_stopped_even_when_its_client_has_gone(limited_hub: RunningHub) -> None:
    hub = limited_hub
    with pytest.raises(requests.Timeout):  # the client gives up after 0.5 s
        hub.http.get(f"{hub.url}/sparql", params={"query": HEAVY}, timeout=0.5)
    wait_until(lambda: bool(_busy_pids(hub)), 10, "the query's worker")
    running = _busy_pids(hub)
    wait_until(lambda: not any(_alive(pid) for pid in running), 15, "the worker to be stopped at the limit")
    answer = hub.http.get(f"{hub.url}/sparql", params={"query": HEAVY}, timeout=30)
    assert answer.status_code == 422 and "time limit of 2 s (LUCID_SPARQL_TIMEOUT)" in answer.text
    quick = select(hub.http, hub, f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{W}> {{ ?s ?p ?o }} }}")
    assert quick == [{"n": "300"}]  # a new worker answers the next request


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has stopped working: it only waits to be reaped
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_hostile_query_text_gets_a_4xx_and_the_hub_stays_up(limited_hub: RunningHub) -> None:
    hub = limited_hub
    nested = "SELECT * WHERE " + "{ " * 5000 + "?s ?p ?o" + " }" * 5000
    paths = "SELECT * WHERE { ?s " + "(" * 500 + "<urn:p>" + ")/<urn:p>" * 500 + " ?o }"
    for query in (nested, paths):
        answer = hub.http.post(f"{hub.url}/sparql", data=query, headers={"Content-Type": "application/sparql-query"},
                               timeout=60)
        assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:200])
        assert hub.http.get(f"{hub.url}/healthz", timeout=10).status_code == 200
    assert hub.http.get(f"{hub.url}/sparql", params={"query": "ASK { ?s ?p ?o }"}, timeout=30).json()["boolean"]


# --- 11. the protocol, as clients use it -------------------------------------------------------

def test_protocol_parameters_and_their_misuse(hub: RunningHub) -> None:
    put(hub, W, '<urn:s> <urn:v> "w" .')
    put(hub, V, '<urn:s> <urn:v> "v" .')
    query = "SELECT ?v WHERE { ?s <urn:v> ?v }"
    assert sorted(b["v"] for b in select(hub.http, hub, query)) == ["v", "w"]
    assert select(hub.http, hub, query, **{"default-graph-uri": W}) == [{"v": "w"}]
    named = select(hub.http, hub, "SELECT ?g WHERE { GRAPH ?g { ?s ?p ?o } }", **{"named-graph-uri": V})
    assert named == [{"g": V}]

    def refused(answer: requests.Response, reason: str) -> None:
        assert answer.status_code == 400 and reason in answer.text, answer.text

    refused(hub.http.get(f"{hub.url}/sparql?query=ASK%7B%7D&query=ASK%7B%7D", timeout=30), "2 times")
    refused(hub.http.post(f"{hub.url}/sparql", data={"query": "ASK {}", "update": "CLEAR GRAPH <urn:x>"},
                          timeout=30), "not both")
    refused(update(hub.http, hub, f"WITH <{W}> INSERT {{ ?s <urn:q> 1 }} WHERE {{ ?s ?p ?o }}",
                   **{"using-graph-uri": V}), "§2.2.3")
    refused(hub.http.get(f"{hub.url}/sparql", params={"update": "CLEAR GRAPH <urn:x>"}, timeout=30), "POST")
    refused(hub.http.get(f"{hub.url}/sparql", params={"query": query, "default-graph-uri": "not an iri"},
                         timeout=30), "absolute IRI")
    # using-graph-uri works as USING for an update without one
    used = update(hub.http, hub, f"INSERT {{ GRAPH <{W}> {{ ?s <urn:copy> ?v }} }} WHERE {{ ?s <urn:v> ?v }}",
                  **{"using-graph-uri": V})
    assert used.status_code == 200 and '<urn:s> <urn:copy> "v" .' in content(hub, W)


@pytest.mark.parametrize(("accept", "media_type", "check"), [
    ("application/sparql-results+xml", "application/sparql-results+xml", "<sparql"),
    ("text/csv", "text/csv", "v\r\n"),
    ("text/tab-separated-values", "text/tab-separated-values", "?v"),
    ("application/sparql-results+json;charset=utf-8", "application/sparql-results+json", '"vars"'),
    ("application/json", "application/sparql-results+json", '"vars"'),  # as SEPA's clients ask
])
def test_select_results_in_every_format(hub: RunningHub, accept: str, media_type: str, check: str) -> None:
    put(hub, W, '<urn:s> <urn:v> "w" .')
    answer = hub.http.get(f"{hub.url}/sparql", params={"query": "SELECT ?v WHERE { ?s <urn:v> ?v }"},
                          headers={"Accept": accept}, timeout=30)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith(media_type)
    assert check in answer.text and answer.headers["Vary"] == "Accept"
    png = hub.http.get(f"{hub.url}/sparql", params={"query": "SELECT ?v WHERE { ?s <urn:v> ?v }"},
                       headers={"Accept": "image/png"}, timeout=30)
    assert png.status_code == 406


@pytest.mark.parametrize(("accept", "fmt"), [("text/turtle", ox.RdfFormat.TURTLE),
                                             ("application/rdf+xml", ox.RdfFormat.RDF_XML),
                                             ("application/ld+json", ox.RdfFormat.JSON_LD),
                                             ("application/json", ox.RdfFormat.JSON_LD),
                                             ("application/n-triples", ox.RdfFormat.N_TRIPLES)])
def test_construct_in_every_rdf_syntax(hub: RunningHub, accept: str, fmt: ox.RdfFormat) -> None:
    put(hub, W, f'<urn:s> <urn:n> "01"^^<{XSD}integer> , "1.50"^^<{XSD}decimal> , "x"@en .')
    answer = hub.http.get(f"{hub.url}/sparql", params={"query": "CONSTRUCT WHERE { ?s ?p ?o }"},
                          headers={"Accept": accept}, timeout=30)
    expected = "application/ld+json" if accept == "application/json" else accept  # plain JSON: JSON-LD
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith(expected)
    objects = {str(q.object) for q in ox.parse(answer.content, format=fmt)}
    # query results carry values in their canonical form; the graph keeps what was published
    assert objects == {f'"1"^^<{XSD}integer>', f'"1.5"^^<{XSD}decimal>', '"x"@en'}
    assert f'"01"^^<{XSD}integer>' in "\n".join(content(hub, W))


def test_queries_compare_typed_literals_by_value_whatever_their_lexical_form(hub: RunningHub) -> None:
    """FILTER, ORDER BY and joins see values: "19.90" is more than 10, "01" equals 1. (The
    store used to keep typed literals under a datatype namespace of its own: no numeric
    FILTER matched at all.)"""
    put(hub, W, f'<urn:a> <urn:price> "19.90"^^<{XSD}decimal> ; <urn:qty> "01"^^<{XSD}integer> . '
                f'<urn:b> <urn:price> "7.5"^^<{XSD}decimal> ; <urn:qty> "3"^^<{XSD}integer> . '
                f'<urn:c> <urn:price> "100.00"^^<{XSD}decimal> ; <urn:qty> "+2"^^<{XSD}integer> ; '
                f'<urn:at> "2026-01-15T09:30:00.000Z"^^<{XSD}dateTime> .')
    dear = select(hub.http, hub, "SELECT ?s WHERE { ?s <urn:price> ?p FILTER(?p > 10) } ORDER BY DESC(?p)")
    assert [b["s"] for b in dear] == ["urn:c", "urn:a"]
    assert select(hub.http, hub, "SELECT ?s WHERE { ?s <urn:qty> 1 }") == [{"s": "urn:a"}]
    total = select(hub.http, hub, "SELECT (SUM(?q) AS ?n) WHERE { ?s <urn:qty> ?q }")
    assert float(total[0]["n"]) == 6
    assert select(hub.http, hub, f'SELECT ?s WHERE {{ ?s <urn:at> ?t FILTER(?t < "2026-02-01T00:00:00Z"^^<{XSD}dateTime>) }}') == [{"s": "urn:c"}]
    # and the graph still holds every literal exactly as published
    held = "\n".join(content(hub, W))
    for form in ('"19.90"', '"01"', '"100.00"', '"+2"', '"2026-01-15T09:30:00.000Z"'):
        assert form in held, form


def test_sparqlwrapper_and_rdflib_sparqlstore_work_unchanged(hub: RunningHub) -> None:
    import rdflib
    from rdflib.plugins.stores.sparqlstore import SPARQLStore, SPARQLUpdateStore
    from SPARQLWrapper import CSV, JSON, XML, SPARQLWrapper

    put(hub, W, '<urn:s> <urn:v> "w" .')
    put(hub, V, '<urn:s> <urn:v> "v" .')
    bearer = hub.http.headers["Authorization"]
    wrapper = SPARQLWrapper(f"{hub.url}/sparql")
    wrapper.addCustomHttpHeader("Authorization", bearer)
    wrapper.setQuery("SELECT ?v WHERE { ?s <urn:v> ?v } ORDER BY ?v")
    for fmt in (JSON, XML, CSV):
        wrapper.setReturnFormat(fmt)
        result = wrapper.query().convert()
        assert result is not None
    wrapper.setReturnFormat(JSON)
    assert [b["v"]["value"] for b in wrapper.queryAndConvert()["results"]["bindings"]] == ["v", "w"]
    wrapper.setQuery("CONSTRUCT WHERE { ?s ?p ?o }")
    wrapper.setReturnFormat(XML)  # SPARQLWrapper's default for CONSTRUCT: RDF/XML, parsed by rdflib
    assert len(wrapper.queryAndConvert()) == 2
    # rdflib's SPARQLStore: a Graph named W sends default-graph-uri=W and sees only W
    store = SPARQLStore(f"{hub.url}/sparql", headers={"Authorization": bearer}, returnFormat="json")
    only_w = rdflib.Graph(store, identifier=rdflib.URIRef(W))
    assert [str(row.v) for row in only_w.query("SELECT ?v WHERE { ?s <urn:v> ?v }")] == ["w"]
    assert {str(o) for o in only_w.objects()} == {"w"}
    # and its update store writes through SPARQL Update
    writer = SPARQLUpdateStore(f"{hub.url}/sparql", f"{hub.url}/sparql", headers={"Authorization": bearer})
    graph = rdflib.Graph(writer, identifier=rdflib.URIRef(W))
    graph.add((rdflib.URIRef("urn:added"), rdflib.URIRef("urn:v"), rdflib.Literal("by rdflib")))
    assert '<urn:added> <urn:v> "by rdflib" .' in content(hub, W)
    assert_consistent(hub.runtime)


def test_relative_iris_resolve_against_the_service_and_client_mistakes_are_never_5xx(hub: RunningHub,
                                                                                    caplog: Any) -> None:
    """SPARQL 1.1 Query §4.1.1.1: relative IRIs resolve against a base the service supplies,
    its own URL (/sparql). What an update's evaluation makes of a client's text that is not
    RDF (an IRI with a space, a bad language tag, a lone surrogate) is a 4xx, not the worker's
    failure; and IRI() in an update's WHERE resolves against the same base."""
    import logging

    built = hub.http.get(f"{hub.url}/sparql", params={"query": "CONSTRUCT { <s> <p> 1 } WHERE {}"},
                         headers={"Accept": "application/n-triples"})
    assert built.status_code == 200, built.text
    assert built.text.startswith(f"<{hub.url}/s> <{hub.url}/p> ")
    inserted = update(hub.http, hub, f"INSERT DATA {{ GRAPH <{W}> {{ <urn:s> <urn:p> <test> }} }}")
    assert inserted.status_code == 200, inserted.text
    assert content(hub, W) == {f"<urn:s> <urn:p> <{hub.url}/test> ."}
    subscribed = hub.http.post(f"{hub.url}/subscriptions", json={"sparql": "SELECT ?s WHERE { GRAPH ?g { ?s ?p <test> } }"})
    assert subscribed.status_code == 201, subscribed.text  # a continuous query resolves against the same base
    assert subscribed.json()["notification"]["addedResults"]["results"]["bindings"] == [
        {"s": {"type": "uri", "value": "urn:s"}}]
    made = update(hub.http, hub, f'INSERT {{ GRAPH <{W}> {{ <urn:s> <urn:q> ?o }} }} WHERE {{ BIND(IRI("x/y") AS ?o) }}')
    assert made.status_code == 200, made.text
    assert f"<urn:s> <urn:q> <{hub.url}/x/y> ." in content(hub, W)
    with caplog.at_level(logging.ERROR, logger="lucid_hub"):
        for text in (f'INSERT {{ GRAPH <{W}> {{ <urn:s> <urn:p> ?o }} }} WHERE {{ BIND(IRI("a b") AS ?o) }}',
                     f'INSERT {{ GRAPH <{W}> {{ <urn:s> <urn:p> ?o }} }} WHERE {{ BIND(STRLANG("x", "-x-") AS ?o) }}',
                     f'INSERT DATA {{ GRAPH <{W}> {{ <urn:s> <urn:p> "\\uD800" }} }}'):
            answer = update(hub.http, hub, text)
            assert answer.status_code == 400 and "could not be evaluated" in answer.text, (text, answer.text)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert_consistent(hub.runtime)


def test_comunica_reads_with_http_basic_by_get_and_by_post(hub: RunningHub, rdf_js_clients: Path) -> None:
    """Comunica sends a long query by POST (with the credentials it sent a short one with by
    GET): a query is a read whatever its method, so HTTP Basic is accepted for it. An update
    by POST with HTTP Basic is still refused: only reads take Basic."""
    from tests.conftest import run_node

    put(hub, W, " ".join(f"<urn:s{i}> <urn:p> {i} ." for i in range(5)))
    record, secret = hub.client("comunica", ("lucid-hub-admins",), ("graphs:read", "graphs:write"))
    short = f"SELECT ?o WHERE {{ GRAPH <{W}> {{ ?s <urn:p> ?o }} }}"
    long = short.replace("WHERE {", "WHERE { # " + "x" * 3000 + "\n")  # over Comunica's GET limit
    for query in (short, long):
        rows = run_node(rdf_js_clients, "comunica_select.js", "sparql", f"{hub.url}/sparql", query,
                        f"{record.client_id}:{secret}")
        assert sorted(int(r["o"]) for r in rows) == list(range(5)), query[:40]
    posted = requests.post(f"{hub.url}/sparql", data={"query": long}, auth=(record.client_id, secret), timeout=30)
    assert posted.status_code == 200 and len(posted.json()["results"]["bindings"]) == 5
    anonymous = requests.post(f"{hub.url}/sparql", data={"query": short}, timeout=30)
    assert anonymous.status_code == 401 and "Basic" in anonymous.headers["WWW-Authenticate"]
    written = requests.post(f"{hub.url}/sparql", data=f"INSERT DATA {{ GRAPH <{W}> {{ <urn:x> <urn:p> 9 }} }}",
                            headers={"Content-Type": "application/sparql-update"}, auth=(record.client_id, secret),
                            timeout=30)
    assert written.status_code == 401 and "only reads" in written.text
    assert len(content(hub, W)) == 5
