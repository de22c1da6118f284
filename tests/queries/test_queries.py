"""Continuous SPARQL query subscriptions (issue 16): the SE protocol on a WebSocket (with
SEPA's own Python client), REST and Server-Sent Events, durability and resumption, access
at every notification, budgets and bad input."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.policy.model import Condition
from tests.conftest import RunningHub, npm_install, running_hub

EX = "http://ex.org/"
ORDERS = "http://ex.org/g/orders"
PRICES = "http://ex.org/g/prices"
MINE = f"SELECT ?o ?s WHERE {{ ?o <{EX}status> ?s ; <{EX}buyer> <{EX}p1> }}"


def put(hub: RunningHub, graph: str, nt: str) -> None:
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": graph}, data=nt.encode(),
                          headers={"Content-Type": "application/n-triples"})
    assert answer.status_code in (200, 201, 204), answer.text


def update(hub: RunningHub, text: str) -> None:
    answer = hub.http.post(f"{hub.url}/sparql", data=text.encode(), headers={"Content-Type": "application/sparql-update"})
    assert answer.status_code == 200, answer.text


def status(order: str, old: str | None, new: str) -> str:
    delete = f'DELETE DATA {{ GRAPH <{ORDERS}> {{ <{EX}{order}> <{EX}status> "{old}" }} }} ;' if old else ""
    return delete + f' INSERT DATA {{ GRAPH <{ORDERS}> {{ <{EX}{order}> <{EX}status> "{new}" }} }}'


ORDERS_NT = (f'<{EX}o1> <{EX}status> "open" .\n<{EX}o1> <{EX}buyer> <{EX}p1> .\n'
             f'<{EX}o2> <{EX}status> "open" .\n<{EX}o2> <{EX}buyer> <{EX}p2> .\n')


def rows(results: dict[str, Any]) -> list[dict[str, str]]:
    return sorted(({k: v["value"] for k, v in b.items()} for b in results["results"]["bindings"]),
                  key=lambda r: json.dumps(r, sort_keys=True))


def notifications(hub: RunningHub, http: Any, spuid: str, after: int = -1) -> dict[str, Any]:
    answer = http.get(f"{hub.url}/subscriptions/{spuid}/notifications", params={"after": after})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def settle(hub: RunningHub) -> None:
    """Process what the store changed so far (the service's thread does it too)."""
    hub.runtime.queries.evaluation.drain()


@pytest.fixture
def orders_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url) as hub:
        put(hub, ORDERS, ORDERS_NT)
        yield hub


def subscribe(hub: RunningHub, http: Any, query: str, **extra: Any) -> dict[str, Any]:
    answer = http.post(f"{hub.url}/subscriptions", json={"sparql": query, **extra})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


# --- REST and Server-Sent Events -----------------------------------------------------------------

def test_first_results_then_only_changes_in_sequence(orders_hub: RunningHub) -> None:
    hub = orders_hub
    first = subscribe(hub, hub.http, MINE, alias="my orders")
    note = first["notification"]
    assert note["sequence"] == 0 and note["alias"] == "my orders"
    assert rows(note["addedResults"]) == [{"o": f"{EX}o1", "s": "open"}]
    assert rows(note["removedResults"]) == []
    spuid = note["spuid"]
    # the same orders counted by status: an aggregate, which the delta path does not take
    counted = subscribe(hub, hub.http, f"SELECT ?s (COUNT(?o) AS ?n) WHERE {{ ?o <{EX}status> ?s ; "
                                       f"<{EX}buyer> <{EX}p1> }} GROUP BY ?s")["notification"]["spuid"]
    service = hub.runtime.queries.evaluation
    assert (service._live[spuid].registration.delta, service._live[counted].registration.delta) == (True, False)
    evaluations, deltas = service.evaluations, service.deltas
    update(hub, f'INSERT DATA {{ GRAPH <{ORDERS}> {{ <{EX}o1> <{EX}comment> "urgent" }} }}')  # no pattern matches
    settle(hub)
    assert (service.evaluations, service.deltas) == (evaluations, deltas)  # the index kept it from both
    # matches a pattern, but o2 is not p1's: the store says so (the join of the incremental path)
    update(hub, status("o2", "open", "shipped"))
    settle(hub)
    assert (service.evaluations, service.deltas) == (evaluations, deltas)
    update(hub, status("o1", "open", "shipped"))
    settle(hub)
    # the aggregate evaluated again; the plain pattern's rows taken from the patch
    assert (service.evaluations, service.deltas) == (evaluations + 1, deltas + 1)
    assert service.delta_fallbacks == 0
    found = notifications(hub, hub.http, spuid, after=0)["notifications"]
    assert [n["notification"]["sequence"] for n in found] == [1]
    assert rows(found[0]["notification"]["addedResults"]) == [{"o": f"{EX}o1", "s": "shipped"}]
    assert rows(found[0]["notification"]["removedResults"]) == [{"o": f"{EX}o1", "s": "open"}]
    assert len(found[0]["notification"]["patches"]) == 1


