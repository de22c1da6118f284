"""Continuous query subscriptions over HTTP: the SPARQL 1.1 SE protocol (SEPA) on a
WebSocket at `/subscribe`, and REST with Server-Sent Events at `/subscriptions`.

Thin: every decision is `lucid_hub.queries.QueryService`'s. A WebSocket carries any number
of subscriptions; each notification is sent once, in sequence order, from the service's
stored notifications (so a slow socket never holds the service up, and a reconnecting
client resumes from the last sequence it saw).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask_sock import Sock
from simple_websocket import ConnectionClosed

from lucid_hub.auth.tokens import Principal
from lucid_hub.errors import AuthenticationError, ForbiddenError, InputError, LucidError
from lucid_hub.outbound.mqtt import SCHEME as MQTT
from lucid_hub.outbound.mqtt import topic_base
from lucid_hub.queries import results as rs
from lucid_hub.web import push
from lucid_hub.web.authz import require_scope
from lucid_hub.web.errors import status_of
from lucid_hub.web.http import runtime
from lucid_hub.websub import protocol
from lucid_hub.websub.callbacks import check_callback

blueprint = Blueprint("queries", __name__)
sockets = Blueprint("query_sockets", __name__)
sock = Sock()
KEEP_ALIVE = 15.0  # seconds between SSE comments / WebSocket pings on a quiet subscription
SCOPE = "graphs:read"


def _iri_list(value: Any, name: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{name} must be an IRI or a list of IRIs")
    return list(value)


def _subscribe(caller: Principal, spec: dict[str, Any]) -> dict[str, Any]:
    sparql = spec.get("sparql")
    if not isinstance(sparql, str) or not sparql.strip():
        raise InputError("the subscription needs its query: sparql")
    alias = spec.get("alias") or ""
    if not isinstance(alias, str):
        raise InputError("alias must be a string")
    callback, secret = webhook_of(caller, spec)
    return runtime().queries.subscribe(caller, sparql, default=_iri_list(spec.get("default-graph-uri"),
                                                                         "default-graph-uri"),
                                       named=_iri_list(spec.get("named-graph-uri"), "named-graph-uri"), alias=alias,
                                       callback=callback, secret=secret)


def webhook_of(caller: Principal, spec: dict[str, Any], kind: str = "subscriptions") -> tuple[str | None, str | None]:
    """The `callback` and `secret` of a request, checked with a WebSub callback's rules
    (hub/callbacks.py): (None, None) when it asks for no webhook. `"mqtt": true` asks for
    the notifications on the hub's MQTT broker instead (its callback `mqtt:<topic prefix>`)."""
    callback, secret = spec.get("callback"), spec.get("secret")
    mqtt = spec.get("mqtt", False)
    if not isinstance(mqtt, bool):
        raise InputError("mqtt must be true or false")
    if mqtt:
        if callback is not None:
            raise InputError("a subscription takes a callback or mqtt, not both")
        settings = runtime().settings
        if not settings.mqtt_url:
            raise InputError("this hub publishes to no MQTT broker (its operator sets LUCID_MQTT_URL)")
        if secret is not None and not isinstance(secret, str):
            raise InputError("secret must be a string")
        return MQTT + topic_base(settings, caller.account, kind), protocol.secret(secret) if secret else None
    if callback is None:
        if secret is not None:
            raise InputError("a secret signs webhook POSTs: give it with a callback")
        return None, None
    if not isinstance(callback, str):
        raise InputError("callback must be a URL")
    if secret is not None and not isinstance(secret, str):
        raise InputError("secret must be a string")
    client = runtime().clients.get(caller.endpoint_id)
    check_callback(callback, client.callback_prefixes if client else (), dev_mode=runtime().settings.dev_mode,
                   allowed=runtime().hub.allowed)
    return callback, protocol.secret(secret)


# --- REST and Server-Sent Events ---------------------------------------------------------------

