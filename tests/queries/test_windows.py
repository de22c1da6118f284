"""Windowed continuous queries (C-SPARQL's model): register, evaluate count and time
windows over the patch stream, the output stream (JSON and Server-Sent Events), replay
from the archive, pause/restart/delete, access, and bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lucid_hub.policy.model import Condition
from lucid_hub.queries.windows import GRACE
from tests.conftest import RunningHub, running_hub
from tests.queries.test_queries import EX, ORDERS, ORDERS_NT, put, status, update

LH = "https://w3id.org/lucid-hub#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
CHANGES = (f"SELECT ?kind (COUNT(*) AS ?n) WHERE {{ ?c <{LH}change> ?kind ; <{RDF}predicate> <{EX}status> }} "
           "GROUP BY ?kind")
STATE = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{ORDERS}> {{ ?o <{EX}status> \"shipped\" }} }}"


@pytest.fixture
def orders_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url) as hub:
        put(hub, ORDERS, ORDERS_NT)
        yield hub


def register(hub: RunningHub, http: Any, name: str, **spec: Any) -> Any:
    return http.put(f"{hub.url}/windows/{name}", json={"graphs": [ORDERS], **spec})


def results(hub: RunningHub, name: str, after: int = -1) -> list[dict[str, Any]]:
    answer = hub.http.get(f"{hub.url}/windows/{name}/results", params={"after": after})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["results"])


def counts(element: dict[str, Any]) -> dict[str, int]:
    return {b.get("kind", {}).get("value", "").removeprefix(LH) or "all": int(b["n"]["value"])
            for b in element["results"]["results"]["bindings"]}


def test_count_windows_stream_results_that_replay_from_the_archive(orders_hub: RunningHub) -> None:
    hub = orders_hub
    created = register(hub, hub.http, "status-changes", sparql=CHANGES, range=3, step=2)
    assert created.status_code == 201, created.text
    assert created.json()["nextWindowEnd"] == 3  # the fixture's PUT is patch 1 of the history
    assert register(hub, hub.http, "shipped", sparql=STATE, range=1, step=1, state=True).status_code == 201
    update(hub, status("o1", "open", "packed"))
    update(hub, status("o1", "packed", "shipped"))
    hub.runtime.windows.evaluate_due()
    first = results(hub, "status-changes")
    assert [e["sequence"] for e in first] == [0] and (first[0]["windowStart"], first[0]["windowEnd"]) == (1, 3)
    assert len(first[0]["patches"]) == 3
    assert counts(first[0]) == {"Added": 4, "Removed": 2}  # the PUT added 2 statuses, each update 1 (and removed 1)
    assert [counts(e)["all"] for e in results(hub, "shipped")] == [0, 1]  # the graph's state at each window's end
    update(hub, status("o2", "open", "shipped"))
    update(hub, status("o1", "shipped", "delivered"))
    hub.runtime.windows.evaluate_due()
    second = results(hub, "status-changes", after=0)
    assert [e["sequence"] for e in second] == [1] and (second[0]["windowStart"], second[0]["windowEnd"]) == (3, 5)
    assert counts(second[0]) == {"Added": 3, "Removed": 3}
    for element in first + second:  # evaluated again from the archive: the same element
        replayed = hub.http.get(f"{hub.url}/windows/status-changes/results/{element['sequence']}/replay").json()
        assert replayed == element
    # Server-Sent Events resume after the last id seen
    with hub.http.get(f"{hub.url}/windows/status-changes/events", headers={"Last-Event-ID": "0"}, stream=True,
                      timeout=30) as events:
        lines = []
        for line in events.iter_lines(decode_unicode=True):
            lines.append(line)
            if line.startswith("data:"):
                break
    assert "id: 1" in lines and json.loads(lines[-1][5:])["sequence"] == 1


def test_pause_restart_and_delete(orders_hub: RunningHub) -> None:
    hub = orders_hub
    assert register(hub, hub.http, "w", sparql=CHANGES, range=1, step=1).status_code == 201
    paused = hub.http.post(f"{hub.url}/windows/w", data={"action": "pause"})
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    update(hub, status("o1", "open", "packed"))
    hub.runtime.windows.evaluate_due()
    assert results(hub, "w") == []  # nothing while paused
    restarted = hub.http.post(f"{hub.url}/windows/w", json={"action": "restart"})
    assert restarted.json()["state"] == "active" and restarted.json()["nextWindowEnd"] == 3
    update(hub, status("o1", "packed", "shipped"))
    hub.runtime.windows.evaluate_due()
    assert [(e["windowStart"], e["windowEnd"]) for e in results(hub, "w")] == [(3, 3)]
    assert hub.http.delete(f"{hub.url}/windows/w").status_code == 200
    assert hub.http.get(f"{hub.url}/windows/w").status_code == 404


def test_time_windows_end_at_multiples_of_the_step(orders_hub: RunningHub) -> None:
    """The service's clock is moved past the window's end (instead of waiting 10 minutes)."""
    hub = orders_hub
    windows = hub.runtime.windows
    described = register(hub, hub.http, "hourly", sparql=CHANGES, range="1h", step="10m").json()
    end = described["nextWindowEnd"]
    from datetime import datetime

    end_ts = datetime.fromisoformat(end).timestamp()
    assert end_ts % 600 == 0
    update(hub, status("o1", "open", "packed"))
    real = windows.clock
    try:
        windows.clock = lambda: end_ts + GRACE - 0.5
        assert windows.evaluate_due() == 0 and results(hub, "hourly") == []  # not yet: commits may be in flight
        windows.clock = lambda: end_ts + GRACE + 0.5
        windows.evaluate_due()  # (the hub's role may evaluate it first on the moved clock: the element counts)
    finally:
        windows.clock = real
    [element] = results(hub, "hourly")  # one element: evaluated once, by whichever
    assert element["windowEnd"] == end and counts(element) == {"Added": 3, "Removed": 1}
    replayed = hub.http.get(f"{hub.url}/windows/hourly/results/0/replay").json()
    assert replayed == element


def test_withdrawn_access_ends_the_windowed_query(orders_hub: RunningHub) -> None:
    hub = orders_hub
    rt = hub.runtime
    rt.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    buyer = hub.session(hub.token("buyer", groups=("buyers",)))
    assert register(hub, buyer, "mine", sparql=CHANGES, range=1, step=1).status_code == 201
    rt.policies.delete("urn:c:orders", "admin")
    update(hub, status("o1", "open", "packed"))
    rt.windows.evaluate_due()
    answer = buyer.get(f"{hub.url}/windows/mine/results").json()
    assert answer["state"] == "ended" and "withdrawn" in answer["reason"] and answer["results"] == []
    again = buyer.post(f"{hub.url}/windows/mine", data={"action": "restart"})
    assert again.status_code == 409 and "register it again" in again.text


@pytest.mark.parametrize(("name", "spec", "status_code", "says"), [
    ("-bad", {"sparql": CHANGES, "range": 1, "step": 1}, 400, "name"),
    ("w", {"sparql": CHANGES, "range": "1x", "step": 1}, 400, "neither a duration"),
    ("w", {"sparql": CHANGES, "range": "1h", "step": 2}, 400, "both"),
    ("w", {"sparql": CHANGES, "range": 0, "step": 1}, 400, "between 1"),
    ("w", {"sparql": CHANGES, "range": 1, "step": 1, "graphs": []}, 400, "graphs"),
    ("w", {"range": 1, "step": 1}, 400, "sparql"),
    ("w", {"sparql": "SELECT WHERE {", "range": 1, "step": 1}, 400, ""),
    ("w", {"sparql": "DESCRIBE <x:y>", "range": 1, "step": 1}, 400, "SELECT, ASK or CONSTRUCT"),
    ("w", {"sparql": "SELECT * WHERE { ?s ?p ?o } #" + "x" * 120_000, "range": 1, "step": 1}, 413, "longer than"),
    ("w", {"sparql": CHANGES, "range": 1, "step": 1, "state": "yes"}, 400, "state"),
])
def test_bad_registrations_get_a_clear_4xx_and_nothing_is_kept(orders_hub: RunningHub, name: str,
                                                                 spec: dict[str, Any], status_code: int,
                                                                 says: str) -> None:
    hub = orders_hub
    answer = register(hub, hub.http, name, **spec)
    assert answer.status_code == status_code and says in answer.text, answer.text
    assert hub.http.get(f"{hub.url}/windows/{name}").status_code == 404


def test_unauthorised_unreadable_foreign_and_duplicate(orders_hub: RunningHub) -> None:
    import requests

    hub = orders_hub
    assert requests.put(f"{hub.url}/windows/w", json={"sparql": CHANGES, "graphs": [ORDERS], "range": 1,
                                                      "step": 1}).status_code == 401
    stranger = hub.session(hub.token("stranger", groups=("nobody",)))
    refused = register(hub, stranger, "w", sparql=CHANGES, range=1, step=1)
    assert refused.status_code == 403 and "may not read" in refused.text
    assert register(hub, hub.http, "w", sparql=CHANGES, range=1, step=1).status_code == 201
    again = register(hub, hub.http, "w", sparql=CHANGES, range=1, step=1)
    assert again.status_code == 409 and "exists" in again.text
    assert stranger.get(f"{hub.url}/windows/w").status_code == 404  # not the stranger's
    assert stranger.delete(f"{hub.url}/windows/w").status_code == 404
    bad = hub.http.post(f"{hub.url}/windows/w", json={"action": "explode"})
    assert bad.status_code == 400 and "pause or restart" in bad.text
    assert hub.http.get(f"{hub.url}/windows/w/results/7/replay").status_code == 404


def test_observers_by_websocket_and_webhook(tmp_path: Path, callback: Any) -> None:
    """A windowed query's results reach a WebSocket that observes it ({"observe": ...} on
    /subscribe) and its webhook (signed POSTs, as query subscriptions' webhooks)."""
    import hashlib
    import hmac

    import websocket

    from tests.queries.test_queries_webhooks import ENV, partner

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", ENV) as hub:
        put(hub, ORDERS, ORDERS_NT)
        http, token = partner(hub, callback)
        created = register(hub, http, "hooked", sparql=CHANGES, range=1, step=1, callback=callback.url, secret="k")
        assert created.status_code == 201, created.text
        ws = websocket.create_connection(hub.url.replace("http", "ws", 1) + "/subscribe", timeout=30,
                                         header=[f"Authorization: Bearer {token}"])
        try:
            ws.send(json.dumps({"observe": {"window": "hooked", "sequence": -1}}))
            assert json.loads(ws.recv()) == {"observing": {"window": "hooked"}}
            ws.send(json.dumps({"observe": {"window": "not-mine"}}))
            refused = json.loads(ws.recv())
            assert refused["status_code"] == 404 and "not-mine" in refused["error_description"]
            update(hub, status("o1", "open", "packed"))
            hub.runtime.windows.evaluate_due()
            pushed = json.loads(ws.recv())["result"]
        finally:
            ws.close()
        assert pushed["sequence"] == 0 and counts(pushed) == {"Added": 1, "Removed": 1}
        callback.wait(lambda: len(callback.deliveries) == 1)
        headers, body = callback.deliveries[0]
        assert headers["X-Lucid-Window"] == "hooked" and headers["X-Lucid-Sequence"] == "0"
        assert headers["X-Hub-Signature"] == "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()
        assert json.loads(body) == pushed


def test_replayed_requests_change_nothing_twice(orders_hub: RunningHub) -> None:
    """The same request sent again: a second PUT is 409 (the first stays as it was), a
    second pause keeps it paused, a second DELETE is 404; a query subscription's second
    DELETE answers the same and it stays ended, once."""
    hub = orders_hub
    assert register(hub, hub.http, "w", sparql=CHANGES, range=1, step=1).status_code == 201
    assert register(hub, hub.http, "w", sparql=STATE, range=5, step=5).status_code == 409
    assert hub.http.get(f"{hub.url}/windows/w").json()["query"] == CHANGES
    for _ in range(2):
        paused = hub.http.post(f"{hub.url}/windows/w", data={"action": "pause"})
        assert paused.status_code == 200 and paused.json()["state"] == "paused"
    assert hub.http.delete(f"{hub.url}/windows/w").status_code == 200
    assert hub.http.delete(f"{hub.url}/windows/w").status_code == 404
    made = hub.http.post(f"{hub.url}/subscriptions", json={"sparql": CHANGES.replace("?c", "?x")})
    spuid = made.json()["notification"]["spuid"]
    for _ in range(2):
        gone = hub.http.delete(f"{hub.url}/subscriptions/{spuid}")
        assert gone.status_code == 200 and gone.json() == {"unsubscribed": {"spuid": spuid}}
    assert hub.runtime.queries.state(spuid)[:2] == ("ended", "unsubscribed")


def test_results_and_replays_are_not_served_once_access_is_withdrawn(orders_hub: RunningHub) -> None:
    """The reproduction: a count window with state, access withdrawn, the graph written after.
    The stored element is no longer listed (the query has ended, and says why), its replay is
    refused (403), the event stream ends and a WebSocket observer gets no result."""
    import websocket

    hub = orders_hub
    rt = hub.runtime
    rt.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    token = hub.token("buyer", groups=("buyers",))
    buyer = hub.session(token)
    assert register(hub, buyer, "kpi-dashboard", sparql=STATE, range=1, step=1, state=True).status_code == 201
    update(hub, status("o1", "open", "shipped"))
    rt.windows.evaluate_due()
    assert [counts(e)["all"] for e in buyer.get(f"{hub.url}/windows/kpi-dashboard/results").json()["results"]] == [1]
    rt.policies.delete("urn:c:orders", "admin")
    update(hub, status("o2", "open", "shipped"))  # written after the withdrawal
    replay = buyer.get(f"{hub.url}/windows/kpi-dashboard/results/0/replay")
    assert replay.status_code == 403 and "may no longer read" in replay.text and ORDERS in replay.text
    listed = buyer.get(f"{hub.url}/windows/kpi-dashboard/results", params={"after": -1}).json()
    assert listed["results"] == [] and listed["state"] == "ended" and "may no longer read" in listed["reason"]
    events = buyer.get(f"{hub.url}/windows/kpi-dashboard/events", headers={"Last-Event-ID": "-1"}, timeout=30).text
    assert "event: result" not in events and "event: ended" in events and "withdrawn" in events
    described = buyer.get(f"{hub.url}/windows/kpi-dashboard").json()  # its owner still sees why it ended
    assert described["state"] == "ended" and "withdrawn" in described["reason"]
    ws = websocket.create_connection(hub.url.replace("http", "ws", 1) + "/subscribe", timeout=30,
                                     header=[f"Authorization: Bearer {token}"])
    try:
        ws.send(json.dumps({"observe": {"window": "kpi-dashboard", "sequence": -1}}))
        answers = [json.loads(ws.recv()) for _ in range(2)]
    finally:
        ws.close()
    assert not any("result" in a for a in answers), answers
    assert answers[1]["status_code"] == 410 and "withdrawn" in answers[1]["error_description"], answers


def test_a_count_window_replay_reads_each_graph_as_it_was_at_the_windows_end(orders_hub: RunningHub) -> None:
    """A graph without a patch in the window is read at its version before the window's end
    (here: none yet), not at its latest one: the replay equals the element, whatever came later."""
    hub = orders_hub
    other = EX + "g/other"
    query = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{other}> {{ ?s ?p ?o }} }}"
    created = hub.http.put(f"{hub.url}/windows/both", json={"graphs": [ORDERS, other], "sparql": query,
                                                           "range": 1, "step": 1, "state": True})
    assert created.status_code == 201, created.text
    update(hub, status("o1", "open", "packed"))
    hub.runtime.windows.evaluate_due()
    put(hub, other, "".join(f"<{EX}s{i}> <{EX}p> <{EX}o> .\n" for i in range(3)))
    hub.runtime.windows.evaluate_due()
    elements = results(hub, "both")
    assert [counts(e)["all"] for e in elements] == [0, 3]
    for element in elements:
        replayed = hub.http.get(f"{hub.url}/windows/both/results/{element['sequence']}/replay").json()
        assert replayed == element