# Where Unicode breaks lines and RDF does not: N-Triples leaves these raw inside literals.
LINE_BREAKS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"


def test_a_literal_holding_unicode_line_breaks_is_one_statement_to_the_query_worker(orders_hub: RunningHub) -> None:
    """The reproduction: one party's literal "line\u2028sep" made every new subscription over
    its graph answer 503, and after the worker restarted (it loads every graph again) the other
    subscriptions got nothing: the worker split the graph's statements with str.splitlines()."""
    hub = orders_hub
    odd = f"held{LINE_BREAKS}here"
    update(hub, f"INSERT DATA {{ GRAPH <{ORDERS}> {{ <{EX}o3> <{EX}status> {json.dumps(odd)} ; "
                f"<{EX}buyer> <{EX}p1> }} }}")
    first = subscribe(hub, hub.http, MINE)["notification"]
    assert {"o": f"{EX}o3", "s": odd} in rows(first["addedResults"])
    service = hub.runtime.queries.evaluation
    service.engine._worker.kill()  # the next change loads every graph into a new worker
    update(hub, status("o1", "open", "shipped"))
    settle(hub)
    found = notifications(hub, hub.http, first["spuid"], after=0)["notifications"]
    assert [rows(n["notification"]["addedResults"]) for n in found] == [[{"o": f"{EX}o1", "s": "shipped"}]]


def test_server_sent_events_resume_with_last_event_id(orders_hub: RunningHub) -> None:
    hub = orders_hub
    spuid = subscribe(hub, hub.http, MINE)["notification"]["spuid"]
    update(hub, status("o1", "open", "packed"))
    update(hub, status("o1", "packed", "shipped"))
    settle(hub)

    def events(last: str | None, count: int) -> list[tuple[str, dict[str, Any]]]:
        headers = {"Last-Event-ID": last} if last is not None else {}
        out: list[tuple[str, dict[str, Any]]] = []
        with hub.http.get(f"{hub.url}/subscriptions/{spuid}/events", headers=headers, stream=True, timeout=30) as r:
            assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            event: dict[str, str] = {}
            for line in r.iter_lines(decode_unicode=True):
                if line == "":
                    if "data" in event:
                        out.append((event.get("id", ""), json.loads(event["data"])))
                    event = {}
                    if len(out) == count:
                        return out
                elif not line.startswith(":"):
                    key, _, value = line.partition(": ")
                    event[key] = value
        return out

    every = events(None, 3)
    assert [eid for eid, _ in every] == ["0", "1", "2"]
    resumed = events("1", 1)
    assert resumed[0][0] == "2"
    assert rows(resumed[0][1]["notification"]["addedResults"]) == [{"o": f"{EX}o1", "s": "shipped"}]


