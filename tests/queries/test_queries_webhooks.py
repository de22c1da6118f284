"""Webhooks of continuous query subscriptions: signed POSTs in sequence order to a real HTTP
callback on loopback, with WebSub's callback rules (prefixes, address policy) and retries
(backoff, 410, too many failures), and access checked again before each POST."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lucid_hub.policy.model import Condition
from tests.conftest import Callback, RunningHub, running_hub, within_twice
from tests.queries.test_queries import MINE, ORDERS, ORDERS_NT, put, status, update

ENV = {"LUCID_DEV_MODE": "1", "LUCID_DELIVERY_BACKOFF_BASE": "0.05", "LUCID_DELIVERY_BACKOFF_MAX": "0.2",
       "LUCID_DELIVERY_MAX_ATTEMPTS": "4"}


@pytest.fixture
def hook_hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url, ENV) as hub:
        put(hub, ORDERS, ORDERS_NT)
        yield hub


def partner(hub: RunningHub, callback: Callback) -> tuple[Any, str]:
    """A session of a buyer whose registered callback prefix covers `callback` (and who may
    read the orders), and its token."""
    if "urn:c:orders" not in {c.iri for c in hub.runtime.policies.conditions()}:
        hub.runtime.policies.create([Condition("urn:c:orders", requiresGroup=("buyers",), readGraph=(ORDERS,))],
                                    "admin")
    prefix = callback.url.split("/callbacks/")[0] + "/callbacks/"
    record, _secret = hub.runtime.clients.create("webhook partner", groups=["buyers"], scopes=["graphs:read"],
                                                 callback_prefixes=[prefix])
    token = str(hub.runtime.tokens.issue(record, "graphs:read"))
    return hub.session(token), token


def hook(hub: RunningHub, http: Any, callback: Callback, **extra: Any) -> str:
    answer = http.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "callback": callback.url, **extra})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["notification"]["spuid"])


def sequences(callback: Callback) -> list[int]:
    return [json.loads(body)["notification"]["sequence"] for _headers, body in callback.deliveries]


def test_notifications_are_posted_signed_and_in_order(hook_hub: RunningHub, callback: Callback) -> None:
    hub = hook_hub
    http, _token = partner(hub, callback)
    spuid = hook(hub, http, callback, secret="s3cret")
    callback.wait(lambda: sequences(callback) == [0])
    update(hub, status("o1", "open", "packed"))
    update(hub, status("o1", "packed", "shipped"))
    callback.wait(lambda: sequences(callback) == [0, 1, 2])
    for headers, body in callback.deliveries:
        expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert headers["X-Hub-Signature"] == expected
        assert headers["X-Lucid-Subscription"] == spuid and headers["Content-Type"] == "application/json"
        assert headers["X-Lucid-Sequence"] == str(json.loads(body)["notification"]["sequence"])
    last = json.loads(callback.deliveries[-1][1])["notification"]
    assert [b["s"]["value"] for b in last["addedResults"]["results"]["bindings"]] == ["shipped"]
    # recorded once the callback's answer is back (after the callback saw the POST)
    callback.wait(lambda: http.get(f"{hub.url}/subscriptions/{spuid}").json()["webhook"]["delivered"] == 2)
    described = http.get(f"{hub.url}/subscriptions/{spuid}").json()
    assert described["webhook"]["error"] is None and described["webhook"]["failures"] == 0
    assert "secret" not in json.dumps(described) and "s3cret" not in json.dumps(described)


def test_failed_posts_are_retried_in_order_and_410_ends_the_subscription(hook_hub: RunningHub,
                                                                          callback: Callback) -> None:
    hub = hook_hub
    http, _token = partner(hub, callback)
    callback.statuses = [500, 503, 502]  # three failures, then 200
    spuid = hook(hub, http, callback)
    update(hub, status("o1", "open", "packed"))
    callback.wait(lambda: sequences(callback) == [0, 1])  # each once, in order, after the retries
    assert callback.statuses == []  # the three failures were answered (and retried)
    callback.statuses = [410]
    update(hub, status("o1", "packed", "shipped"))
    callback.wait(lambda: hub.runtime.queries.state(spuid)[0] == "ended")
    assert "410" in hub.runtime.queries.state(spuid)[1] and sequences(callback) == [0, 1]


def test_a_callback_that_keeps_failing_ends_the_subscription_with_the_reason(hook_hub: RunningHub,
                                                                              callback: Callback) -> None:
    hub = hook_hub
    http, _token = partner(hub, callback)
    callback.statuses = [500] * 4  # LUCID_DELIVERY_MAX_ATTEMPTS
    spuid = hook(hub, http, callback)
    callback.wait(lambda: hub.runtime.queries.state(spuid)[0] == "ended")
    reason = hub.runtime.queries.state(spuid)[1]
    assert "failed 4 times" in reason and "HTTP 500" in reason and callback.deliveries == []


def test_no_post_once_the_token_is_revoked(hook_hub: RunningHub, callback: Callback) -> None:
    """The first POST is held at the callback while the token is revoked; it fails, and the
    retry finds the revocation (checked before every POST): the subscription ends unsent."""
    hub = hook_hub
    rt = hub.runtime
    http, token = partner(hub, callback)
    gate = threading.Event()
    callback.hold_first, callback.statuses = gate, [500]
    spuid = hook(hub, http, callback)
    assert callback.holding.wait(30)
    rt.tokens.revoke(rt.tokens.validate(token))
    gate.set()
    callback.wait(lambda: rt.queries.state(spuid)[0] == "ended")
    assert "revoked" in rt.queries.state(spuid)[1] and callback.deliveries == []
    assert rt.queries.webhooks.posted == 1


@pytest.mark.parametrize(("spec", "status_code", "says"), [
    ({"callback": "http://127.0.0.1:1/elsewhere/"}, 400, "callback prefixes"),
    ({"callback": 7}, 400, "callback must be a URL"),
    ({"callback": "ftp://x/"}, 400, "callback"),
    ({"secret": "x"}, 400, "give it with a callback"),
    ({"callback": "CALLBACK", "secret": "x" * 300}, 400, "secret"),
    ({"callback": "CALLBACK", "secret": 5}, 400, "secret must be a string"),
])
def test_bad_callbacks_and_secrets_are_refused_and_nothing_is_kept(hook_hub: RunningHub, callback: Callback,
                                                                   spec: dict[str, Any], status_code: int,
                                                                   says: str) -> None:
    hub = hook_hub
    http, _token = partner(hub, callback)
    spec = {k: callback.url if v == "CALLBACK" else v for k, v in spec.items()}
    answer = http.post(f"{hub.url}/subscriptions", json={"sparql": MINE, **spec})
    assert answer.status_code == status_code and says in answer.text, answer.text
    assert hub.runtime.queries.webhooks.due() == [] and hub.runtime.queries.evaluation._live == {}


class Tarpit:
    """A callback host that takes every connection and request and never answers."""

    def __init__(self) -> None:
        import socket

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/callbacks/tarpit"
        self.held: list[Any] = []
        self.accepted = threading.Semaphore(0)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _address = self.listener.accept()
                self.held.append(connection)  # read by nobody, answered never
                self.accepted.release()

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.mark.alone  # its figures compare timings (tests/conftest.py)
def test_a_partys_hanging_callbacks_delay_no_other_partys_webhooks(tmp_path: Path, callback: Callback) -> None:
    """A party with ten subscriptions whose callback takes each POST and never answers held
    every webhook thread for the delivery timeout, again at each retry: another party's
    webhooks waited for them. A party now has at most a quarter of the threads at once; the
    other party's p99 from update to its callback stays within 2x its p99 alone."""
    env = {**ENV, "LUCID_DELIVERY_TIMEOUT": "5", "LUCID_DELIVERY_MAX_ATTEMPTS": "1000",
           "LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY": "100"}
    tarpit = Tarpit()
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env) as hub:
        put(hub, ORDERS, ORDERS_NT)
        good, _token = partner(hub, callback)
        record, _secret = hub.runtime.clients.create("hanging partner", groups=["buyers"], scopes=["graphs:read"],
                                                     callback_prefixes=[tarpit.url])
        hostile = hub.session(str(hub.runtime.tokens.issue(record, "graphs:read")))
        hook(hub, good, callback)
        callback.wait(lambda: sequences(callback) == [0])
        value = ["open"]

        def p99_to_callback(samples: int) -> float:
            took = []
            for _ in range(samples):
                new = "packed" if value[0] != "packed" else "open"
                seen = len(sequences(callback))
                began = time.perf_counter()
                update(hub, status("o1", value[0], new))
                value[0] = new
                callback.wait(lambda seen=seen: len(sequences(callback)) > seen, 30)
                took.append(time.perf_counter() - began)
            return statistics.quantiles(took, n=100, method="inclusive")[98]

        try:
            unloaded = p99_to_callback(30)
            for _ in range(10):
                answer = hostile.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "callback": tarpit.url})
                assert answer.status_code == 201, answer.text
            for _ in range(hub.runtime.queries.webhooks.per_party):  # its POSTs hang at the tarpit
                assert tarpit.accepted.acquire(timeout=30)
            attacked = p99_to_callback(30)
            hanging = len(tarpit.held)
        finally:
            tarpit.close()
        print(f"hanging callbacks: webhook p99 unloaded {unloaded * 1000:.1f} ms, attacked {attacked * 1000:.1f} ms, "
              f"ratio {attacked / unloaded:.2f}; {hanging} connections held at the tarpit")
        assert sequences(callback) == list(range(61))  # nothing lost, in order
        assert hanging <= hub.runtime.queries.webhooks.per_party + 2, hanging  # (a retry may be connecting)
        within_twice(attacked, unloaded, "notification p99")