def test_names_are_each_partys_own(orders_hub: RunningHub, callback: Any) -> None:
    """The reproduction: one party's `PUT /windows/kpi-dashboard` answered another 409. Names
    are scoped to the party that chose them: two parties hold the same name, each sees,
    evaluates, observes and deletes only its own, and nothing tells one of the other's."""
    hub = orders_hub
    rt = hub.runtime
    rt.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    first, second = (hub.session(hub.token(name, groups=("buyers",))) for name in ("first", "second"))
    assert register(hub, first, "kpi-dashboard", sparql=CHANGES, range=1, step=1).status_code == 201
    taken = register(hub, second, "kpi-dashboard", sparql=STATE, range=2, step=2)
    assert taken.status_code == 201, taken.text
    assert taken.headers["Location"].endswith("/windows/kpi-dashboard")
    assert first.get(f"{hub.url}/windows/kpi-dashboard").json()["range"] == "1"
    assert second.get(f"{hub.url}/windows/kpi-dashboard").json()["range"] == "2"
    again = register(hub, first, "kpi-dashboard", sparql=CHANGES, range=1, step=1)
    assert again.status_code == 409 and "of yours" in again.text  # its own name, still once per party
    update(hub, status("o1", "open", "packed"))
    rt.windows.evaluate_due()
    mine = first.get(f"{hub.url}/windows/kpi-dashboard/results").json()["results"]
    theirs = second.get(f"{hub.url}/windows/kpi-dashboard/results").json()["results"]
    assert [e["windowEnd"] for e in mine] == [2] and theirs == []  # the second's window ends at 3
    assert mine[0]["query"] == "kpi-dashboard"
    assert first.delete(f"{hub.url}/windows/kpi-dashboard").status_code == 200
    assert first.get(f"{hub.url}/windows/kpi-dashboard").status_code == 404
    assert second.get(f"{hub.url}/windows/kpi-dashboard").json()["state"] == "active"
    update(hub, status("o1", "packed", "shipped"))
    rt.windows.evaluate_due()
    assert [e["windowEnd"] for e in second.get(f"{hub.url}/windows/kpi-dashboard/results").json()["results"]] == [3]