def test_ask_construct_and_blank_nodes(orders_hub: RunningHub) -> None:
    hub = orders_hub
    ask = subscribe(hub, hub.http, f"ASK {{ ?o <{EX}status> \"late\" }}")["notification"]
    assert ask["addedResults"] == {"head": {}, "boolean": False}
    construct = subscribe(hub, hub.http, f"CONSTRUCT {{ ?o <{EX}state> ?s }} WHERE {{ ?o <{EX}status> ?s }}")
    assert len(construct["notification"]["addedResults"]["results"]["bindings"]) == 2
    lines = subscribe(hub, hub.http, f"SELECT ?line ?qty WHERE {{ ?o <{EX}line> ?line . ?line <{EX}qty> ?qty }}")
    update(hub, status("o2", "open", "late") + f' ; INSERT DATA {{ GRAPH <{ORDERS}> {{ <{EX}o1> <{EX}line> [ <{EX}qty> 5 ] }} }}')
    settle(hub)
    ask_change = notifications(hub, hub.http, ask["spuid"], 0)["notifications"][0]["notification"]
    assert ask_change["addedResults"]["boolean"] is True and ask_change["removedResults"]["boolean"] is False
    change = notifications(hub, hub.http, construct["notification"]["spuid"], 0)["notifications"][0]["notification"]
    assert [b["object"]["value"] for b in change["addedResults"]["results"]["bindings"]] == ["late"]
    bnode = notifications(hub, hub.http, lines["notification"]["spuid"], 0)["notifications"][0]["notification"]
    (added,) = bnode["addedResults"]["results"]["bindings"]
    assert added["line"]["type"] == "bnode" and added["qty"]["value"] == "5"
    # a changed blank-node structure is notified, with blank-node labels
    update(hub, f'DELETE {{ GRAPH <{ORDERS}> {{ ?l <{EX}qty> 5 }} }} INSERT {{ GRAPH <{ORDERS}> {{ ?l <{EX}qty> 6 }} }} '
                f'WHERE {{ GRAPH <{ORDERS}> {{ ?l <{EX}qty> 5 }} }}')
    settle(hub)
    later = notifications(hub, hub.http, lines["notification"]["spuid"], 1)["notifications"]
    labels = {b["line"]["value"] for n in later for part in ("addedResults", "removedResults")
              for b in n["notification"][part]["results"]["bindings"]}
    assert labels, "the change of the blank-node structure was notified"
    # (a changed blank-node MSG is a new MSG instance: its label may change; it is one label per instance)
    assert all(label.startswith("b") for label in labels)


@pytest.mark.parametrize(("body", "status", "reason"), [
    ({"sparql": "SELECT * WHERE { ?s ?p "}, 400, "malformed SPARQL query"),
    ({"sparql": "DESCRIBE <http://ex.org/o1>"}, 400, "SELECT, ASK or CONSTRUCT"),
    ({"sparql": "SELECT * WHERE { SERVICE <http://127.0.0.1:1/> { ?s ?p ?o } }"}, 400, "SERVICE is not allowed"),
    ({"sparql": "SELECT (BNODE() AS ?b) WHERE {}"}, 400, "BNODE()"),
    ({"sparql": "CONSTRUCT { [] <http://ex.org/p> ?o } WHERE { ?s ?p ?o }"}, 400, "template makes blank nodes"),
    ({"sparql": "SELECT * WHERE { ?s ?p ?o }", "default-graph-uri": 7}, 400, "default-graph-uri"),
    ({"sparql": ""}, 400, "needs its query"),
    ({"sparql": "SELECT * WHERE { ?s ?p ?o } #" + "x" * 120_000}, 413, "longer than"),
])
def test_bad_subscriptions_get_a_clear_4xx(orders_hub: RunningHub, body: dict[str, Any], status: int,
                                           reason: str) -> None:
    answer = orders_hub.http.post(f"{orders_hub.url}/subscriptions", json=body)
    assert answer.status_code == status and reason in answer.text, answer.text


