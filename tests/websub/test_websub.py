"""The WebSub hub: the hub side of websub.rocks as our own tests, plus LUCID's authorisation,
callback safety, retries in order, 410, failed subscriptions, access withdrawn, leases.
Callbacks are real HTTP servers on loopback."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lucid_hub.demo.ports import free_port
from lucid_hub.errors import InputError
from tests.conftest import Callback, RunningHub, running_hub

G = "http://example.org/graphs/kpi"
NT = {"Content-Type": "application/n-triples"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def ws_hub(tmp_path: Path) -> Iterator[RunningHub]:
    env = {"LUCID_DEV_MODE": "1", "LUCID_DELIVERY_BACKOFF_BASE": "0.05", "LUCID_DELIVERY_BACKOFF_MAX": "0.2",
           "LUCID_DELIVERY_MAX_ATTEMPTS": "4", "LUCID_LEASE_MIN": "120"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'ws.db'}", env) as hub:
        yield hub


def publish(hub: RunningHub, value: str) -> str:
    response = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, headers=NT, timeout=30,
                            data=f'<http://ex/kpi> <http://ex/value> "{value}" .\n')
    assert response.status_code in (200, 201), response.text
    return str(response.json()["patch"])


def subscriber(hub: RunningHub, callback: Callback, groups: tuple[str, ...] = ("partner",),
               scopes: tuple[str, ...] = ("hub:subscribe", "graphs:read")) -> requests.Session:
    prefix = callback.url.split("/callbacks/")[0] + "/callbacks/"
    record, _ = hub.runtime.clients.create("Globex hub", groups=list(groups), scopes=list(scopes),
                                           callback_prefixes=[prefix])
    return hub.session(str(hub.runtime.tokens.issue(record, " ".join(scopes))))


def grant(hub: RunningHub, graph: str = G, iri: str = "urn:c:partner-read") -> None:
    body = {"iri": iri, "requiresGroup": ["partner"], "readGraph": [graph]}
    assert hub.http.post(f"{hub.url}/admin/conditions", json=body, timeout=30).status_code == 201


def subscribe(session: requests.Session, hub: RunningHub, callback: Callback, **extra: str) -> requests.Response:
    form = {"hub.mode": "subscribe", "hub.topic": G, "hub.callback": callback.url, **extra}
    return session.post(f"{hub.url}/hub", data=form, timeout=30)


def subscribed(hub: RunningHub, callback: Callback, **extra: str) -> None:
    """The graph published, the partner group granted read, the callback subscribed and verified."""
    publish(hub, "1")
    grant(hub)
    subscribe(subscriber(hub, callback), hub, callback, **extra)
    callback.wait(lambda: len(active(hub)) == 1)


def active(hub: RunningHub) -> list[dict[str, Any]]:
    return [s for s in hub.runtime.hub.subscriptions() if s["state"] == "active"]


def test_subscribe_verify_and_deliver_signed_patches_in_order(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    first = publish(hub, "1")
    grant(hub)
    session = subscriber(hub, callback)
    response = subscribe(session, hub, callback, **{"hub.secret": "s3cret", "hub.lease_seconds": "3600",
                                                   "unknown.param": "ignored"})
    assert response.status_code == 202, response.text
    callback.wait(lambda: len(active(hub)) == 1)
    check = callback.verifications[0]
    assert check["hub.mode"] == "subscribe" and check["hub.topic"] == G and check["hub.lease_seconds"] == "3600"
    assert check["tenant"] == "7" and len(check["hub.challenge"]) >= 32  # the callback's own query is kept
    assert first not in [h.get("X-Lucid-Patch-Id") for h, _ in callback.deliveries]  # from the next patch on

    ids = [publish(hub, str(v)) for v in (2, 3, 4)]
    callback.wait(lambda: len(callback.deliveries) == 3)
    assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == ids
    headers, body = callback.deliveries[0]
    assert body == hub.runtime.archive.patch(ids[0]).body  # the signed archive bytes, as they are
    assert headers["Content-Type"] == "application/rdf-patch" and headers["X-Lucid-Graph"] == G
    assert headers["X-Lucid-Prev"] == first and f'<{hub.url}/hub>; rel="hub"' in headers["Link"]
    # rel="self" is the topic's URL exactly as discovery gives it (WebSub §7)
    discovered = hub.http.head(f"{hub.url}/graphs", params={"graph": G}, timeout=30).headers["Link"]
    # the same WebSub discovery as the graph's resource (which links the query subscriptions too)
    assert discovered.startswith(headers["Link"] + ", ") and 'rel="hub"' in headers["Link"]
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Hub-Signature"] == f"sha256={expected}"
    callback.wait(lambda: active(hub)[0]["lag"] == 0)  # recorded after the callback answered
    assert active(hub)[0]["delivered"] == 3


def test_resubscribe_renews_one_subscription_and_unsubscribe_stops(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    publish(hub, "1")
    grant(hub)
    session = subscriber(hub, callback)
    subscribe(session, hub, callback)
    callback.wait(lambda: len(active(hub)) == 1)
    assert subscribe(session, hub, callback, **{"hub.lease_seconds": "999999999"}).status_code == 202
    callback.wait(lambda: len(callback.verifications) == 2)
    assert callback.verifications[1]["hub.lease_seconds"] == str(30 * 24 * 3600)  # the maximum
    callback.wait(lambda: hub.runtime.hub.subscriptions()[0]["lease_expires_at"] > "")
    patch = publish(hub, "2")
    callback.wait(lambda: len(callback.deliveries) == 1)
    assert len(hub.runtime.hub.subscriptions()) == 1
    assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == [patch]  # exactly one notification

    unsubscribe = session.post(f"{hub.url}/hub", timeout=30, data={
        "hub.mode": "unsubscribe", "hub.topic": f"{hub.url}/graphs?graph={G}", "hub.callback": callback.url})
    assert unsubscribe.status_code == 202
    callback.wait(lambda: hub.runtime.hub.subscriptions() == [])
    publish(hub, "3")
    assert hub.runtime.delivery.deliver_due() == []  # nothing due for anyone
    assert len(callback.deliveries) == 1


def test_a_subscription_belongs_to_its_client(ws_hub: RunningHub, callback: Callback) -> None:
    """Another client whose callback prefix covers the callback may neither cancel nor renew
    (with its own secret) the subscription; an admin may cancel it."""
    hub = ws_hub
    publish(hub, "1")
    grant(hub)
    owner = subscriber(hub, callback)
    subscribe(owner, hub, callback, **{"hub.secret": "owners-secret"})
    callback.wait(lambda: len(active(hub)) == 1)
    stranger = subscriber(hub, callback)  # another client, with the same callback prefix
    for mode, extra in (("unsubscribe", {}), ("subscribe", {"hub.secret": "strangers-secret"})):
        answer = stranger.post(f"{hub.url}/hub", timeout=30, data={
            "hub.mode": mode, "hub.topic": G, "hub.callback": callback.url, **extra})
        assert answer.status_code == 403 and "belongs to another client" in answer.text, (mode, answer.text)
    assert len(callback.verifications) == 1  # the callback was not even asked
    with hub.runtime.db.session() as session:
        from lucid_hub.db.models import Subscription

        (row,) = session.query(Subscription).all()
        assert row.secret == "owners-secret" and row.state == "active"
    patch = publish(hub, "2")
    callback.wait(lambda: len(callback.deliveries) == 1)
    headers, body = callback.deliveries[0]
    assert headers["X-Lucid-Patch-Id"] == patch
    assert headers["X-Hub-Signature"] == "sha256=" + hmac.new(b"owners-secret", body, hashlib.sha256).hexdigest()
    sid = hub.runtime.hub.subscriptions()[0]["id"]
    assert stranger.delete(f"{hub.url}/admin/subscriptions/{sid}", timeout=30).status_code == 403
    assert hub.http.delete(f"{hub.url}/admin/subscriptions/{sid}", timeout=30).status_code == 204
    assert hub.runtime.hub.subscriptions() == []
    callback.wait(lambda: any(v.get("hub.mode") == "denied" for v in callback.verifications))
    assert hub.http.delete(f"{hub.url}/admin/subscriptions/{sid}", timeout=30).status_code == 404


def test_a_callback_that_does_not_confirm_gets_no_subscription(ws_hub: RunningHub, callback: Callback) -> None:
    publish(ws_hub, "1")
    grant(ws_hub)
    callback.echo = False
    assert subscribe(subscriber(ws_hub, callback), ws_hub, callback).status_code == 202
    callback.wait(lambda: len(callback.verifications) == 1)
    ws_hub.runtime.hub.notices.stop()  # let the verification finish its work
    assert ws_hub.runtime.hub.subscriptions() == []


def test_bad_requests_are_4xx_with_a_reason(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    publish(hub, "1")
    grant(hub)
    grant(hub, "http://example.org/graphs/none", "urn:c:none")  # allowed, but no such graph
    session = subscriber(hub, callback)

    def refused(status: int, reason: str, **form: str) -> None:
        data = {"hub.mode": "subscribe", "hub.topic": G, "hub.callback": callback.url, **form}
        response = session.post(f"{hub.url}/hub", data={k: v for k, v in data.items() if v != "-"}, timeout=30)
        assert response.status_code == status and reason in response.text, response.text

    refused(400, "shorter than 200 bytes", **{"hub.secret": "x" * 200})
    refused(400, "hub.callback is required", **{"hub.callback": "-"})
    refused(400, "hub.topic is required", **{"hub.topic": "-"})
    refused(400, "not subscribe, unsubscribe or publish", **{"hub.mode": "follow"})
    refused(400, "whole number", **{"hub.lease_seconds": "soon"})
    refused(400, "not a graph IRI", **{"hub.topic": "not an iri"})
    refused(400, "callback prefixes", **{"hub.callback": "http://127.0.0.1:1/elsewhere"})
    refused(404, "unknown topic", **{"hub.topic": "http://example.org/graphs/none"})
    refused(403, "hub's own graphs", **{"hub.topic": "urn:lucid-hub:policies"})
    assert requests.post(f"{hub.url}/hub", data={"hub.mode": "subscribe", "hub.topic": G,
                                                  "hub.callback": callback.url}, timeout=30).status_code == 401
    wrong_scope = subscriber(hub, callback, scopes=("graphs:read",))
    assert subscribe(wrong_scope, hub, callback).status_code == 403
    assert session.post(f"{hub.url}/hub", json={"hub.mode": "subscribe"}, timeout=30).status_code == 400
    assert hub.runtime.hub.subscriptions() == []


def test_a_denied_subscription_tells_the_callback_why(ws_hub: RunningHub, callback: Callback) -> None:
    publish(ws_hub, "1")
    session = subscriber(ws_hub, callback, groups=("strangers",))
    response = subscribe(session, ws_hub, callback)
    assert response.status_code == 403 and "no access condition grants" in response.text
    callback.wait(lambda: any(v.get("hub.mode") == "denied" for v in callback.verifications))
    denied = next(v for v in callback.verifications if v.get("hub.mode") == "denied")
    assert denied["hub.topic"] == G and "no access condition grants" in denied["hub.reason"]


def test_retries_keep_the_order_and_410_removes(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    subscribed(hub, callback)
    callback.statuses = [500, 503]  # the next two POSTs fail
    ids = [publish(hub, "2"), publish(hub, "3")]
    callback.wait(lambda: len(callback.deliveries) == 2)
    assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == ids  # the later never overtook
    callback.wait(lambda: hub.runtime.hub.subscriptions()[0]["lag"] == 0)
    assert hub.runtime.hub.subscriptions()[0]["failures"] == 2
    callback.statuses = [410]
    publish(hub, "4")
    callback.wait(lambda: hub.runtime.hub.subscriptions() == [])


def _failing_count(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The recorder's per-minute count fails `times` times as a busy database fails it (a lock
    that outlasted the busy timeout cannot be timed in a test: this raises what the driver
    raises then); the list counts the calls."""
    from sqlalchemy.exc import OperationalError

    from lucid_hub.delivery import records

    calls: list[int] = []
    real = records.count_deliveries

    def count(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) <= times:
            raise OperationalError("UPDATE delivery_minutes …", {}, Exception("database is locked"))
        real(*args, **kwargs)

    monkeypatch.setattr(records, "count_deliveries", count)
    return calls


