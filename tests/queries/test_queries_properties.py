"""The property of continuous queries (issue 16): for generated graphs, queries of every
form the hub accepts and sequences of patches, applying each notification to the results
before it gives exactly a fresh evaluation of the query, at every step."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucid_hub.queries import results as rs

EX = "http://ex.org/"
P = f"PREFIX ex: <{EX}> "
QUERIES = [
    P + "SELECT ?s ?o WHERE { ?s ex:p0 ?o }",
    P + "SELECT ?s ?o2 WHERE { ?s ex:p0 ?o . ?o ex:p1 ?o2 }",  # join
    P + "SELECT ?s ?v WHERE { ?s ex:p0 ?x OPTIONAL { ?s ex:p2 ?v } }",
    P + "SELECT ?s ?v WHERE { ?s ex:p2 ?v FILTER(?v > 1) }",
    P + "SELECT ?s WHERE { { ?s ex:p0 ex:s1 } UNION { ?s ex:p1 ex:s2 } }",
    P + "SELECT ?s WHERE { ?s ex:p0 ?o MINUS { ?s ex:p2 ?v } }",
    P + "SELECT ?a ?b WHERE { ?a ex:p0+ ?b }",  # property path
    P + "SELECT ?s (COUNT(*) AS ?n) (SUM(?v) AS ?total) WHERE { ?s ?p ?v } GROUP BY ?s",  # aggregates
    P + "SELECT DISTINCT ?p WHERE { ?s ?p ?o }",
    P + "SELECT ?p WHERE { ?s ?p ?o }",  # duplicates: a multiset
    P + "SELECT ?s ?v WHERE { ?s ex:p2 ?v } ORDER BY DESC(?v) ?s LIMIT 2",
    P + "ASK { ?s ex:p2 3 }",
    P + "CONSTRUCT { ?o ex:inverse ?s } WHERE { ?s ex:p0 ?o }",
    P + "SELECT ?g ?s WHERE { GRAPH ?g { ?s ex:p1 ?o } }",
    P + "SELECT ?s ?l ?q WHERE { ?s ex:line ?l . ?l ex:qty ?q }",  # blank nodes
    P + "SELECT (COUNT(DISTINCT ?s) AS ?n) WHERE { ?s ?p ?o }",  # the default graph, one row always
    # conjunctive queries with constants: matched against the store (worker.py, _affected)
    P + "SELECT ?s ?o WHERE { ?s ex:p0 ?o . ?s ex:p1 ex:s2 }",
    P + "SELECT ?s ?v ?o WHERE { ?s ex:p1 ex:s1 OPTIONAL { ?s ex:p2 ?v . ?s ex:p0 ?o } }",
    P + "SELECT ?s (COUNT(?o) AS ?n) WHERE { ?s ex:p0 ?o . ?o ex:p1 ex:s3 } GROUP BY ?s",
    P + "SELECT ?s ?q WHERE { ?s ex:line [ ex:qty ?q ] . ?s ex:p0 ex:s0 FILTER(?q > 0) }",
    P + "ASK { ex:s0 ex:p0 ?o . ?o ex:p2 2 }",
    P + "SELECT ?s ?t WHERE { ?s ex:p0 ex:s1 BIND(STR(?s) AS ?t) ?s ex:p1 ?x }",
    # the delta path (rows from the patch, no evaluation): duplicates, filters, self-joins
    P + "SELECT ?o WHERE { ?s ex:p0 ?o . ?o ex:p1 ?x }",
    P + "SELECT ?a ?c WHERE { ?a ex:p0 ?b . ?b ex:p0 ?c FILTER(?a != ?c) }",
    P + "SELECT ?s ?v WHERE { ?s ex:p2 ?v . ?s ex:p0 ex:s1 FILTER(?v >= 1) }",
]

subjects = st.sampled_from([f"<{EX}s{i}>" for i in range(4)])
statement = st.one_of(
    st.tuples(subjects, st.sampled_from(["p0", "p1"]), subjects).map(lambda t: f"{t[0]} <{EX}{t[1]}> {t[2]} ."),
    st.tuples(subjects, st.integers(0, 3)).map(lambda t: f"{t[0]} <{EX}p2> {t[1]} ."),
    st.tuples(subjects, st.integers(0, 3)).map(lambda t: f"{t[0]} <{EX}line> [ <{EX}qty> {t[1]} ] ."),
)
versions = st.lists(st.frozensets(statement, max_size=8), min_size=1, max_size=5)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime

    data: Path = tmp_path_factory.mktemp("queries") / "data"
    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data)}))
    rt.queries.start(rt.roles)
    rt.roles.start()
    try:
        yield rt
    finally:
        rt.close()


def fresh(rt: Any, query: str, graph: str) -> rs.Results:
    """The query evaluated now, directly on the hub's store (not through the service)."""
    from lucid_hub.queries.query_process import _term

    result: Any = rt.store.query(query, [ox.NamedNode(graph)])
    if isinstance(result, ox.QueryBoolean):
        return rs.Results([], [], bool(result))
    if isinstance(result, ox.QueryTriples):
        return rs.Results(["subject", "predicate", "object"], [
            {"subject": _term(t.subject), "predicate": _term(t.predicate), "object": _term(t.object)} for t in result])
    names = [v.value for v in result.variables]
    return rs.Results(names, [{n: _term(s[n]) for n in names if s[n] is not None} for s in result])


def same(a: rs.Results, b: rs.Results) -> bool:
    return a.boolean == b.boolean and a.counts() == b.counts()