def test_unauthorised_and_unreadable(orders_hub: RunningHub) -> None:
    hub = orders_hub
    assert requests.post(f"{hub.url}/subscriptions", json={"sparql": MINE}).status_code == 401
    stranger = hub.session(hub.token("stranger", groups=("nobody",)))
    refused = stranger.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "default-graph-uri": [ORDERS]})
    assert refused.status_code == 403 and "may not read" in refused.text
    # without a dataset a stranger's query would run over the graphs it may read: none (and
    # the dataset is fixed at subscription): refused rather than silent forever
    empty = stranger.post(f"{hub.url}/subscriptions", json={"sparql": MINE})
    assert empty.status_code == 403 and "dataset would be empty" in empty.text
    assert hub.runtime.queries.evaluation._live == {}
    mine = subscribe(hub, hub.http, MINE)["notification"]["spuid"]
    assert stranger.get(f"{hub.url}/subscriptions/{mine}").status_code == 404  # not the stranger's
    assert stranger.delete(f"{hub.url}/subscriptions/{mine}").status_code == 404
    bad = hub.http.get(f"{hub.url}/subscriptions/{mine}/events", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 400 and "Last-Event-ID" in bad.text


def test_withdrawn_access_and_revoked_tokens_end_subscriptions(orders_hub: RunningHub) -> None:
    hub = orders_hub
    rt = hub.runtime
    rt.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    buyer_token = hub.token("buyer", groups=("buyers",))
    buyer = hub.session(buyer_token)
    spuid = subscribe(hub, buyer, MINE)["notification"]["spuid"]
    other_token = hub.token("other buyer", groups=("buyers",))
    rt.policies.delete("urn:c:orders", "admin")
    settle(hub)
    found = notifications(hub, buyer, spuid)
    assert found["state"] == "ended" and "withdrawn" in found["reason"] and ORDERS in found["reason"]
    # a revoked token ends the subscription it made
    rt.policies.create([Condition("urn:c:orders2", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    other = subscribe(hub, hub.session(other_token), MINE)["notification"]["spuid"]
    rt.tokens.revoke(rt.tokens.validate(other_token))
    rt.queries.evaluation.check_revocations()
    state, reason, _ = rt.queries.state(other)
    assert state == "ended" and "revoked" in reason


def test_a_subscription_over_its_budget_ends_and_delays_no_other(tmp_path: Path, db_url: str) -> None:
    with running_hub(tmp_path / "data", db_url, {"LUCID_QUERY_BUDGET": "1", "LUCID_DEV_MODE": "true"}) as hub:  # (dev: the console over http)
        put(hub, ORDERS, ORDERS_NT)
        put(hub, PRICES, f"<{EX}x> <{EX}price> \"1\" .\n")
        heavy = ("SELECT (COUNT(*) AS ?n) WHERE { GRAPH <" + PRICES + "> "
                 "{ ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l . ?m ?n2 ?o } }")
        slow = subscribe(hub, hub.http, heavy)["notification"]["spuid"]
        good = subscribe(hub, hub.http, MINE)["notification"]["spuid"]
        big = "\n".join(f"<{EX}x{i}> <{EX}price> \"{i}\" ." for i in range(300))
        put(hub, PRICES, big)  # now 300^5 rows to count: far beyond one second
        update(hub, status("o1", "open", "shipped"))
        settle(hub)
        state, reason, _ = hub.runtime.queries.state(slow)
        assert state == "ended" and "LUCID_QUERY_BUDGET" in reason
        found = notifications(hub, hub.http, good, 0)["notifications"]
        assert [n["notification"]["sequence"] for n in found] == [1]
        # a first evaluation over the budget is refused
        refused = hub.http.post(f"{hub.url}/subscriptions", json={"sparql": heavy})
        assert refused.status_code == 422 and "LUCID_QUERY_BUDGET" in refused.text
        # the console's queries page: the party over its budget, the query ended and why
        from tests.web.test_console_attention import signed_in

        page = signed_in(hub).get(f"{hub.url}/admin/ui/queries", timeout=30).text
        assert re.search(r"<code>[^<]+</code> \d+ overruns? in a row", page), page[:3000]
        assert f'data-query="{slow}"' in page and "LUCID_QUERY_BUDGET" in page


def test_subscriptions_per_party_are_limited(tmp_path: Path, db_url: str) -> None:
    with running_hub(tmp_path / "data", db_url, {"LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY": "2"}) as hub:
        put(hub, ORDERS, ORDERS_NT)
        first = subscribe(hub, hub.http, MINE)["notification"]["spuid"]
        subscribe(hub, hub.http, MINE)
        refused = hub.http.post(f"{hub.url}/subscriptions", json={"sparql": MINE})
        assert refused.status_code == 422 and "LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY" in refused.text
        assert hub.http.delete(f"{hub.url}/subscriptions/{first}").status_code == 200
        subscribe(hub, hub.http, MINE)


# --- durability -------------------------------------------------------------------------------------

def test_subscriptions_survive_restarts_and_catch_up(tmp_path: Path, db_url: str) -> None:
    import pyoxigraph as ox

    from lucid_hub.config import Settings
    from lucid_hub.rdf.msg import graph_msgs
    from lucid_hub.runtime import Runtime

    data = tmp_path / "data"
    with running_hub(data, db_url) as hub:
        put(hub, ORDERS, ORDERS_NT)
        record, _secret = hub.client("durable", groups=("lucid-hub-admins",))
        token = hub.runtime.tokens.issue(record, "graphs:read")
        spuid = subscribe(hub, hub.session(token), MINE)["notification"]["spuid"]
    # while no hub serves (so nothing evaluates), the graph changes
    rt = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(data), "LUCID_DATABASE_URL": db_url}))
    try:
        changed = ORDERS_NT.replace(f'<{EX}o1> <{EX}status> "open"', f'<{EX}o1> <{EX}status> "cancelled"')
        quads = ox.parse(changed, format=ox.RdfFormat.N_TRIPLES)
        rt.publisher.replace(ORDERS, graph_msgs(quads, rt.canonicalizer), author="offline", message="cancel o1")
    finally:
        rt.close()
    with running_hub(data, db_url) as hub:
        http = hub.session(hub.runtime.tokens.issue(record, "graphs:read"))  # (a new port: a new issuer)
        found = notifications(hub, http, spuid, 0)
        assert found["state"] == "active"
        (caught_up,) = found["notifications"]
        assert caught_up["notification"]["sequence"] == 1
        assert rows(caught_up["notification"]["addedResults"]) == [{"o": f"{EX}o1", "s": "cancelled"}]
        update(hub, status("o1", "cancelled", "open"))
        settle(hub)
        assert [n["notification"]["sequence"] for n in notifications(hub, http, spuid, 1)["notifications"]] == [2]


def test_a_client_too_far_behind_gets_a_reset(tmp_path: Path, db_url: str) -> None:
    with running_hub(tmp_path / "data", db_url, {"LUCID_QUERY_RETAIN": "2"}) as hub:
        put(hub, ORDERS, ORDERS_NT)
        spuid = subscribe(hub, hub.http, MINE)["notification"]["spuid"]
        previous = "open"
        for n in range(1, 6):
            update(hub, status("o1", previous, f"s{n}"))
            previous = f"s{n}"
            settle(hub)
        found = notifications(hub, hub.http, spuid, 0)["notifications"]
        (reset,) = found
        assert reset["notification"]["reset"] is True and reset["notification"]["sequence"] == 5
        assert rows(reset["notification"]["addedResults"]) == [{"o": f"{EX}o1", "s": "s5"}]
        recent = notifications(hub, hub.http, spuid, 3)["notifications"]
        assert [n["notification"]["sequence"] for n in recent] == [4, 5]


# --- the SE protocol on a WebSocket -----------------------------------------------------------------

def ws_url(hub: RunningHub) -> str:
    return hub.url.replace("http://", "ws://") + "/subscribe"


def test_sepas_python_client_subscribes_and_receives_changes(orders_hub: RunningHub) -> None:
    """sepy (SEPA's Python client library) unchanged: its secure path sends the token as the
    message's top-level authorization member, without 'Bearer '."""
    from sepy.ConnectionHandler import ConnectionHandler

    hub = orders_hub
    received: list[tuple[list[Any], list[Any]]] = []
    arrived = threading.Condition()

    def handler(added: list[Any], removed: list[Any]) -> None:
        with arrived:
            received.append((added, removed))
            arrived.notify_all()

    client = ConnectionHandler()
    client.client_secret, client.token = "unused", hub.http.headers["Authorization"].split()[1]
    spuid = client.openSecureWebsocket(ws_url(hub), MINE, "mine", handler, None, None)
    assert spuid.startswith("qs-")
    with arrived:
        assert arrived.wait_for(lambda: len(received) == 1, timeout=30)
    assert [b["s"]["value"] for b in received[0][0]] == ["open"]
    update(hub, status("o1", "open", "shipped"))
    with arrived:
        assert arrived.wait_for(lambda: len(received) == 2, timeout=30)
    added, removed = received[1]
    assert [b["s"]["value"] for b in added] == ["shipped"] and [b["s"]["value"] for b in removed] == ["open"]
    client.closeWebsocket(spuid)
    with arrived:  # sepy closes the socket when it reads "unsubscribed"
        arrived.wait_for(lambda: spuid not in client.get_subscriptions(), timeout=30)
    assert hub.runtime.queries.state(spuid)[0] == "ended"


def test_se_protocol_tokens_errors_and_resume(orders_hub: RunningHub) -> None:
    import websocket

    hub = orders_hub
    token = hub.http.headers["Authorization"].split()[1]

    def exchange(ws: Any, message: Any) -> dict[str, Any]:
        ws.send(message if isinstance(message, str) else json.dumps(message))
        return dict(json.loads(ws.recv()))

    ws = websocket.create_connection(ws_url(hub), timeout=30)
    try:
        assert exchange(ws, "{not json")["status_code"] == 400
        assert exchange(ws, [1])["status_code"] == 400
        assert exchange(ws, {"query": {}})["error_description"].startswith("expected a subscribe")
        no_token = exchange(ws, {"subscribe": {"sparql": MINE}})
        assert no_token["status_code"] == 401
        bad_token = exchange(ws, {"subscribe": {"sparql": MINE, "authorization": "Bearer x.y.z"}})
        assert bad_token["status_code"] == 401
        bad_query = exchange(ws, {"subscribe": {"sparql": "SELECT", "authorization": token}})
        assert bad_query["status_code"] == 400 and "malformed" in bad_query["error_description"]
        first = exchange(ws, {"subscribe": {"sparql": MINE, "alias": "a1", "authorization": f"Bearer {token}"}})
        spuid = first["notification"]["spuid"]
        assert first["notification"]["alias"] == "a1"
        update(hub, status("o1", "open", "packed"))
        assert json.loads(ws.recv())["notification"]["sequence"] == 1
        unsubscribed = exchange(ws, {"unsubscribe": {"spuid": spuid}, "authorization": token})
        assert unsubscribed == {"unsubscribed": {"spuid": spuid}}
    finally:
        ws.close()
    # the token on the handshake; a second socket resumes a subscription after sequence 0
    ws = websocket.create_connection(ws_url(hub), timeout=30, header=[f"Authorization: Bearer {token}"])
    try:
        first = exchange(ws, {"subscribe": {"sparql": MINE}})
        spuid = first["notification"]["spuid"]
    finally:
        ws.close()
    update(hub, status("o1", "packed", "shipped"))
    settle(hub)
    ws = websocket.create_connection(ws_url(hub), timeout=30)
    try:
        resumed = exchange(ws, {"resume": {"spuid": spuid, "sequence": 0}, "authorization": token})
        assert resumed["notification"]["sequence"] == 1
        assert rows(resumed["notification"]["addedResults"]) == [{"o": f"{EX}o1", "s": "shipped"}]
    finally:
        ws.close()
    plain = requests.get(ws_url(hub).replace("ws://", "http://"))
    assert plain.status_code == 400


# --- the command line ------------------------------------------------------------------------------

def test_cli_subscribe_prints_results_then_resumes_with_the_changes(orders_hub: RunningHub, run_cli: Any,
                                                                     tmp_path: Path) -> None:
    hub = orders_hub
    query = tmp_path / "mine.rq"
    query.write_text(MINE)
    env = {"LUCID_ACCESS_TOKEN": hub.http.headers["Authorization"].split()[1], "XDG_CACHE_HOME": str(tmp_path)}
    first = run_cli("subscribe", "--hub", hub.url, "--query", query, "--count", "1", env=env)
    assert first.code == 0, first.err
    assert first.out.splitlines() == ["# 0", f'+ o=<{EX}o1>  s="open"']
    update(hub, status("o1", "open", "shipped"))
    resumed = run_cli("subscribe", "--hub", hub.url, "--query", query, "--count", "1", "--json", env=env)
    assert resumed.code == 0, resumed.err
    note = json.loads(resumed.out)["notification"]
    assert note["sequence"] == 1 and rows(note["addedResults"]) == [{"o": f"{EX}o1", "s": "shipped"}]
    bad = tmp_path / "bad.rq"
    bad.write_text("SELECT ?x WHERE {")
    refused = run_cli("subscribe", "--hub", hub.url, "--query", bad, "--count", "1", env=env)
    assert refused.code != 0 and "malformed SPARQL query" in refused.err and len(refused.err.strip().splitlines()) == 1
    missing = run_cli("subscribe", "--hub", hub.url, "--query", tmp_path / "none.rq", env=env)
    assert missing.code != 0 and "none.rq" in missing.err
    no_token = run_cli("subscribe", "--hub", hub.url, "--query", query, env={"XDG_CACHE_HOME": str(tmp_path),
                                                                             "LUCID_ACCESS_TOKEN": ""})
    assert no_token.code != 0 and "LUCID_ACCESS_TOKEN" in no_token.err


def test_discovery_names_the_subscribe_endpoints(orders_hub: RunningHub) -> None:
    import rdflib

    hub = orders_hub
    answer = requests.get(f"{hub.url}/sparql", headers={"Accept": "text/turtle"})
    described = rdflib.Graph().parse(data=answer.text, format="turtle")
    lh = rdflib.Namespace("https://w3id.org/lucid-hub#")
    endpoint = rdflib.URIRef(f"{hub.url}/sparql")
    assert set(described.objects(endpoint, lh.subscribeEndpoint)) == {rdflib.URIRef(ws_url(hub))}
    assert set(described.objects(endpoint, lh.subscriptionsEndpoint)) == {rdflib.URIRef(f"{hub.url}/subscriptions")}
    graph = hub.http.get(f"{hub.url}/graphs", params={"graph": ORDERS})
    assert graph.links["https://w3id.org/lucid-hub#subscriptions"]["url"] == f"{hub.url}/subscriptions"


def test_a_process_that_does_not_evaluate_hands_subscriptions_to_the_one_that_does(tmp_path: Path) -> None:
    """With several web workers, one process evaluates; another takes a request as `pending`,
    the evaluating one activates (or refuses) it, and the request is answered as if it had
    been made there: the first results, or the refusal with its own status."""
    from lucid_hub.errors import ForbiddenError, InputError
    from lucid_hub.runtime import Runtime

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", {"LUCID_WEB_WORKERS": "2"}) as hub:
        put(hub, ORDERS, ORDERS_NT)
        other = Runtime.open(hub.runtime.settings)
        try:
            assert hub.runtime.queries.evaluates and not other.queries.evaluates
            admin = other.tokens.validate(hub.http.headers["Authorization"].split()[1])
            first = other.queries.subscribe(admin, MINE)["notification"]
            assert first["sequence"] == 0 and rows(first["addedResults"]) == [{"o": f"{EX}o1", "s": "open"}]
            assert first["spuid"] in hub.runtime.queries.evaluation._live  # evaluated by the leader
            stranger = other.tokens.validate(hub.token("stranger", groups=("nobody",)))
            with pytest.raises(ForbiddenError, match="may not read"):
                other.queries.subscribe(stranger, MINE, default=[ORDERS])
            with pytest.raises(InputError, match=r"syntax|parse|Expected"):
                other.queries.subscribe(admin, "SELECT WHERE {")
        finally:
            other.close()


def test_bench_queries_runs_and_reports_every_figure(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "queries", "--subscriptions", "20", "--patches", "20", "--rate", "50", "--idle", "20")
    assert result.code == 0, result.err
    out = result.out
    for figure in ("== 20 subscriptions", "publish-to-notification", "derived from the patch", "notifications/s",
                   "x cheaper", "memory per idle subscription"):
        assert figure in out, out
    assert "did not arrive" not in out
    bad = run_cli("bench", "queries", "--subscriptions", "many")
    assert bad.code == 1 and "--subscriptions" in bad.err


@pytest.fixture(scope="session")
def sepa_js() -> Path:
    """SEPA's JavaScript client from the npm registry, installed once (tests/conftest.npm_install)."""
    return npm_install("sepa-js", "@arces-wot/sepa-js@0.13.2")


def test_sepas_javascript_client_subscribes_and_unsubscribes_unchanged(tmp_path: Path, sepa_js: Path) -> None:
    """@arces-wot/sepa-js, SEPA's own JavaScript client, with its SE protocol as it sends it:
    notifications (sequence 0, then the change), unsubscribe, and an error it can match to
    its request (by alias)."""
    import os
    import queue
    import subprocess

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}") as hub:
        put(hub, ORDERS, ORDERS_NT)
        token = hub.http.headers["Authorization"].split()[1]
        host, port = hub.url.removeprefix("http://").split(":")
        script = Path(__file__).resolve().parents[1] / "js" / "sepa_subscribe.js"
        proc = subprocess.Popen(["node", str(script), host, port, token, MINE], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "NODE_PATH": str(sepa_js)})
        lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(json.loads(line)) for line in proc.stdout or []],
                         daemon=True).start()
        try:
            first = [lines.get(timeout=30), lines.get(timeout=30)]
            by_kind = {line["kind"]: line["value"] for line in first}
            assert by_kind["error"]["alias"] == "broken" and by_kind["error"]["status_code"] == 400
            note = by_kind["notification"]
            assert note["sequence"] == 0 and note["alias"] == "orders"
            assert rows(note["addedResults"]) == [{"o": f"{EX}o1", "s": "open"}]
            update(hub, status("o1", "open", "shipped"))
            second = lines.get(timeout=30)
            assert second["kind"] == "notification" and second["value"]["sequence"] == 1
            assert rows(second["value"]["addedResults"]) == [{"o": f"{EX}o1", "s": "shipped"}]
            assert lines.get(timeout=30) == {"kind": "unsubscribed", "value": {"unsubscribed": {"spuid": note["spuid"]}}}
            assert proc.wait(timeout=30) == 0
            assert hub.runtime.queries.state(note["spuid"])[:2] == ("ended", "unsubscribed")
        finally:
            proc.kill()


