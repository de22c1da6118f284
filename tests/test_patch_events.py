"""A graph's patch stream as Server-Sent Events (`/patches/events`, issue 17's push
channel): events in chain order, resumption with Last-Event-ID, the signed patch on
request, access and bad input."""

from __future__ import annotations

import json
from typing import Any

import requests

from lucid_hub.signing import TrustedKeys, verify_patch_bytes
from tests.conftest import RunningHub
from tests.test_queries import MINE, ORDERS, ORDERS_NT, put, status, update


def read_events(hub: RunningHub, count: int, **request: Any) -> list[tuple[str, dict[str, Any]]]:
    """The first `count` events of the stream (id, data)."""
    found: list[tuple[str, dict[str, Any]]] = []
    with hub.http.get(f"{hub.url}/patches/events", stream=True, timeout=30, **request) as answer:
        assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/event-stream")
        event_id = ""
        for line in answer.iter_lines(decode_unicode=True):
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                found.append((event_id, json.loads(line[6:])))
                if len(found) == count:
                    return found
    raise AssertionError("the stream ended early")


def test_events_in_chain_order_resume_after_the_last_id(hub: RunningHub) -> None:
    put(hub, ORDERS, ORDERS_NT)
    update(hub, status("o1", "open", "packed"))
    update(hub, status("o1", "packed", "shipped"))
    chain = [r.id for r in hub.runtime.archive.history(ORDERS)]
    everything = read_events(hub, 3, params={"graph": ORDERS, "after": 0})
    assert [e[0] for e in everything] == ["1", "2", "3"] and [e[1]["id"] for e in everything] == chain
    assert everything[1][1]["prev"] == chain[0] and everything[1][1]["link"].endswith(f"/patches/{chain[1]}")
    resumed = read_events(hub, 1, params={"graph": ORDERS}, headers={"Last-Event-ID": "2"})
    assert resumed[0][0] == "3" and resumed[0][1]["id"] == chain[2]


def test_the_signed_patch_rides_along_on_request_and_verifies(hub: RunningHub) -> None:
    put(hub, ORDERS, ORDERS_NT)
    [(_id, data)] = read_events(hub, 1, params={"graph": ORDERS, "after": 0, "body": "1"})
    patch = verify_patch_bytes(data["patch"].encode(), TrustedKeys(hub.runtime.keys.jwks()),
                               hub.runtime.canonicalizer)  # raises unless intact and signed by the hub's key
    assert patch.graph == ORDERS and data["id"] == hub.runtime.archive.head(ORDERS)


def test_a_live_reader_gets_what_is_published_after_it_connected(hub: RunningHub) -> None:
    import threading

    put(hub, ORDERS, ORDERS_NT)
    got: list[tuple[str, dict[str, Any]]] = []
    connected = threading.Event()

    def reader() -> None:
        with hub.http.get(f"{hub.url}/patches/events", params={"graph": ORDERS}, stream=True, timeout=30) as answer:
            lines = answer.iter_lines(decode_unicode=True)
            assert next(lines).startswith(":")  # the opening comment: it follows from now on
            connected.set()
            event_id = ""
            for line in lines:
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    got.append((event_id, json.loads(line[6:])))
                    return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert connected.wait(30)
    update(hub, status("o1", "open", "packed"))
    thread.join(timeout=30)
    assert got and got[0][0] == "2" and got[0][1]["id"] == hub.runtime.archive.head(ORDERS)


def test_unauthorised_unreadable_and_malformed_requests(hub: RunningHub) -> None:
    put(hub, ORDERS, ORDERS_NT)
    assert requests.get(f"{hub.url}/patches/events", params={"graph": ORDERS}, timeout=30).status_code == 401
    stranger = hub.session(hub.token("stranger", groups=("nobody",)))
    assert stranger.get(f"{hub.url}/patches/events", params={"graph": ORDERS}, timeout=30).status_code == 403
    for bad in ("x", "-1", "1.5", "9" * 20):
        answer = hub.http.get(f"{hub.url}/patches/events", params={"graph": ORDERS},
                              headers={"Last-Event-ID": bad}, timeout=30)
        assert answer.status_code == 400 and "Last-Event-ID" in answer.text, bad
    assert hub.http.get(f"{hub.url}/patches/events", timeout=30).status_code == 400  # no graph


def test_a_standard_sse_client_reads_and_resumes_every_stream(hub: RunningHub) -> None:
    """sseclient-py (a third-party Server-Sent Events client) on the patch stream, a query
    subscription's events and a windowed query's events: ids, event names, resumption."""
    import sseclient

    put(hub, ORDERS, ORDERS_NT)
    update(hub, status("o1", "open", "packed"))

    def first(path: str, **request: Any) -> sseclient.Event:
        with hub.http.get(f"{hub.url}{path}", stream=True, timeout=30, **request) as answer:
            return next(iter(sseclient.SSEClient(answer).events()))

    patch = first("/patches/events", params={"graph": ORDERS}, headers={"Last-Event-ID": "1"})
    assert (patch.event, patch.id) == ("patch", "2") and json.loads(patch.data)["seq"] == 2
    spuid = hub.http.post(f"{hub.url}/subscriptions", json={"sparql": MINE}).json()["notification"]["spuid"]
    update(hub, status("o1", "packed", "shipped"))
    hub.runtime.queries.drain()
    note = first(f"/subscriptions/{spuid}/events", headers={"Last-Event-ID": "0"})
    assert (note.event, note.id) == ("notification", "1") and json.loads(note.data)["notification"]["sequence"] == 1
    assert hub.http.put(f"{hub.url}/windows/w", json={"sparql": MINE, "graphs": [ORDERS], "range": 1,
                                                      "step": 1}).status_code == 201
    update(hub, status("o1", "shipped", "delivered"))
    hub.runtime.windows.evaluate_due()
    element = first("/windows/w/events", headers={"Last-Event-ID": "-1"})
    assert (element.event, element.id) == ("result", "0") and json.loads(element.data)["windowEnd"] == 4
