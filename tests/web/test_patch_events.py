"""A graph's patch stream as Server-Sent Events (`/patches/events`, issue 17's push
channel): events in chain order, resumption with Last-Event-ID, the signed patch on
request, access and bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import requests

from lucid_hub.signing import TrustedKeys, verify_patch_bytes
from tests.conftest import RunningHub, running_hub
from tests.queries.test_queries import MINE, ORDERS, ORDERS_NT, put, status, update


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


def direct_writes(hub: RunningHub) -> float:
    text = hub.http.get(f"{hub.url}/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("lucid_push_events_direct_total"))


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
    hub.runtime.queries.evaluation.drain()
    note = first(f"/subscriptions/{spuid}/events", headers={"Last-Event-ID": "0"})
    assert (note.event, note.id) == ("notification", "1") and json.loads(note.data)["notification"]["sequence"] == 1
    assert hub.http.put(f"{hub.url}/windows/w", json={"sparql": MINE, "graphs": [ORDERS], "range": 1,
                                                      "step": 1}).status_code == 201
    update(hub, status("o1", "shipped", "delivered"))
    hub.runtime.windows.evaluate_due()
    element = first("/windows/w/events", headers={"Last-Event-ID": "-1"})
    assert (element.event, element.id) == ("result", "0") and json.loads(element.data)["windowEnd"] == 4
    # live: events of a channel that waits are written by the front's fan-out, framed by it
    written = direct_writes(hub)
    with hub.http.get(f"{hub.url}/patches/events", params={"graph": ORDERS}, stream=True, timeout=30) as answer:
        events = iter(sseclient.SSEClient(answer).events())
        states = ["delivered", "closed", "archived", "returned", "refunded"]
        for n, (old_state, new_state) in enumerate(itertools.pairwise(states), start=5):
            update(hub, status("o1", old_state, new_state))
            live = next(events)
            assert (live.event, live.id) == ("patch", str(n)) and json.loads(live.data)["seq"] == n
            if direct_writes(hub) > written:  # (a channel still in its own poll reads it there)
                break
        else:
            raise AssertionError("no event reached the client through the fan-out")


def test_open_push_channels_end_when_the_readers_access_is_withdrawn(tmp_path: Path) -> None:
    """Each event of a push channel is a read: a party whose access is withdrawn while its
    channel is open gets an `ended` event instead of the next patch (patch stream, LDES events),
    its inbox channel ends at the next keep-alive (15 s: nothing else is sent to it), and a
    sender no longer reads its own notification. SQLite only: the inbox channel's wait is long."""
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}") as hub:
        _channels_end_when_access_is_withdrawn(hub)


def _channels_end_when_access_is_withdrawn(hub: RunningHub) -> None:
    import threading

    from lucid_hub.policy.model import Condition

    rt = hub.runtime
    put(hub, ORDERS, ORDERS_NT)
    rt.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))], "admin")
    buyer = hub.session(hub.token("buyer", groups=("buyers",)))
    sent = buyer.post(f"{hub.url}/inbox", params={"graph": ORDERS}, headers={"Content-Type": "application/ld+json"},
                      data=json.dumps({"@context": "https://www.w3.org/ns/activitystreams", "type": "Announce",
                                       "actor": "urn:buyer", "object": "urn:o"}))
    assert sent.status_code == 201, sent.text
    assert buyer.get(sent.headers["Location"]).status_code == 200
    channels = {"/patches/events": {"graph": ORDERS}, "/streams/events": {"graph": ORDERS},
                "/inbox/events": {"graph": ORDERS}}
    seen: dict[str, list[str]] = {path: [] for path in channels}
    opened = {path: threading.Event() for path in channels}

    def read(path: str) -> None:
        with buyer.get(f"{hub.url}{path}", params=channels[path], stream=True, timeout=30) as answer:
            assert answer.status_code == 200
            for line in answer.iter_lines(decode_unicode=True):
                opened[path].set()
                seen[path].append(line)
                if line.startswith("event: ended"):
                    return

    readers = [threading.Thread(target=read, args=(path,), daemon=True) for path in channels]
    for reader in readers:
        reader.start()
    for event in opened.values():
        assert event.wait(30)
    rt.policies.delete("urn:c:orders", "admin")
    update(hub, status("o1", "open", "packed"))  # a patch for the open patch channels
    for reader in readers:
        reader.join(30)
        assert not reader.is_alive()
    for path, lines in seen.items():
        assert any(line.startswith("event: ended") for line in lines), (path, lines)
        assert not any(line.startswith(("event: patch", "event: members", "event: notification")) for line in lines), (
            path, lines)
    assert buyer.get(sent.headers["Location"]).status_code == 403