def test_a_triple_two_default_graphs_hold_counts_twice_and_is_evaluated_not_derived(orders_hub: RunningHub) -> None:
    """Several default graphs are a bag union (a triple in two matches twice, as a fresh
    query says): such subscriptions are evaluated; GRAPH <iri> patterns still take the
    delta path."""
    hub = orders_hub
    same = f"<{EX}x> <{EX}flag> <{EX}on> .\n"
    put(hub, PRICES, same)
    update(hub, f"INSERT DATA {{ GRAPH <{ORDERS}> {{ {same.strip()[:-1]} }} }}")
    service = hub.runtime.queries.evaluation
    union = subscribe(hub, hub.http, f"SELECT ?s WHERE {{ ?s <{EX}flag> <{EX}on> }}")["notification"]
    named = subscribe(hub, hub.http, f"SELECT ?s WHERE {{ GRAPH <{ORDERS}> {{ ?s <{EX}flag> <{EX}on> }} }}")
    assert len(union["addedResults"]["results"]["bindings"]) == 2  # once per graph that holds it
    deltas, evaluations = service.deltas, service.evaluations
    update(hub, f"DELETE DATA {{ GRAPH <{ORDERS}> {{ {same.strip()[:-1]} }} }}")
    settle(hub)
    assert (service.deltas, service.evaluations) == (deltas + 1, evaluations + 1)
    [gone] = notifications(hub, hub.http, union["spuid"], after=0)["notifications"]
    assert rows(gone["notification"]["removedResults"]) == [{"s": f"{EX}x"}]  # one of the two copies
    [gone_named] = notifications(hub, hub.http, named["notification"]["spuid"], after=0)["notifications"]
    assert rows(gone_named["notification"]["removedResults"]) == [{"s": f"{EX}x"}]
    assert service.delta_fallbacks == 0


