"""Sockets that go away (SEPA's ping and cleanup): a client that stops answering pings is
cut off by the hub, its subscriptions are detached and ended when it does not come back in
time; one that resumes keeps them; one that unsubscribes leaves nothing detached."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import websocket

from tests.conftest import RunningHub, running_hub
from tests.queries.test_queries import MINE, ORDERS, ORDERS_NT, put

ENV = {"LUCID_WS_PING_SECONDS": "0.5", "LUCID_WS_PING_TIMEOUT": "0.5", "LUCID_QUERY_ORPHAN_SECONDS": "2"}


@pytest.fixture
def pinging_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url, ENV) as hub:
        put(hub, ORDERS, ORDERS_NT)
        yield hub


def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for a condition the hub brings about on its own clock (pings, its sweep)."""
    stop = threading.Event()
    for _ in range(int(timeout / 0.1)):
        if condition():
            return
        stop.wait(0.1)
    raise AssertionError("the hub did not get there in time")


def subscribe(hub: RunningHub, token: str) -> tuple[websocket.WebSocket, str]:
    ws = websocket.create_connection(hub.url.replace("http://", "ws://") + "/subscribe", timeout=30)
    ws.send(json.dumps({"subscribe": {"sparql": MINE, "alias": "mine", "authorization": f"Bearer {token}"}}))
    return ws, json.loads(ws.recv())["notification"]["spuid"]


def detached(hub: RunningHub, spuid: str) -> bool:
    from lucid_hub.db.models import QuerySubscription

    with hub.runtime.db.session() as session:
        return session.get(QuerySubscription, spuid).detached_at is not None


def test_a_client_that_answers_no_ping_is_cut_off_and_its_subscription_ended(pinging_hub: RunningHub) -> None:
    hub = pinging_hub
    token = hub.http.headers["Authorization"].split()[1]
    ws, spuid = subscribe(hub, token)  # then it reads nothing more: the hub's pings go unanswered
    try:
        until(lambda: detached(hub, spuid) or hub.runtime.queries.state(spuid)[0] == "ended")
        until(lambda: hub.runtime.queries.state(spuid)[0] == "ended")
        _state, reason, _seq = hub.runtime.queries.state(spuid)
        assert "WebSocket closed" in reason and "LUCID_QUERY_ORPHAN_SECONDS" in reason
    finally:
        ws.close()


def test_a_client_that_comes_back_and_resumes_keeps_its_subscription(pinging_hub: RunningHub) -> None:
    hub = pinging_hub
    token = hub.http.headers["Authorization"].split()[1]
    ws, spuid = subscribe(hub, token)
    ws.close()  # the client leaves without unsubscribing
    until(lambda: detached(hub, spuid))
    back = websocket.create_connection(hub.url.replace("http://", "ws://") + "/subscribe", timeout=30)
    try:
        back.send(json.dumps({"resume": {"spuid": spuid, "sequence": 0, "authorization": f"Bearer {token}"}}))
        until(lambda: not detached(hub, spuid))
        assert hub.runtime.queries.orphans.sweep() == 0
        assert hub.runtime.queries.state(spuid)[0] == "active"
    finally:
        back.close()


def test_an_unsubscribed_subscription_is_never_detached(pinging_hub: RunningHub) -> None:
    hub = pinging_hub
    token = hub.http.headers["Authorization"].split()[1]
    ws, spuid = subscribe(hub, token)
    ws.send(json.dumps({"unsubscribe": {"spuid": spuid, "authorization": f"Bearer {token}"}}))
    assert json.loads(ws.recv()) == {"unsubscribed": {"spuid": spuid}}
    ws.close()
    assert hub.runtime.queries.state(spuid)[:2] == ("ended", "unsubscribed")
    hub.runtime.queries.orphans.detach([spuid])
    assert not detached(hub, spuid)  # an ended subscription is not detached again


def test_a_socket_served_by_a_thread_detaches_its_subscriptions_too(pinging_hub: RunningHub) -> None:
    """`serve --server werkzeug` serves /subscribe with a thread a socket (flask-sock): a client
    that leaves there without unsubscribing leaves its subscriptions detached, as on the front."""
    from werkzeug.serving import make_server

    from lucid_hub.demo.ports import free_port
    from lucid_hub.web.app import create_app

    hub = pinging_hub
    port = free_port()
    server = make_server("127.0.0.1", port, create_app(hub.runtime.settings, hub.runtime), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        token = hub.http.headers["Authorization"].split()[1]
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/subscribe", timeout=30)
        ws.send(json.dumps({"subscribe": {"sparql": MINE, "alias": "mine", "authorization": f"Bearer {token}"}}))
        spuid = json.loads(ws.recv())["notification"]["spuid"]
        ws.close()
        until(lambda: detached(hub, spuid))
    finally:
        server.shutdown()
        thread.join(timeout=10)