counter = itertools.count()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(versions=versions)
def test_notifications_applied_to_results_give_a_fresh_evaluation(runtime: Any, versions: list[frozenset[str]]) -> None:
    from lucid_hub.rdf.msg import graph_msgs

    rt = runtime
    graph = f"http://ex.org/graphs/g{next(counter)}"
    admin = rt.clients.create("property admin", groups=["lucid-hub-admins"], scopes=["graphs:read"])[0]
    caller = rt.tokens.validate(rt.tokens.issue(admin, "graphs:read"))

    def publish(version: frozenset[str]) -> None:
        quads = ox.parse("\n".join(sorted(version)) or "", format=ox.RdfFormat.TURTLE)
        rt.publisher.replace(graph, graph_msgs(quads, rt.canonicalizer), author="property test", message="")
        rt.queries.evaluation.drain()

    publish(versions[0])
    followed: dict[str, tuple[str, rs.Results, int]] = {}
    for query in QUERIES:
        first = rt.queries.subscribe(caller, query, default=[graph], named=[graph])["notification"]
        followed[first["spuid"]] = (query, _results(first["addedResults"]), 0)
        assert same(followed[first["spuid"]][1], fresh(rt, query, graph)), query
    try:
        for version in versions[1:]:
            publish(version)
            for spuid, (query, current, last) in list(followed.items()):
                for sequence, body in rt.queries.messages(spuid, last):
                    note = body["notification"]
                    assert sequence == last + 1 and "reset" not in note
                    current = rs.apply(current, rs.Change(_results(note["addedResults"]),
                                                          _results(note["removedResults"])))
                    last = sequence
                    assert note["addedResults"] != note["removedResults"], "a notification that changes nothing"
                followed[spuid] = (query, current, last)
                assert same(current, fresh(rt, query, graph)), query
        assert rt.queries.evaluation.delta_fallbacks == 0  # the patch's rows always fitted the results
    finally:
        for spuid in followed:
            rt.queries.unsubscribe(caller, spuid)
        if rt.archive.exists(graph):
            rt.publisher.drop(graph, author="property test", message="")
        rt.queries.evaluation.drain()


def _results(value: dict[str, Any]) -> rs.Results:
    if "boolean" in value:
        return rs.Results([], [], bool(value["boolean"]))
    return rs.Results(list(value["head"]["vars"]), list(value["results"]["bindings"]))


def test_diff_and_apply_are_inverse_on_multisets() -> None:
    a = rs.Results(["x"], [{"x": {"type": "literal", "value": "1"}}] * 2 + [{"x": {"type": "literal", "value": "2"}}])
    b = rs.Results(["x"], [{"x": {"type": "literal", "value": "1"}}, {"x": {"type": "literal", "value": "3"}}])
    change = rs.diff(a, b)
    assert Counter(json.dumps(r["x"]["value"]) for r in change.removed.rows) == Counter(['"1"', '"2"'])
    assert same(rs.apply(a, change), b)
    assert rs.diff(b, b).empty


def test_the_replica_skips_changes_it_loaded_and_reloads_after_its_worker_died(runtime: Any) -> None:
    """A change queued before the worker loaded its graph is already held ("stale": nothing to
    evaluate); the next one applies; after the worker was killed, the new worker's graph is
    newer than the queued changes, and the first of them reloads it (every subscription on
    the graph is then evaluated) rather than looking stale."""
    from lucid_hub.queries.evaluator import QueryEngine
    from lucid_hub.rdf.msg import graph_msgs
    from lucid_hub.store.graphs import StoreChange

    rt = runtime
    graph = f"http://ex.org/graphs/g{next(counter)}"
    seen: list[StoreChange] = []

    def publish(n: int) -> None:
        quads = ox.parse(f"<{EX}s> <{EX}p0> <{EX}o{n}> .", format=ox.RdfFormat.TURTLE)
        rt.publisher.replace(graph, graph_msgs(quads, rt.canonicalizer), author="engine test", message="")

    engine = QueryEngine(rt.store, 1024, 10.0, 1 << 20)
    rt.store.watch(seen.append)
    try:
        publish(1)
        engine.ensure({graph})
        engine.register("q", f"SELECT ?o WHERE {{ ?s <{EX}p0> ?o }}", [graph], [graph], [])
        assert engine.apply(seen[-1])[0] == "stale"
        publish(2)
        status, affected, deltas = engine.apply(seen[-1], {"q"})
        assert (status, affected) == ("applied", set())  # the delta path: rows from the patch
        assert deltas["q"]["added"] == [{"o": {"type": "uri", "value": f"{EX}o2"}}]
        assert deltas["q"]["removed"] == [{"o": {"type": "uri", "value": f"{EX}o1"}}]
        assert engine.evaluate("q")["rows"] == [{"o": {"type": "uri", "value": f"{EX}o2"}}]
        assert engine._worker is not None
        engine.budget = 1e-9  # the joins of a change get no time: the candidate is evaluated instead
        publish(3)
        assert engine.apply(seen[-1], {"q"}) == ("applied", {"q"}, {})
        engine.budget = 10.0
        engine._worker.kill()
        publish(4)
        publish(5)
        # a new worker, loaded as the store is now
        assert engine.evaluate("q")["rows"] == [{"o": {"type": "uri", "value": f"{EX}o5"}}]
        assert [engine.apply(c)[0] for c in seen[-2:]] == ["reloaded", "stale"]
    finally:
        rt.store.unwatch(seen.append)
        engine.close()
        rt.publisher.drop(graph, author="engine test", message="")