def test_stored_notifications_are_not_served_once_access_is_withdrawn(orders_hub: RunningHub) -> None:
    """Notifications made while the party could read the graph are not handed out after its
    access was withdrawn, by any channel: REST lists none (the subscription ended, and says why),
    Server-Sent Events end, a WebSocket resume gets the end, not the notifications."""
    import websocket

    hub = orders_hub
    rt = hub.runtime
    rt.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    token = hub.token("buyer", groups=("buyers",))
    buyer = hub.session(token)
    spuid = subscribe(hub, buyer, MINE)["notification"]["spuid"]
    update(hub, status("o1", "open", "packed"))
    settle(hub)
    assert len(notifications(hub, buyer, spuid)["notifications"]) == 2
    rt.policies.delete("urn:c:orders", "admin")  # and no patch since: nothing ended the subscription yet
    listed = notifications(hub, buyer, spuid)
    assert listed["notifications"] == [] and listed["state"] == "ended" and "may no longer read" in listed["reason"]
    events = buyer.get(f"{hub.url}/subscriptions/{spuid}/events", headers={"Last-Event-ID": "-1"}, timeout=30).text
    assert "event: notification" not in events and "event: ended" in events and "withdrawn" in events
    ws = websocket.create_connection(ws_url(hub), timeout=30, header=[f"Authorization: Bearer {token}"])
    try:
        ws.send(json.dumps({"resume": {"spuid": spuid, "sequence": -1}}))
        answer = json.loads(ws.recv())
    finally:
        ws.close()
    assert "notification" not in answer and answer["status_code"] == 410 and "withdrawn" in answer["error_description"]