def test_a_record_the_database_refused_once_is_written_again_not_delivered_again(
        ws_hub: RunningHub, callback: Callback, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = ws_hub
    subscribed(hub, callback)
    calls = _failing_count(monkeypatch, 1)
    patch = publish(hub, "2")
    callback.wait(lambda: active(hub)[0]["lag"] == 0)
    assert len(calls) >= 2  # refused, then written
    assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == [patch]  # once
    assert active(hub)[0]["delivered"] == 1


def test_a_record_that_cannot_be_written_releases_its_claims_for_a_prompt_redelivery(
        ws_hub: RunningHub, callback: Callback, monkeypatch: pytest.MonkeyPatch) -> None:
    from lucid_hub.delivery import records

    hub = ws_hub
    subscribed(hub, callback)
    monkeypatch.setattr(records, "RECORD_RETRIES", (0.05,))
    calls = _failing_count(monkeypatch, 2)  # the write and its one retry
    patch = publish(hub, "2")
    # Not recorded: delivered again at the next round, not after the claim's minute
    # (LUCID_DELIVERY_CLAIM_SECONDS is 60; this waits 20 s at most).
    callback.wait(lambda: len(callback.deliveries) == 2 and active(hub)[0]["lag"] == 0)
    assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == [patch, patch]  # at least once
    assert len(calls) == 3 and active(hub)[0]["delivered"] == 1


def test_failed_subscription_is_visible_and_can_be_redelivered(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    subscribed(hub, callback)
    callback.statuses = [500] * 4  # LUCID_DELIVERY_MAX_ATTEMPTS
    patch = publish(hub, "2")
    listed = lambda: hub.http.get(f"{hub.url}/admin/subscriptions", timeout=30).json()["subscriptions"]  # noqa: E731
    callback.wait(lambda: listed()[0]["state"] == "failed")
    sub = listed()[0]
    assert sub["lag"] == 1 and sub["failures"] == 4 and "HTTP 500" in sub["last_error"]
    metrics = requests.get(f"{hub.url}/metrics", timeout=30).text
    from prometheus_client.parser import text_string_to_metric_families

    lag = {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(metrics)
           for s in f.samples if s.name == "lucid_subscription_lag"}
    assert lag == {(("state", "failed"), ("subscription", str(sub["id"]))): 1.0}
    from lucid_hub.web.console.attention import attention  # the overview names it, with the reason

    (item,) = [i for i in attention(hub.runtime) if i.what == "Subscription failed"]
    assert "HTTP 500" in item.detail and item.link.startswith("subscriptions") and item.since is not None, item
    again = hub.http.post(f"{hub.url}/admin/subscriptions/{sub['id']}/redeliver", params={"from": patch}, timeout=30)
    assert again.status_code == 202
    callback.wait(lambda: len(callback.deliveries) == 1)
    assert callback.deliveries[0][0]["X-Lucid-Patch-Id"] == patch and listed()[0]["state"] == "active"
    callback.wait(lambda: not [i for i in attention(hub.runtime) if i.what.startswith("Subscri")])
    assert hub.http.post(f"{hub.url}/admin/subscriptions/999/redeliver", timeout=30).status_code == 404


def test_access_is_rechecked_at_every_delivery(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    subscribed(hub, callback)
    assert hub.http.delete(f"{hub.url}/admin/conditions", params={"iri": "urn:c:partner-read"},
                           timeout=30).status_code == 204
    publish(hub, "2")
    callback.wait(lambda: any(v.get("hub.mode") == "denied" for v in callback.verifications))
    assert callback.deliveries == []
    assert hub.runtime.hub.subscriptions()[0]["state"] == "cancelled"
    from lucid_hub.web.console.attention import attention  # the overview names it, and why

    (item,) = [i for i in attention(hub.runtime) if i.what == "Subscription ended"]
    assert "access withdrawn" in item.detail and item.link.startswith("subscriptions?graph=")
    assert not [i for i in attention(hub.runtime) if i.what == "Subscriber behind"]  # (not counted as behind too)


def test_an_expired_lease_stops_deliveries(ws_hub: RunningHub, callback: Callback) -> None:
    from datetime import UTC, datetime, timedelta

    from lucid_hub.db.models import Subscription

    hub = ws_hub
    subscribed(hub, callback, **{"hub.lease_seconds": "1"})
    assert callback.verifications[0]["hub.lease_seconds"] == "120"  # LUCID_LEASE_MIN
    with hub.runtime.db.session() as session:
        for row in session.query(Subscription):
            row.lease_expires_at = datetime.now(UTC) - timedelta(seconds=1)
    publish(hub, "2")
    callback.wait(lambda: hub.runtime.hub.subscriptions()[0]["state"] == "expired")
    assert hub.runtime.delivery.deliver_due() == [] and callback.deliveries == []


def test_callback_safety_rules() -> None:
    from lucid_hub.websub.callbacks import check_callback, parse_cidrs

    prefixes = ["https://hub.partner.example/cb/", "http://127.0.0.1:9/cb/", "https://10.1.2.3/cb/",
                "https://169.254.169.254/cb/", "https://hub.globex.example", "https://h.example/r/",
                *(f"https://{host}/cb/" for host in ("100.100.100.200", "100.64.0.1", "192.0.0.192", "[2002:a9fe:a9fe::]",
                                                    "[2002:a00:1::]", "[::ffff:10.0.0.1]", "[64:ff9b::a9fe:a9fe]",
                                                    "[::ffff:127.0.0.1]", "[fd00:ec2::254]", "198.18.0.1"))]

    def refused(url: str, reason: str, dev: bool = False, allowed: str = "", resolve: bool = True) -> None:
        with pytest.raises(InputError, match=reason):
            check_callback(url, prefixes, dev_mode=dev, allowed=parse_cidrs(allowed), resolve=resolve)

    def accepted(url: str, dev: bool = False, allowed: str = "", resolve: bool = True) -> None:
        check_callback(url, prefixes, dev_mode=dev, allowed=parse_cidrs(allowed), resolve=resolve)

    refused("http://127.0.0.1:9/cb/x", "must use https")
    refused("https://hub.partner.example/other", "callback prefixes")
    refused("https://10.1.2.3/cb/x", "non-public address")
    refused("https://169.254.169.254/cb/x", "cloud metadata")
    refused("https://169.254.169.254/cb/x", "cloud metadata", dev=True)
    refused("ftp://hub.partner.example/cb/", "not an absolute http")
    # addresses that are not globally reachable, IPv4 inside IPv6 included (issue 14)
    refused("https://100.100.100.200/cb/x", "cloud metadata")  # Alibaba's, in 100.64.0.0/10
    for host in ("100.64.0.1", "192.0.0.192", "[2002:a00:1::]", "[::ffff:10.0.0.1]", "198.18.0.1"):
        refused(f"https://{host}/cb/x", "non-public address")
    for host in ("[2002:a9fe:a9fe::]", "[64:ff9b::a9fe:a9fe]", "[fd00:ec2::254]"):  # 169.254.169.254 in disguise
        refused(f"https://{host}/cb/x", "cloud metadata")
    refused("https://[::ffff:127.0.0.1]/cb/x", "non-public address")  # loopback only in dev mode
    accepted("https://[::ffff:127.0.0.1]/cb/x", dev=True)
    # prefixes are URLs: host and port exactly, the path by whole segments, no dot segments
    refused("https://hub.globex.example.evil.example/", "callback prefixes", resolve=False)
    refused("https://hub.globex.example:8443/x", "callback prefixes", resolve=False)
    refused("https://h.example/r/../../x", "dot segments", resolve=False)
    refused("https://h.example/r/%2e%2e/%2E%2E/x", "dot segments", resolve=False)
    refused("https://h.example/r/..%2F..%2Fx", "dot segments or encoded slashes", resolve=False)
    refused("https://h.example/rx", "callback prefixes", resolve=False)
    refused("https://user:pw@h.example/r/x", "credentials", resolve=False)
    accepted("HTTPS://HUB.GLOBEX.EXAMPLE:443/any/path?tenant=7", resolve=False)
    accepted("https://h.example/r", resolve=False)
    accepted("https://h.example/r/deeper/still?x=1", resolve=False)
    accepted("http://127.0.0.1:9/cb/x", dev=True)  # dev mode: http, loopback
    accepted("https://10.1.2.3/cb/x", allowed="10.0.0.0/8")
    accepted("https://[2002:a00:1::]/cb/x", allowed="2002::/16")
    with pytest.raises(InputError, match=r"LUCID_CALLBACK_ALLOW_CIDRS"):
        parse_cidrs("not-a-network")


def test_client_prefixes_are_urls_without_query_or_dot_segments(ws_hub: RunningHub) -> None:
    for bad, reason in (("ftp://x.example/", "not an absolute http"), ("https://x.example/cb?a=1", "query"),
                        ("https://x.example/a/../b", "dot segments")):
        answer = ws_hub.http.post(f"{ws_hub.url}/admin/clients", json={"name": "p", "callback_prefixes": [bad]},
                                  timeout=30)
        assert answer.status_code == 400 and reason in answer.text, (bad, answer.text)


def test_every_connection_checks_the_address_it_connects_to(monkeypatch: pytest.MonkeyPatch,
                                                            callback: Callback) -> None:
    """DNS rebinding: a name that resolves to a public address when the callback is checked
    and to loopback a moment later. The connection resolves once, checks that answer, and
    connects to it, so the second answer is refused (nothing reaches the loopback server).
    getaddrinfo is replaced for one invented name: no DNS server of ours runs here."""
    import socket

    import urllib3

    from lucid_hub import outbound
    from lucid_hub.websub.callbacks import check_callback

    real = socket.getaddrinfo
    answers = iter(["93.184.216.34"] + ["127.0.0.1"] * 10)  # public first, then rebound to loopback
    port = int(callback.url.split(":")[2].split("/")[0])

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example":
            return real(next(answers), *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"https://rebind.example:{port}/callbacks/x"
    check_callback(url, [f"https://rebind.example:{port}/callbacks/"], dev_mode=False, allowed=[])  # passes
    policy = outbound.AddressPolicy(dev_mode=False, allowed=[])
    pool = outbound.pool_manager(policy, retries=False, timeout=urllib3.Timeout(total=5))
    with pytest.raises(urllib3.exceptions.NewConnectionError, match=r"non-public address \(127.0.0.1\)"):
        pool.request("POST", url.replace("https:", "http:"), body=b"x")
    session = outbound.session(policy, "test")
    with pytest.raises(requests.ConnectionError, match="non-public address"):
        session.get(url.replace("https:", "http:"), timeout=5)
    assert callback.deliveries == [] and callback.verifications == []
    # the same connection class reaches the address when the policy allows it
    allowed = outbound.pool_manager(outbound.AddressPolicy(dev_mode=True, allowed=[]), retries=False)
    assert allowed.request("POST", url.replace("https:", "http:"), body=b"x").status == 200
    assert len(callback.deliveries) == 1


def test_flask_websubs_subscriber_subscribes_and_receives_our_deliveries(ws_hub: RunningHub, tmp_path: Path) -> None:
    """Interoperability: the subscriber of the PyPI package flask-websub, on its own server."""
    pytest.importorskip("flask_websub", reason="flask-websub is not installed: pip install -e '.[test]'")
    from flask import Flask
    from flask_websub.subscriber import SQLite3SubscriberStorage, SQLite3TempSubscriberStorage, Subscriber
    from werkzeug.serving import make_server

    hub = ws_hub
    publish(hub, "1")
    grant(hub)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    record, _ = hub.runtime.clients.create("flask-websub subscriber", groups=["partner"],
                                           scopes=["hub:subscribe", "graphs:read"], callback_prefixes=[f"{base}/"])
    token = str(hub.runtime.tokens.issue(record, "hub:subscribe graphs:read"))

    app = Flask("subscriber")
    app.config["SERVER_NAME"] = f"127.0.0.1:{port}"
    subscriber = Subscriber(SQLite3SubscriberStorage(str(tmp_path / "subs.db")),
                            SQLite3TempSubscriberStorage(str(tmp_path / "temp.db")))
    app.register_blueprint(subscriber.build_blueprint(url_prefix="/callbacks"))
    events = Callback(base)
    confirmed: list[str] = []
    received: list[bytes] = []

    def on_success(topic: str, callback_id: str, mode: str) -> None:
        with events.changed:
            confirmed.append(mode)
            events.changed.notify_all()

    def on_notification(topic: str, callback_id: str, body: bytes) -> None:
        with events.changed:
            received.append(body)
            events.changed.notify_all()

    subscriber.add_success_handler(on_success)
    subscriber.add_listener(on_notification)
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with app.app_context():
            subscriber.subscribe(topic_url=G, hub_url=f"{hub.url}/hub", lease_seconds=3600,
                                 requests_opts={"headers": {"Authorization": f"Bearer {token}"}})
        events.wait(lambda: confirmed == ["subscribe"])
        # the subscriber confirms before the hub records the subscription: wait for the record
        events.wait(lambda: [s["state"] for s in hub.runtime.hub.subscriptions()] == ["active"])
        patch = publish(hub, "2")
        events.wait(lambda: len(received) == 1)
        assert received[0] == hub.runtime.archive.patch(patch).body
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_bench_fanout_runs(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "fanout", "--subscribers", "2", "--deliveries", "10", "--no-kafka")
    assert result.code == 0, result.err
    assert "2 subscribers x    5 patches" in result.out and "INCOMPLETE" not in result.out
    assert run_cli("bench", "fanout", "--subscribers", "many").code == 1


def test_workers_share_delivery_and_a_killed_worker_loses_nothing(tmp_path: Path, db_url: str,
                                                                  callback: Callback) -> None:
    import os
    import signal
    import subprocess
    import sys

    from sqlalchemy import select

    from lucid_hub.db.models import Subscription

    env = {"LUCID_DEV_MODE": "1", "LUCID_DELIVER_IN_PROCESS": "false", "LUCID_DELIVERY_CLAIM_SECONDS": "2"}
    with running_hub(tmp_path / "data", db_url, env) as hub:
        publish(hub, "0")  # the test publishes 1, 2, 3 below
        grant(hub)
        subscribe(subscriber(hub, callback), hub, callback)
        callback.wait(lambda: len(active(hub)) == 1)
        worker_env = {**os.environ, **env, "LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": db_url,
                      "LUCID_PUBLIC_URL": hub.url}
        logs = {name: (tmp_path / f"{name}.log").open("wb") for name in ("w1", "w2")}
        workers = {name: subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "worker", "--name", name],
                                          env=worker_env, stdout=subprocess.DEVNULL, stderr=logs[name])
                   for name in ("w1", "w2")}
        try:
            release = threading.Event()
            callback.hold_first = release
            ids = [publish(hub, str(v)) for v in (1, 2, 3)]
            callback.wait(lambda: callback.holding.is_set())  # a worker is mid-delivery of patch 1
            with hub.runtime.db.session() as session:
                holder = session.scalars(select(Subscription.claimed_by)).one()
            assert holder in workers
            workers[holder].kill()  # SIGKILL: no clean-up, its claim simply runs out
            workers[holder].wait(30)
            release.set()
            try:
                callback.wait(lambda: [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries][-1:] == ids[-1:], 60)
            except AssertionError:
                raise AssertionError(f"the surviving worker did not deliver; its log: "
                                     f"{(tmp_path / f'{next(n for n in workers if n != holder)}.log').read_text()}"
                                     ) from None
            received = [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries]
            assert list(dict.fromkeys(received)) == ids  # all, in chain order
            assert len(received) <= len(ids) + 1  # at most one repeat: the patch in flight
            callback.wait(lambda: active(hub)[0]["lag"] == 0)
            survivor = next(name for name in workers if name != holder)
            workers[survivor].send_signal(signal.SIGTERM)
            assert workers[survivor].wait(30) == 0
        finally:
            for proc in workers.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
            for out in logs.values():
                out.close()


def test_a_worker_delivers_from_the_kafka_log(tmp_path: Path, kafka_bootstrap: str, callback: Callback) -> None:
    """The Kafka variant: the hub's patch log is a topic on the tansu broker; a `lucid-hub
    worker` is woken by its records (consumer group) and delivers everything in order."""
    import os
    import subprocess
    import sys

    topic = f"websub-{time.monotonic_ns()}"
    env = {"LUCID_DEV_MODE": "1", "LUCID_DELIVER_IN_PROCESS": "false", "LUCID_KAFKA_BOOTSTRAP": kafka_bootstrap,
           "LUCID_KAFKA_TOPIC": topic}
    db_url = f"sqlite:///{tmp_path / 'kafka.db'}"
    with running_hub(tmp_path / "data", db_url, env) as hub:
        publish(hub, "0")
        grant(hub)
        subscribe(subscriber(hub, callback), hub, callback)
        callback.wait(lambda: len(active(hub)) == 1)
        worker = subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "worker", "--name", "k1"],
                                  env={**os.environ, **env, "LUCID_DATA_DIR": str(tmp_path / "data"),
                                       "LUCID_DATABASE_URL": db_url, "LUCID_PUBLIC_URL": hub.url},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            ids = [publish(hub, str(v)) for v in range(1, 6)]
            callback.wait(lambda: len(callback.deliveries) >= len(ids), 60)
            assert [h["X-Lucid-Patch-Id"] for h, _ in callback.deliveries] == ids
            worker.terminate()
            assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(30)


def test_a_workers_policies_answer_concurrent_first_decisions_alike(ws_hub: RunningHub) -> None:
    """Delivery threads decide at once on a fresh worker: none may see the conditions half loaded."""
    from lucid_hub.policy.decisions import Party
    from lucid_hub.policy.policy_graph import ArchivePolicies

    grant(ws_hub)
    policies = ArchivePolicies(ws_hub.runtime.archive, ws_hub.runtime.canonicalizer)
    start = threading.Barrier(12)
    answers: list[bool] = []

    def decide() -> None:
        start.wait()
        answers.append(policies.decide(Party("acme", "acme", frozenset({"partner"})), G, "read").allowed)

    threads = [threading.Thread(target=decide) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [True] * 12


@pytest.mark.parametrize("media_type", ["application/trig", "application/ld+json"])
def test_the_chosen_media_type_is_delivered(ws_hub: RunningHub, callback: Callback, media_type: str) -> None:
    from lucid_hub.rdf.rdfpatch import read_rdf_patch
    from lucid_hub.rdf.serialization import read_patch

    hub = ws_hub
    subscribed(hub, callback, **{"lucid.media_type": media_type})
    patch_id = publish(hub, "2")
    callback.wait(lambda: len(callback.deliveries) == 1)
    headers, body = callback.deliveries[0]
    assert headers["Content-Type"] == media_type
    fmt = "trig" if media_type == "application/trig" else "jsonld"
    archived = read_rdf_patch(hub.runtime.archive.patch(patch_id).body, hub.runtime.canonicalizer)
    received = read_patch(body, hub.runtime.canonicalizer, fmt)
    assert received.id == archived.id == patch_id and received.signature == archived.signature
    bad = subscribe(subscriber(hub, callback), hub, callback, **{"lucid.media_type": "text/plain"})
    assert bad.status_code == 400 and "lucid.media_type" in bad.text


def test_publish_notices_need_write_access(ws_hub: RunningHub, callback: Callback) -> None:
    hub = ws_hub
    publish(hub, "1")
    reader = subscriber(hub, callback)  # group partner: no condition grants it anything
    notice = {"hub.mode": "publish", "hub.url": G}
    assert reader.post(f"{hub.url}/hub", data=notice, timeout=30).status_code == 403
    assert hub.http.post(f"{hub.url}/hub", data=notice, timeout=30).status_code == 202
    assert hub.http.post(f"{hub.url}/hub", data={"hub.mode": "publish"}, timeout=30).status_code == 400
    unknown = hub.http.post(f"{hub.url}/hub", data={"hub.mode": "publish", "hub.url": "http://ex/none"}, timeout=30)
    assert unknown.status_code == 404
    assert requests.post(f"{hub.url}/hub", data=notice, timeout=30).status_code == 401


def test_the_same_subscription_verified_at_once_is_one_renewed_subscription(tmp_path: Path, db_url: str) -> None:
    """A replayed subscription request: both verifications succeed at the same moment; the
    subscription exists once, with one of the requests' secrets, and neither is an error."""
    from sqlalchemy import select as sa_select

    from lucid_hub.db.models import Subscription
    from lucid_hub.websub import Request as SubscriptionRequest

    with running_hub(tmp_path / "data", db_url, {"LUCID_DEV_MODE": "1"}) as hub:
        publish(hub, "0")
        websub = hub.runtime.hub
        requests_ = [SubscriptionRequest("subscribe", G, G, "http://127.0.0.1:9/callback", 3600, f"secret-{n}",
                                         "application/rdf-patch", "partner-account", "lc-partner",
                                         frozenset({"partner"})) for n in range(4)]
        barrier = threading.Barrier(len(requests_))
        errors: list[Exception] = []

        def record(request: SubscriptionRequest) -> None:
            barrier.wait()
            try:
                websub._subscribe(request)
            except Exception as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=record, args=(r,)) for r in requests_]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with hub.runtime.db.session() as session:
            rows = session.scalars(sa_select(Subscription)).all()
            assert len(rows) == 1 and rows[0].secret in {r.secret for r in requests_}