@blueprint.post("/subscriptions")
def create() -> Response:
    """Subscribe: a JSON object with `sparql` (and `default-graph-uri`, `named-graph-uri`,
    `alias`); answers 201 with the first notification and where to follow it."""
    caller = require_scope(SCOPE)
    spec = request.get_json(silent=True)
    if not isinstance(spec, dict):
        raise InputError("send the subscription as a JSON object: {\"sparql\": \"SELECT ...\"}")
    message = _subscribe(caller, spec)
    spuid = message["notification"]["spuid"]
    base = f"{runtime().settings.public_url}/subscriptions/{spuid}"
    answer = jsonify({**message, "subscription": base, "events": f"{base}/events"})
    answer.status_code = 201
    answer.headers["Location"] = base
    return answer


@blueprint.get("/subscriptions/<spuid>")
def describe(spuid: str) -> Response:
    return jsonify(runtime().queries.describe(require_scope(SCOPE), spuid))


@blueprint.delete("/subscriptions/<spuid>")
def remove(spuid: str) -> Response:
    runtime().queries.unsubscribe(require_scope(SCOPE), spuid)
    return jsonify({"unsubscribed": {"spuid": spuid}})


def _after() -> int:
    raw = request.headers.get("Last-Event-ID") or request.args.get("after")
    if raw is None or raw == "":
        return -1
    try:
        value = int(raw)
    except ValueError:
        raise InputError("Last-Event-ID (or after=) must be the sequence number of a notification") from None
    if value < -1:
        raise InputError("Last-Event-ID (or after=) must be -1 or more")
    return value


@blueprint.get("/subscriptions/<spuid>/notifications")
def notifications(spuid: str) -> Response:
    """The notifications after `after` (JSON), for clients that poll."""
    caller = require_scope(SCOPE)
    service = runtime().queries
    lapse = service.lapse(caller, service.describe_row(caller, spuid))
    if lapse is not None:
        return jsonify({"notifications": [], "state": "ended", "reason": lapse})
    service.orphans.attach(spuid)  # read again: no longer a socket's orphan
    state, reason, _sequence = service.state(spuid)
    found = service.messages(spuid, _after())
    return jsonify({"notifications": [body for _seq, body in found], "state": state, "reason": reason or None})


@blueprint.get("/subscriptions/<spuid>/events")
def events(spuid: str) -> Response:
    """Server-Sent Events: each notification as an event whose id is its sequence
    (reconnect with Last-Event-ID to resume); an `ended` event when the subscription ends."""
    caller = require_scope(SCOPE)
    service = runtime().queries
    service.describe_row(caller, spuid)
    service.orphans.attach(spuid)
    after = _after()

    return event_stream(lambda last: service.catch_up(spuid, last, caller), after, "notification", service)


def event_stream(fetch: Callable[[int], tuple[list[tuple[int, Any]], dict[str, Any] | None]], after: int,
                 event: str, source: push.Wake) -> Response:
    """Server-Sent Events of a resumable stream: `fetch(after)` gives the elements after a
    sequence and, once none is left, the error that ends the stream (None: it goes on);
    `source` says when there may be more. Each element is an `event` whose id is its
    sequence; the end is an `ended` event; a comment every KEEP_ALIVE seconds."""
    last = after

    def poll() -> tuple[list[bytes], bool]:
        nonlocal last
        try:
            found, end = fetch(last)
        except LucidError as exc:  # (access withdrawn, the query deleted meanwhile)
            found, end = [], rs.error(status_of(exc), _error_code(exc), str(exc))
        events = []
        for sequence, body in found:
            last = sequence
            events.append(f"id: {sequence}\nevent: {event}\ndata: {json.dumps(body)}\n\n".encode())
        if found or end is None:
            return events, False
        return [f"event: ended\ndata: {json.dumps(end)}\n\n".encode()], True

    return push.answer(push.Channel(b"", poll, source, keepalive=KEEP_ALIVE))


# --- the SE protocol on a WebSocket ------------------------------------------------------------

def bearer(value: Any) -> str | None:
    """The token of an `Authorization` value or SE protocol member ("Bearer <token>" or the token alone)."""
    if not isinstance(value, str) or not value.strip():
        return None
    scheme, _, rest = value.strip().partition(" ")
    return rest.strip() if scheme.lower() == "bearer" and rest.strip() else value.strip()


