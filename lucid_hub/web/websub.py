"""The WebSub hub endpoint `/hub` (W3C WebSub §5, §6) with LUCID's authorisation.

`hub.topic` is the graph IRI, or its resource URL `PUBLIC_URL/graphs?graph=IRI` (the `self`
link of a graph). Subscribing needs a token with scope `hub:subscribe` whose party may read
the graph; the callback must start with one of the client's registered prefixes and be safe
to call (docs/websub.md).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pyoxigraph as ox
from flask import Blueprint, Response, request

from lucid_hub.delivery.hub import MEDIA_TYPES, Request
from lucid_hub.delivery.safety import check_callback
from lucid_hub.errors import ForbiddenError, InputError, NotFoundError
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH
from lucid_hub.web.authz import require_graph, require_scope
from lucid_hub.web.errors import text
from lucid_hub.web.http import runtime

blueprint = Blueprint("websub", __name__)
MAX_SECRET_BYTES = 200  # WebSub §5.1: a secret MUST be less than 200 bytes
RESERVED = "urn:lucid-hub:"


def topic_graph(topic: str) -> str:
    """The graph a topic names: its IRI, or this hub's `/graphs?graph=` URL of it."""
    base = runtime().settings.public_url
    if topic.startswith(f"{base}/graphs?"):
        values = parse_qs(urlsplit(topic).query).get("graph", [])
        if len(values) != 1:
            raise InputError("hub.topic: a /graphs URL names exactly one graph (?graph=IRI)")
        topic = values[0]
    try:
        ox.NamedNode(topic)
    except ValueError:
        raise InputError(f"hub.topic {topic[:200]!r} is not a graph IRI or a /graphs?graph= URL of this hub") from None
    return topic


def _required(name: str) -> str:
    value = request.form.get(name)
    if not value:
        raise InputError(f"{name} is required")
    return value


@blueprint.post("/hub")
def hub() -> Response:
    if (request.mimetype or "") != "application/x-www-form-urlencoded":
        raise InputError("a hub request is form-encoded (application/x-www-form-urlencoded)")
    mode = _required("hub.mode")
    if mode == "publish":
        return _publish()
    if mode not in ("subscribe", "unsubscribe"):
        raise InputError(f"hub.mode {mode[:40]!r} is not subscribe, unsubscribe or publish")
    topic, callback = _required("hub.topic"), _required("hub.callback")
    graph = topic_graph(topic)
    settings = runtime().settings
    lease = settings.lease_default
    if request.form.get("hub.lease_seconds"):
        try:
            lease = int(request.form["hub.lease_seconds"])
        except ValueError:
            raise InputError("hub.lease_seconds must be a whole number of seconds") from None
        if lease <= 0:
            raise InputError("hub.lease_seconds must be positive")
        lease = min(max(lease, settings.lease_min), settings.lease_max)
    secret = request.form.get("hub.secret") or None
    if secret is not None and len(secret.encode()) >= MAX_SECRET_BYTES:
        raise InputError(f"hub.secret must be shorter than {MAX_SECRET_BYTES} bytes")
    media_type = request.form.get("lucid.media_type") or RDF_PATCH
    if media_type not in MEDIA_TYPES:
        raise InputError(f"lucid.media_type must be one of {', '.join(MEDIA_TYPES)}")

    caller = require_scope("hub:subscribe")
    client = runtime().clients.get(caller.endpoint_id)
    check_callback(callback, client.callback_prefixes if client else (), dev_mode=settings.dev_mode,
                   allowed=runtime().websub.allowed)
    if mode == "subscribe":
        allowed, reason, request_id = runtime().policies.decide(caller.key, graph, "read")
        if not allowed:
            runtime().websub.deny(callback, topic, reason)
            raise ForbiddenError(f"{reason} (request {request_id})", request_id=request_id)
    if not _known(graph):
        raise NotFoundError(f"unknown topic: this hub has no graph <{graph}>")
    runtime().websub.accept(Request(mode, graph, topic, callback, lease, secret, media_type, caller.account,
                                    caller.endpoint_id, caller.groups, admin="admin" in caller.scopes))
    return text(202, f"{mode} request accepted; the hub verifies it with the callback")


def _known(graph: str) -> bool:
    if graph.startswith(RESERVED):
        return False
    try:
        return runtime().archive.head(graph) is not None
    except NotFoundError:
        return False


def _publish() -> Response:
    """§6: a publisher says a topic changed. Our graphs change through this hub, whose
    deliveries already follow every patch; the notice wakes the deliverer (write access needed)."""
    url = request.form.get("hub.url") or request.form.get("hub.topic")
    if not url:
        raise InputError("hub.mode=publish needs hub.url (or hub.topic)")
    graph = topic_graph(url)
    require_graph(graph, "write")
    if not _known(graph):
        raise NotFoundError(f"unknown topic: this hub has no graph <{graph}>")
    runtime().websub.wake()
    return text(202, "publish notice accepted")