def test_every_callback_is_called_at_its_url_exactly_as_given(ws_hub: RunningHub, callback: Callback) -> None:
    """WebSub §5.1, RFC 3986 §2.2: a callback's query is kept as it was given. The reproduction:
    `?k=a%2Fb%3Fc%26d%3De&z=1` was verified as given but delivered to `?k=a/b?c%26d%3De&z=1`
    (aiohttp re-quoted it). Its siblings: a query subscription's and a windowed query's webhooks,
    and a rule's webhook, are called at exactly the URL registered."""
    from tests.queries.test_queries import ORDERS, ORDERS_NT, put, status, update
    from tests.queries.test_queries_webhooks import partner
    from tests.rules.test_rules import add_rules

    hub = ws_hub
    base = callback.url.split("/callbacks/")[0]
    given = {kind: f"/callbacks/{kind}?k=a%2Fb%3Fc%26d%3De&z=1&m=x%20y%2By" for kind in
             ("websub", "query", "window", "rule")}
    publish(hub, "1")
    grant(hub)
    assert subscribe(subscriber(hub, callback), hub, callback, **{"hub.callback": base + given["websub"]}
                     ).status_code == 202
    callback.wait(lambda: len(active(hub)) == 1)
    put(hub, ORDERS, ORDERS_NT)
    http, _token = partner(hub, callback)
    made = http.post(f"{hub.url}/subscriptions", json={"sparql": "SELECT * WHERE { ?s ?p ?o }",
                                                       "callback": base + given["query"], "secret": "k"})
    assert made.status_code == 201, made.text
    window = http.put(f"{hub.url}/windows/w", json={"graphs": [ORDERS], "sparql": "ASK {}", "range": 1, "step": 1,
                                                   "callback": base + given["window"], "secret": "k"})
    assert window.status_code == 201, window.text
    add_rules(hub, f"RULE <urn:r:hook>\nDEFERRED\nON INSERT {{ GRAPH <{G}> {{ ?s ?p ?o }} }}\n"
                   f"DO WEBHOOK <{base + given['rule']}>\n")
    publish(hub, "2")
    update(hub, status("o1", "open", "packed"))
    hub.runtime.windows.evaluate_due()
    hub.runtime.rules.run_deferred()
    for target in given.values():
        callback.wait(lambda target=target: any(t == target for m, t in callback.targets if m == "POST"), 30)
    verification = next(t for m, t in callback.targets if m == "GET" and "/websub?" in t)
    assert verification.startswith(given["websub"] + "&hub.mode=subscribe")
    posted = {t for m, t in callback.targets if m == "POST"}
    assert posted == set(given.values()), posted