class SeSocket:
    """One WebSocket of the SE protocol: its subscriptions and what it sends. `send` takes a
    message (JSON text) in order; whoever serves the socket (the front's event loop, or a
    thread of werkzeug's server) calls `handle` for each message received and `push` when
    the queries or windows changed, never two at once."""

    def __init__(self, rt: Any, send: Callable[[str], Any], handshake_token: str | None) -> None:
        self._send = send
        self.handshake_token = handshake_token
        self.authenticated = False  # a request with a valid token came (or one on the handshake)
        self.send_lock = threading.Lock()
        self.subscriptions: dict[str, tuple[int, Principal]] = {}  # spuid -> (last sequence sent, caller)
        self.windows: dict[str, tuple[int, Principal]] = {}  # windowed query -> (last sequence sent, caller)
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.rt = rt

    def send(self, message: dict[str, Any]) -> None:
        with self.send_lock:
            self._send(json.dumps(message))

    def close(self) -> None:
        self.closed.set()
        self.rt.queries.wake_all()

    def detach(self) -> None:
        """(After `close`, on a worker thread.) The subscriptions this socket carried lost it:
        each is ended unless resumed in time (queries/orphans.py)."""
        with self.lock:
            spuids = list(self.subscriptions)
        self.rt.queries.orphans.detach(spuids)

    def caller(self, message: dict[str, Any], inner: dict[str, Any]) -> Principal:
        token = bearer(inner.get("authorization")) or bearer(message.get("authorization")) or self.handshake_token
        if token is None:
            raise AuthenticationError("the request needs an access token: an authorization member "
                                      "(\"Bearer <token>\") or an Authorization header on the handshake", error="")
        caller: Principal = self.rt.tokens.validate(token)
        if SCOPE not in caller.scopes:
            raise ForbiddenError(f"the access token lacks the scope {SCOPE}", scope=SCOPE)
        self.authenticated = True
        return caller

    def handle(self, raw: Any) -> None:
        echo: dict[str, Any] = {}  # what the error names of the request (SEPA's clients match the alias)
        try:
            if not isinstance(raw, str):
                raise InputError("send SE protocol messages as JSON text")
            try:
                message = json.loads(raw)
            except ValueError:
                raise InputError("the message is not JSON") from None
            if not isinstance(message, dict):
                raise InputError("the message must be a JSON object")
            for kind in ("subscribe", "unsubscribe", "resume", "observe", "unobserve"):
                inner = message.get(kind)
                if inner is not None:
                    if not isinstance(inner, dict):
                        raise InputError(f"{kind} must be a JSON object")
                    echo = {k: inner[k] for k in ("alias", "spuid", "window") if isinstance(inner.get(k), str)}
                    getattr(self, f"_{kind}")(message, inner)
                    return
            raise InputError("expected a subscribe, unsubscribe, resume, observe or unobserve request")
        except LucidError as exc:
            self.send(rs.error(status_of(exc), _error_code(exc), str(exc), **echo))

    def _subscribe(self, message: dict[str, Any], inner: dict[str, Any]) -> None:
        caller = self.caller(message, inner)
        first = _subscribe(caller, inner)
        spuid = first["notification"]["spuid"]
        with self.lock:
            self.send(first)
            self.subscriptions[spuid] = (0, caller)

    def _resume(self, message: dict[str, Any], inner: dict[str, Any]) -> None:
        """lucid-hub's addition: {"resume": {"spuid", "sequence"}} continues a subscription
        after the last sequence the client saw (or with a reset, when that is too old)."""
        caller = self.caller(message, inner)
        spuid, sequence = inner.get("spuid"), inner.get("sequence", -1)
        if not isinstance(spuid, str) or not isinstance(sequence, int) or isinstance(sequence, bool):
            raise InputError("resume needs spuid (a string) and sequence (an integer)")
        self.rt.queries.describe_row(caller, spuid)
        self.rt.queries.orphans.attach(spuid)
        with self.lock:
            self.subscriptions[spuid] = (sequence, caller)
        self.push()

    def _unsubscribe(self, message: dict[str, Any], inner: dict[str, Any]) -> None:
        caller = self.caller(message, inner)
        spuid = inner.get("spuid")
        if not isinstance(spuid, str):
            raise InputError("unsubscribe needs the spuid of a subscription")
        with self.lock:  # taken off the socket first: its sender must not report the end it is about to see
            held = self.subscriptions.pop(spuid, None)
        try:
            self.rt.queries.unsubscribe(caller, spuid)
        except LucidError:
            if held is not None:
                with self.lock:
                    self.subscriptions[spuid] = held
            raise
        with self.lock:
            self.send({"unsubscribed": {"spuid": spuid}})

    def _observe(self, message: dict[str, Any], inner: dict[str, Any]) -> None:
        """lucid-hub's addition: {"observe": {"window", "sequence"}} sends a windowed query's
        results after `sequence` (default: only new ones) as {"result": element}."""
        caller = self.caller(message, inner)
        name, sequence = inner.get("window"), inner.get("sequence")
        if not isinstance(name, str) or (sequence is not None and (not isinstance(sequence, int)
                                                                   or isinstance(sequence, bool))):
            raise InputError("observe needs window (a windowed query's name) and optionally sequence (an integer)")
        described = self.rt.windows.describe(caller, name)
        with self.lock:
            self.windows[name] = (described["lastSequence"] if sequence is None else sequence, caller)
            self.send({"observing": {"window": name}})
        self.push()

    def _unobserve(self, message: dict[str, Any], inner: dict[str, Any]) -> None:
        self.caller(message, inner)
        name = inner.get("window")
        with self.lock:
            if not isinstance(name, str) or self.windows.pop(name, None) is None:
                raise InputError("unobserve needs the name of a windowed query this socket observes")
            self.send({"unobserved": {"window": name}})

    def push(self) -> None:
        """Send what the subscriptions and observed windowed queries of this socket have not
        sent yet."""
        with self.lock:
            for name, (last, caller) in list(self.windows.items()):
                try:
                    found, state, reason = self.rt.windows.results(caller, name, last)
                except LucidError as exc:  # deleted meanwhile
                    self.send(rs.error(status_of(exc), _error_code(exc), str(exc), window=name))
                    del self.windows[name]
                    continue
                for sequence, body in found:
                    self.send({"result": body})
                    last = sequence
                self.windows[name] = (last, caller)
                if not found and state == "ended":
                    self.send(rs.error(410, "query_ended", reason, window=name))
                    del self.windows[name]

            for spuid, (last, caller) in list(self.subscriptions.items()):
                while True:
                    found, end = self.rt.queries.catch_up(spuid, last, caller)
                    for sequence, body in found:
                        self.send(body)
                        last = sequence
                    self.subscriptions[spuid] = (last, caller)
                    if end is not None:
                        self.send(end)
                        del self.subscriptions[spuid]
                    if not found:
                        break

    def sender(self) -> None:
        service = self.rt.queries
        with contextlib.suppress(ConnectionClosed):
            while not self.closed.is_set():
                generation = service.generation()
                self.push()
                service.wait(generation, KEEP_ALIVE)


def _error_code(exc: Exception) -> str:
    status = status_of(exc)
    return {401: "invalid_token", 403: "forbidden", 404: "not_found", 413: "request_too_large",
            422: "limit_exceeded", 429: "too_many_requests"}.get(status, "invalid_request")


@sock.route("/subscribe", bp=sockets)  # type: ignore[untyped-decorator]
def subscribe_socket(ws: Any) -> None:
    handshake = bearer(request.headers.get("Authorization", ""))
    connection = SeSocket(runtime(), ws.send, handshake)
    sender = threading.Thread(target=connection.sender, name="se-socket", daemon=True)
    sender.start()
    try:
        while True:
            raw = ws.receive()
            if raw is None:
                break
            connection.handle(raw)
    finally:
        connection.close()
        connection.detach()  # gone without unsubscribing: as the front does (queries/orphans.py)
        sender.join(timeout=5)
