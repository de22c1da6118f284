"""C-SPARQL as its users write it (the Streaming Linked Data paper's own listings, copied
from shared/seeds/003), triple windows, windows whose default graph holds the stream's
triples, and the results as Linked Data: the s-graph, one i-graph per evaluation (RDF by
content negotiation, HTML for browsers) and an LDES that the reference client harvests."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from rdflib import Dataset, Graph, Literal, Namespace, URIRef
from rdflib.namespace import RDFS

from lucid_hub.errors import InputError
from lucid_hub.queries import csparql
from lucid_hub.queries.windows import GRACE
from tests.conftest import RunningHub, running_hub
from tests.queries.test_queries import put
from tests.streams.test_streams import ldes_client  # noqa: F401 (a session fixture)

SLD = Namespace("http://www.streaminglinkeddata.org/schema#")
RS = Namespace("http://www.w3.org/2001/sw/DataAccess/tests/result-set#")
EX = "http://example/"
BROKERS = "http://brokerscentral.org/brokers.rdf"
MARKET = "http://stockex.org/market.trdf"

# Listing 1 of the paper, as printed (its spacing too: "1 h", "10 m").
LISTING_1 = """REGISTER STREAM TotalAmountPerBroker COMPUTE EVERY 10 m AS
PREFIX ex: <http://example/>
CONSTRUCT {?broker ex:hasTotalAmount ?total .}
FROM <http://brokerscentral.org/brokers.rdf>
FROM STREAM <http://stockex.org/market.trdf>
[RANGE 1 h STEP 10 m] WHERE {
?broker ex:from ?country .
?broker ex:does ?tx .
?tx ex:with ?amount .
FILTER (?country = "CH")
}
AGGREGATE { (?total, SUM(?amount), ?broker) }"""

# Section 4: the query a window IRI such as /transactions/logical/PT1H/PT10M stands for.
SECTION_4 = """REGISTER STREAM transactions COMPUTE EVERY 10 m AS
PREFIX : <http://example/>
CONSTRUCT *
FROM STREAM <http://stockex.org/market.trdf>
[RANGE 1 h STEP 10 m]
WHERE { ?s ?p ?o . }"""

BROKERS_NT = (f'<{EX}broker1> <{EX}from> "CH" .\n<{EX}broker2> <{EX}from> "CH" .\n'
              f'<{EX}broker3> <{EX}from> "IT" .\n')


def trade(tx: str, broker: str, amount: int) -> str:
    return f"<{EX}{broker}> <{EX}does> <{EX}{tx}> .\n<{EX}{tx}> <{EX}with> {amount} .\n"


# --- the text, read ------------------------------------------------------------------------

def test_the_papers_listing_reads_as_a_stream_a_window_a_static_graph_and_an_aggregate() -> None:
    found = csparql.parse(LISTING_1)
    assert (found.name, found.kind, found.streams, found.static) == ("TotalAmountPerBroker", "stream", [MARKET],
                                                                    [BROKERS])
    assert (found.range_spec, found.step_spec) == ("1h", "10m")
    assert "FROM" not in found.sparql and "AGGREGATE" not in found.sparql
    assert "(SUM(?amount) AS ?total)" in found.sparql and "GROUP BY ?broker" in found.sparql
    section = csparql.parse(SECTION_4)
    assert section.sparql.split("CONSTRUCT")[1].split()[0] == "WHERE"  # CONSTRUCT * is CONSTRUCT WHERE
    tumbling = csparql.parse("REGISTER QUERY q AS SELECT * FROM STREAM <http://g> [RANGE 5m TUMBLING] "
                             "WHERE { ?s ?p ?o }")
    assert (tumbling.range_spec, tumbling.step_spec) == ("5m", "5m")
    triples = csparql.parse("REGISTER QUERY q COMPUTED EVERY 30s AS SELECT * FROM STREAM <http://g> "
                            "[RANGE TRIPLES 1000] WHERE { ?s ?p ?o }")
    assert (triples.range_spec, triples.step_spec) == ("1000 triples", "30s")
    # a FROM inside a string or a comment is not a clause
    quoted = csparql.parse('REGISTER QUERY q AS SELECT * FROM STREAM <http://g> [RANGE 1h STEP 1h] # FROM <http://x>\n'
                           'WHERE { ?s ?p "FROM <http://y>" }')
    assert quoted.static == [] and 'FROM <http://y>' in quoted.sparql


@pytest.mark.parametrize("text, says", [
    ("SELECT * WHERE { ?s ?p ?o }", "REGISTER QUERY"),
    ("REGISTER QUERY q AS SELECT * WHERE { ?s ?p ?o }", "at least one stream"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <http://g> WHERE { ?s ?p ?o }", "needs its window"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <http://g> [RANGE 1 fortnight] WHERE { ?s ?p ?o }", "is not RANGE"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <http://g> [RANGE 1h STEP 10m WHERE { ?s ?p ?o }", "not closed"),
    ("REGISTER QUERY q COMPUTED EVERY 5m AS SELECT * FROM STREAM <http://g> [RANGE 1h STEP 10m] WHERE { ?s ?p ?o }",
     "differs from the window's STEP"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <http://a> [RANGE 1h STEP 10m] FROM STREAM <http://b> "
     "[RANGE 2h STEP 10m] WHERE { ?s ?p ?o }", "share one window"),
    ("REGISTER STREAM q AS SELECT * FROM STREAM <http://g> [RANGE 1h STEP 10m] WHERE { ?s ?p ?o }",
     "REGISTER STREAM makes an RDF stream"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM ex:g [RANGE 1h STEP 10m] WHERE { ?s ?p ?o }", "angle brackets"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <http://g> [RANGE 1h STEP 10m] WHERE { ?s ?p ?o } AGGREGATE "
     "{ (SUM(?o)) }", "AGGREGATE tuple"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <http://g> [RANGE 1h STEP 10m] WHERE { ?s ?p ?o } AGGREGATE "
     "{ (?t, SUM(?o) }", "not closed"),
])
def test_malformed_registrations_are_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        csparql.parse(text)


def test_every_cut_of_the_papers_listing_is_read_or_refused_with_a_reason() -> None:
    """A hostile or broken client's text, cut anywhere (unclosed windows, tuples, braces):
    the reader answers with what it read or an InputError, never anything else."""
    for text in (LISTING_1, SECTION_4):
        for end in range(len(text) + 1):
            for cut in (text[:end], text[:end] + "}" * 3, text[end:]):
                with contextlib.suppress(InputError):
                    csparql.parse(cut)


# --- on a hub --------------------------------------------------------------------------------

@pytest.fixture
def market_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url) as hub:
        put(hub, BROKERS, BROKERS_NT)
        yield hub


def post(hub: RunningHub, http: Any, graph: str, nt: str) -> None:
    """A patch adding `nt` to the graph (SPARQL Update through the hub)."""
    answer = http.post(f"{hub.url}/sparql", data=f"INSERT DATA {{ GRAPH <{graph}> {{ {nt} }} }}".encode(),
                       headers={"Content-Type": "application/sparql-update"})
    assert answer.status_code == 200, answer.text


def replicate_members(script: Path, url: str, credentials: str) -> dict[str, str]:
    """The members ldes-client emits harvesting `url`: each one's IRI and its quads."""
    done = subprocess.run(["node", str(script), url, credentials], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {json.loads(line)["id"]: json.loads(line)["quads"] for line in done.stdout.splitlines()}


def evaluate_at(hub: RunningHub, end: str) -> int:
    """Evaluate the windows ending at `end` (the service's clock moved past it, not waited for);
    how many windows gave a new element. Counted from the windows' sequences, not from what this
    call evaluated: the hub's own role (`windowed-queries`) may evaluate some of them on the moved
    clock first (under CI load it did, and this call then counted fewer)."""
    windows = hub.runtime.windows

    def sequences() -> dict[str, int]:
        rows = {ident: windows.records.active(ident) for ident in windows.records.active_ids()}
        return {ident: row.sequence for ident, row in rows.items() if row is not None}

    before = sequences()
    real = windows.clock
    try:
        windows.clock = lambda: datetime.fromisoformat(end).timestamp() + GRACE + 0.5
        windows.evaluate_due()  # (after a round of the role under way: both take the service's lock)
    finally:
        windows.clock = real
    return sum(1 for ident, sequence in sequences().items() if sequence > before.get(ident, sequence))


def test_the_papers_query_registered_as_written_totals_swiss_brokers(market_hub: RunningHub) -> None:
    hub = market_hub
    created = hub.http.put(f"{hub.url}/windows/TotalAmountPerBroker", data=LISTING_1,
                           headers={"Content-Type": "text/plain"})
    assert created.status_code == 201, created.text
    described = created.json()
    assert (described["view"], described["range"], described["step"]) == ("triples", "1h", "10m")
    assert described["graphs"] == [MARKET] and described["static"]["default"] == [BROKERS]
    assert described["csparql"] == LISTING_1
    post(hub, hub.http, MARKET, trade("tr1", "broker1", 1000))
    post(hub, hub.http, MARKET, trade("tr2", "broker1", 3000) + trade("tr3", "broker2", 2000))
    post(hub, hub.http, MARKET, trade("tr4", "broker3", 7000))  # an Italian broker: filtered out
    assert evaluate_at(hub, described["nextWindowEnd"]) == 1
    [element] = hub.http.get(f"{hub.url}/windows/TotalAmountPerBroker/results").json()["results"]
    totals = {(b["subject"]["value"], b["object"]["value"]) for b in element["results"]["results"]["bindings"]}
    assert totals == {(f"{EX}broker1", "4000"), (f"{EX}broker2", "2000")}
    replayed = hub.http.get(f"{hub.url}/windows/TotalAmountPerBroker/results/0/replay").json()
    assert replayed == element
    # the section 4 query, sent as the form field rsp-services takes, mirrors the window's triples
    form = hub.http.post(f"{hub.url}/windows", data={"query": SECTION_4})
    assert form.status_code == 201, form.text
    post(hub, hub.http, MARKET, trade("tr5", "broker2", 500))
    assert evaluate_at(hub, form.json()["nextWindowEnd"]) >= 1
    [mirrored] = hub.http.get(f"{hub.url}/windows/transactions/results").json()["results"]
    assert len(mirrored["results"]["results"]["bindings"]) == 10  # every trade's 2 triples, within the hour


def test_a_triple_window_holds_the_last_n_triples_at_every_patch(market_hub: RunningHub) -> None:
    hub = market_hub
    text = ("REGISTER QUERY lastThree AS PREFIX ex: <http://example/> SELECT (COUNT(*) AS ?n) (SUM(?a) AS ?sum) "
            f"FROM STREAM <{hub.url}/streams?graph={requests.utils.quote(MARKET, safe='')}> [RANGE TRIPLES 3] "
            "WHERE { ?tx ex:with ?a }")
    created = hub.http.post(f"{hub.url}/windows", data=text, headers={"Content-Type": "application/sparql-query"})
    assert created.status_code == 201, created.text
    assert created.json()["graphs"] == [MARKET]  # the stream's URL names the graph
    for n, amount in enumerate((10, 20, 30, 40), start=1):
        post(hub, hub.http, MARKET, f"<{EX}t{n}> <{EX}with> {amount} .")
        hub.runtime.windows.evaluate_due()
    post(hub, hub.http, MARKET, f"<{EX}t5> <{EX}with> 50 . <{EX}t6> <{EX}with> 60 .")  # two triples in one patch
    hub.runtime.windows.evaluate_due()
    found = hub.http.get(f"{hub.url}/windows/lastThree/results").json()["results"]
    held = [(e["triples"], e["results"]["results"]["bindings"][0]["sum"]["value"]) for e in found]
    assert held == [(1, "10"), (2, "30"), (3, "60"), (3, "90"), (3, "150")]
    assert [len(e["patches"]) for e in found] == [1, 2, 3, 3, 2]  # the patches the triples came from
    for element in found:
        again = hub.http.get(f"{hub.url}/windows/lastThree/results/{element['sequence']}/replay").json()
        assert again == element


def test_a_json_window_may_see_triples_and_join_a_static_graph(market_hub: RunningHub) -> None:
    hub = market_hub
    query = (f"PREFIX ex: <{EX}> SELECT ?broker (SUM(?a) AS ?t) WHERE {{ ?broker ex:from \"CH\" ; ex:does ?tx . "
             "?tx ex:with ?a } GROUP BY ?broker")
    created = hub.http.put(f"{hub.url}/windows/ch", json={"sparql": query, "graphs": [MARKET], "range": 2, "step": 2,
                                                          "view": "triples", "from": [BROKERS]})
    assert created.status_code == 201, created.text
    post(hub, hub.http, MARKET, trade("a", "broker1", 5))
    post(hub, hub.http, MARKET, trade("b", "broker3", 9))
    hub.runtime.windows.evaluate_due()
    [element] = hub.http.get(f"{hub.url}/windows/ch/results").json()["results"]
    assert [(b["broker"]["value"], b["t"]["value"]) for b in element["results"]["results"]["bindings"]] == [
        (f"{EX}broker1", "5")]
    bad = hub.http.put(f"{hub.url}/windows/v", json={"sparql": query, "graphs": [MARKET], "range": 2, "step": 2,
                                                     "view": "tables"})
    assert bad.status_code == 400 and "view must be one of" in bad.text


def test_results_are_linked_data_an_s_graph_i_graphs_and_pages(market_hub: RunningHub) -> None:
    hub = market_hub
    assert hub.http.put(f"{hub.url}/windows/TotalAmountPerBroker", data=LISTING_1,
                        headers={"Content-Type": "text/plain"}).status_code == 201
    select = hub.http.post(f"{hub.url}/windows", data=(
        "REGISTER QUERY perBroker AS PREFIX ex: <http://example/> SELECT ?broker (COUNT(?tx) AS ?n) "
        f"FROM STREAM <{MARKET}> [RANGE 1h STEP 10m] WHERE {{ ?broker ex:does ?tx }} GROUP BY ?broker"),
        headers={"Content-Type": "text/plain"})
    assert select.status_code == 201, select.text
    post(hub, hub.http, MARKET, trade("tr1", "broker1", 1000))
    assert evaluate_at(hub, select.json()["nextWindowEnd"]) >= 2
    base = f"{hub.url}/windows/TotalAmountPerBroker"
    sgraph = Graph().parse(data=hub.http.get(base, headers={"Accept": "text/turtle"}).text, format="turtle")
    s = URIRef(base)
    assert sgraph.value(s, SLD.windowType) == SLD.logicalSliding
    assert sgraph.value(s, SLD.windowSize) == Literal("PT1H", datatype=URIRef("http://www.w3.org/2001/XMLSchema#duration"))
    assert sgraph.value(s, SLD.expires) is not None and sgraph.value(s, SLD.lastUpdate) is not None
    [igraph] = list(sgraph.objects(s, RDFS.seeAlso))
    assert igraph == URIRef(f"{base}/results/0") and sgraph.value(igraph, SLD.receivedAt) is not None
    # the i-graph: a CONSTRUCT's triples, dereferenced in Turtle and TriG
    turtle = Graph().parse(data=hub.http.get(str(igraph), headers={"Accept": "text/turtle"}).text, format="turtle")
    assert (URIRef(f"{EX}broker1"), URIRef(f"{EX}hasTotalAmount"), Literal(1000)) in turtle
    assert turtle.value(igraph, RDFS.seeAlso) == s
    trig = Dataset().parse(data=hub.http.get(str(igraph), headers={"Accept": "application/trig"}).text, format="trig")
    assert (URIRef(f"{EX}broker1"), URIRef(f"{EX}hasTotalAmount"), Literal(1000)) in trig.graph(igraph)
    # a SELECT's i-graph: the result-set vocabulary
    rows = Graph().parse(data=hub.http.get(f"{hub.url}/windows/perBroker/results/0",
                                           headers={"Accept": "text/turtle"}).text, format="turtle")
    solution = rows.value(URIRef(f"{hub.url}/windows/perBroker/results/0"), RS.solution)
    values = {str(rows.value(b, RS.variable)): rows.value(b, RS.value) for b in rows.objects(solution, RS.binding)}
    assert values == {"broker": URIRef(f"{EX}broker1"), "n": Literal(1)}
    # JSON stays the default; browsers get HTML
    assert hub.http.get(f"{base}/results/0").json()["sequence"] == 0
    assert hub.http.get(base).json()["name"] == "TotalAmountPerBroker"
    page = hub.http.get(base, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.headers["Content-Type"].startswith("text/html") and "/results/0" in page.text
    table = hub.http.get(f"{hub.url}/windows/perBroker/results/0", headers={"Accept": "text/html"})
    assert f"{EX}broker1" in table.text and "<th scope=\"col\">n</th>" in table.text
    assert hub.http.get(f"{base}/results/5", headers={"Accept": "text/turtle"}).status_code == 404
    assert requests.get(base, headers={"Accept": "text/turtle"}, timeout=30).status_code == 401


def test_the_ldes_reference_client_harvests_query_results(tmp_path: Path, db_url: str,
                                                          ldes_client: Path) -> None:  # noqa: F811
    with running_hub(tmp_path / "data", db_url) as hub:
        put(hub, BROKERS, BROKERS_NT)
        record, secret = hub.client("harvester", ("lucid-hub-admins",), ("graphs:read", "graphs:write"))
        http = hub.session(str(hub.runtime.tokens.issue(record, "graphs:read graphs:write")))
        created = http.post(f"{hub.url}/windows", data=(
            "REGISTER QUERY amounts AS PREFIX ex: <http://example/> SELECT ?tx ?a "
            f"FROM STREAM <{MARKET}> [RANGE TRIPLES 2] WHERE {{ ?tx ex:with ?a }}"),
            headers={"Content-Type": "text/plain"})
        assert created.status_code == 201, created.text
        for n in range(3):
            post(hub, http, MARKET, trade(f"t{n}", "broker1", n))
            hub.runtime.windows.evaluate_due()
        members = replicate_members(ldes_client, f"{hub.url}/windows/amounts/ldes", f"{record.client_id}:{secret}")
        assert sorted(members) == [f"{hub.url}/windows/amounts/results/{n}" for n in range(3)]
        for member, quads in members.items():
            element = http.get(member).json()
            [binding] = element["results"]["results"]["bindings"]
            assert f'"{binding["a"]["value"]}"' in quads and binding["tx"]["value"] in quads


def test_bad_c_sparql_registrations_get_a_clear_4xx_and_nothing_is_kept(market_hub: RunningHub) -> None:
    hub = market_hub
    text = f"REGISTER QUERY q AS SELECT * FROM STREAM <{MARKET}> [RANGE 1h STEP 10m] WHERE {{ ?s ?p ?o }}"
    plain = {"Content-Type": "text/plain"}
    cases = [
        (hub.http.put(f"{hub.url}/windows/other", data=text, headers=plain), 400, "names must match"),
        (hub.http.post(f"{hub.url}/windows", data="REGISTER QUERY q AS", headers=plain), 400, "at least one stream"),
        (hub.http.post(f"{hub.url}/windows", data=b"\xff\xfe", headers=plain), 400, "not UTF-8"),
        (hub.http.post(f"{hub.url}/windows", json={"sparql": "SELECT"}), 400, "C-SPARQL registration"),
        (hub.http.post(f"{hub.url}/windows", data={"other": "x"}), 400, "form field query"),
        (hub.http.post(f"{hub.url}/windows", data=text.replace("?o }", "?o } " + "#" * 120_000), headers=plain), 413,
         "LUCID_MAX_QUERY_BYTES"),
        (requests.post(f"{hub.url}/windows", data=text, headers=plain, timeout=30), 401, "access token"),
        (hub.session(hub.token("stranger", groups=("nobody",))).post(f"{hub.url}/windows", data=text, headers=plain),
         403, "may not read"),
        (hub.http.post(f"{hub.url}/windows", data=text.replace("{ ?s ?p ?o }", "{ ?s ?p }"), headers=plain), 400,
         ""),
    ]
    for answer, code, says in cases:
        assert answer.status_code == code and says in answer.text, (code, answer.status_code, answer.text[:300])
    assert hub.http.get(f"{hub.url}/windows/q").status_code == 404  # nothing was kept
    assert hub.http.post(f"{hub.url}/windows", data=text, headers=plain).status_code == 201
    replayed = hub.http.post(f"{hub.url}/windows", data=text, headers=plain)
    assert replayed.status_code == 409 and "exists" in replayed.text
