"""The WebSub hub endpoint `/hub` (W3C WebSub §5, §6) with LUCID's authorisation.

`hub.topic` is the graph IRI, or its resource URL `PUBLIC_URL/graphs?graph=IRI` (the `self`
link of a graph). Subscribing needs a token with scope `hub:subscribe` whose party may read
the graph; the callback must start with one of the client's registered prefixes and be safe
to call (docs/websub.md).
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from lucid_hub.errors import ForbiddenError, InputError, NotFoundError
from lucid_hub.web.authz import require_graph, require_scope
from lucid_hub.web.errors import text
from lucid_hub.web.http import runtime
from lucid_hub.websub import Request, protocol
from lucid_hub.websub.callbacks import check_callback

blueprint = Blueprint("websub", __name__)
RESERVED = "urn:lucid-hub:"


def topic_graph(topic: str) -> str:
    return protocol.topic_graph(topic, runtime().settings.public_url)


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
    lease = protocol.lease_seconds(request.form.get("hub.lease_seconds"), settings)
    secret = protocol.secret(request.form.get("hub.secret"))
    media_type = protocol.media_type(request.form.get("lucid.media_type"))

    caller = require_scope("hub:subscribe")
    client = runtime().clients.get(caller.endpoint_id)
    check_callback(callback, client.callback_prefixes if client else (), dev_mode=settings.dev_mode,
                   allowed=runtime().hub.allowed)
    if mode == "subscribe":
        decision = runtime().policies.decide(caller.party, graph, "read")
        if not decision.allowed:
            runtime().hub.deny(callback, topic, decision.reason)
            raise ForbiddenError(f"{decision.reason} (request {decision.request_id})",
                                 request_id=decision.request_id)
    if not _known(graph):
        raise NotFoundError(f"unknown topic: this hub has no graph <{graph}>")
    runtime().hub.accept(Request(mode, graph, topic, callback, lease, secret, media_type, caller.account,
                                    caller.endpoint_id, caller.party.groups, admin="admin" in caller.scopes))
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
    runtime().delivery.wake()
    return text(202, "publish notice accepted")
