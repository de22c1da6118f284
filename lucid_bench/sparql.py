"""`lucid-hub bench sparql`: what the guarded SPARQL endpoint costs.

A real hub runs in a child process (`lucid-hub serve`). Queries go over HTTP to /sparql,
where each runs in a guard process on a snapshot of the store (store/sparql.py); the
baseline is the same query on an in-process pyoxigraph store holding the same data, on
disk as the hub's is, in the same run. Updates are INSERT DATA of N triples over HTTP;
their baseline is the path of the previous release, rdflib's parseUpdate + translateUpdate
of the same text in this process (whose time grows with the square of N), and the floor
is a POST of the same triples as N-Triples to the Graph Store endpoint.
"""

from __future__ import annotations

import http.client
import statistics
import tempfile
import time
from pathlib import Path

import click
import pyoxigraph as ox

from lucid_bench.publish import NT, _hub

GRAPH = "http://example.org/graph/bench-sparql"
QUERIES = {name: text.replace("GRAPH_IRI", GRAPH) for name, text in {
    "filter": "SELECT ?s ?v WHERE { GRAPH <GRAPH_IRI> { ?s <http://example.org/value> ?v FILTER(?v > 990) } }\n"
              "ORDER BY ?s",
    "count": "SELECT (COUNT(*) AS ?n) WHERE { GRAPH <GRAPH_IRI> { ?s ?p ?o } }",
    "ask": "ASK { GRAPH <GRAPH_IRI> { <http://example.org/kpi/7> ?p ?o } }",
}.items()}


def _data(triples: int) -> bytes:
    lines = []
    for i in range(triples // 2):
        lines.append(f'<http://example.org/kpi/{i}> <http://example.org/value> "{i % 1000}.50"'
                     f'^^<http://www.w3.org/2001/XMLSchema#decimal> .\n')
        lines.append(f'<http://example.org/kpi/{i}> <http://example.org/label> "KPI {i}" .\n')
    return "".join(lines).encode()


def _insert(n: int, offset: int) -> str:
    rows = "\n".join(f'<http://example.org/new/{offset + i}> <http://example.org/value> "{i}.25"'
                     f'^^<http://www.w3.org/2001/XMLSchema#decimal> .' for i in range(n))
    return f"INSERT DATA {{ GRAPH <{GRAPH}> {{\n{rows}\n}} }}"


def _request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes,
             content_type: str, accept: str = "*/*") -> bytes:
    conn.request(method, path, body=body, headers={"Content-Type": content_type, "Accept": accept,
                                                   "Authorization": NT["Authorization"]})
    response = conn.getresponse()
    text = response.read()
    if response.status >= 300:
        raise click.ClickException(f"{method} {path} failed: {response.status} {text[:300]!r}")
    return text


def _ms(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


def run(*, triples: int, queries: int, updates: list[int], baseline_limit: int) -> None:
    echo = click.echo
    data = _data(triples)
    with tempfile.TemporaryDirectory(prefix="lucid-bench-sparql-") as tmp, \
            _hub(Path(tmp) / "hub", {"LUCID_MAX_UPDATE_BYTES": str(1024**3)}) as url:
        local = ox.Store(str(Path(tmp) / "baseline"))  # on disk, as the hub's store is
        local.load(data, format=ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode(GRAPH))
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        _request(conn, "PUT", f"/graphs?graph={GRAPH}", data, "application/n-triples")
        echo(f"== queries over HTTP on a graph of {triples:,} triples ({queries} each, one client)")
        for name, query in QUERIES.items():
            hub, direct = [], []
            for _ in range(queries):
                start = time.perf_counter()
                _request(conn, "POST", "/sparql", query.encode(), "application/sparql-query",
                         "application/sparql-results+json")
                hub.append(time.perf_counter() - start)
                start = time.perf_counter()
                result = local.query(query)
                assert not isinstance(result, ox.QueryTriples)  # (SELECT and ASK only)
                result.serialize(format=ox.QueryResultsFormat.JSON)
                direct.append(time.perf_counter() - start)
            h50, h99 = _ms(hub)
            d50, _ = _ms(direct)
            echo(f"  {name:6} hub p50 {h50:7.2f} ms, p99 {h99:7.2f} ms; in-process pyoxigraph p50 {d50:7.2f} ms "
                 f"({h50 - d50:+.2f} ms, x{h50 / d50:,.1f})")
        echo("\n== INSERT DATA over HTTP, against the previous release's rdflib translation and a Graph Store POST")
        for n in updates:
            text = _insert(n, n * 10)
            conn.close()  # a new connection: the baseline below can outlast the hub's keep-alive
            start = time.perf_counter()
            _request(conn, "POST", "/sparql", text.encode(), "application/sparql-update")
            hub_s = time.perf_counter() - start
            floor = "".join(f'<http://example.org/floor/{n}-{i}> <http://example.org/value> "{i}.25"'
                            f'^^<http://www.w3.org/2001/XMLSchema#decimal> .\n' for i in range(n)).encode()
            start = time.perf_counter()
            _request(conn, "POST", f"/graphs?graph={GRAPH}", floor, "application/n-triples")
            floor_s = time.perf_counter() - start
            line = f"  {n:6,} triples: hub {hub_s:6.2f} s, Graph Store POST {floor_s:6.2f} s (x{hub_s / floor_s:.1f})"
            if n <= baseline_limit:
                from rdflib.plugins.sparql.algebra import translateUpdate
                from rdflib.plugins.sparql.parser import parseUpdate

                start = time.perf_counter()
                translateUpdate(parseUpdate(text))
                old_s = time.perf_counter() - start
                line += f", previous release's translation alone {old_s:6.2f} s (hub x{hub_s / old_s:.2f} of it)"
            echo(line)
        conn.close()
