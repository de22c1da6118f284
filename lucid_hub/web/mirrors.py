"""Mirrors on the web: the callback the publisher's hub calls (`/callback/{id}`), the admin
API (`/admin/mirrors`), and the local event stream of applied patches (`/mirrors/events`)."""

from __future__ import annotations

import json

from flask import Blueprint, Response, jsonify, request

from lucid_hub.archive import ChainLink
from lucid_hub.errors import InputError
from lucid_hub.mirror.subscriber import MirrorService
from lucid_hub.web import push
from lucid_hub.web.authz import authorized_graph, require_scope
from lucid_hub.web.http import json_object_body, runtime

blueprint = Blueprint("mirrors", __name__)


def mirrors() -> MirrorService:
    service: MirrorService = runtime().mirrors
    return service


@blueprint.get("/callback/<mirror_id>")
def verification(mirror_id: str) -> Response:
    """The publisher's hub verifying a (un)subscription we asked for, or telling us of a denial."""
    args = request.args
    answer = mirrors().verify_intent(mirror_id, args.get("hub.mode", ""), args.get("hub.topic", ""),
                                     args.get("hub.challenge", ""), args.get("hub.lease_seconds"),
                                     args.get("hub.reason", ""))
    if answer is None:
        return Response("no such subscription request\n", status=404, mimetype="text/plain")
    return Response(answer, status=200, mimetype="text/plain")


@blueprint.post("/callback/<mirror_id>")
def delivery(mirror_id: str) -> Response:
    status = mirrors().receive(mirror_id, request.get_data(cache=False), request.headers.get("X-Hub-Signature"))
    return Response(status=status)


@blueprint.get("/mirrors/events")
def events() -> Response:
    graph = authorized_graph("read")
    if not mirrors().mirrored(graph, fresh=True):
        raise InputError(f"<{graph}> is not a mirror of this hub")
    service = mirrors()

    def render(link: ChainLink) -> bytes:
        """An SSE event of a patch applied to the mirrored graph (whichever process of the hub applied it)."""
        data = json.dumps({"graph": graph, "id": link.id, "prev": link.prev, "removed": link.removed,
                           "added": link.added})
        return f"event: patch\nid: {link.id}\ndata: {data}\n\n".encode()

    return push.answer(push.patch_channel(service.stream, graph, service.stream.position(graph),
                                          b": lucid-hub mirror events\n\n", render,
                                          stopped=lambda: service.stopped))


@blueprint.get("/admin/mirrors")
def admin_list() -> Response:
    require_scope("admin")
    return jsonify({"mirrors": runtime().mirror_registry.list()})


@blueprint.post("/admin/mirrors")
def admin_add() -> tuple[Response, int]:
    require_scope("admin")
    body = json_object_body('{"client_id": ..., "client_secret": ..., "hub": ..., "graph": ...} or "from"')
    for name in ("client_id", "client_secret"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise InputError(f"{name} is required")
    for name in ("graph", "hub", "from", "trust_jwks"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise InputError(f"{name} must be a string")
    if body.get("trust_jwks") is not None:
        _jwks_given(body["trust_jwks"], "trust_jwks")
    added = runtime().mirror_registry.add(graph=body.get("graph"),
                       hub_url=body.get("hub"),
                       client_id=body["client_id"], client_secret=body["client_secret"],
                       trust_jwks=body.get("trust_jwks"), graph_url=body.get("from"))
    mirrors().wake()
    return jsonify(added), 201


@blueprint.post("/admin/mirrors/<mirror_id>/trust")
def admin_trust(mirror_id: str) -> Response:
    """Pin the publisher's keys again: {"jwks": URL, "replace": false} (`mirror trust`)."""
    require_scope("admin")
    body = json_object_body('{"jwks": URL, "replace": false}')
    if not isinstance(body.get("jwks"), str) or not body["jwks"]:
        raise InputError("jwks (the URL of the publisher's JWKS, or the JWKS itself) is required")
    _jwks_given(body["jwks"], "jwks")
    if not isinstance(body.get("replace", False), bool):
        raise InputError("replace must be true or false")
    trusted = runtime().mirror_registry.trust(mirror_id, body["jwks"],
                           replace=body.get("replace", False))
    mirrors().wake()
    return jsonify(trusted)


def _jwks_given(value: str, name: str) -> None:
    """A JWKS the API pins: an http(s) URL, or the JWKS itself (as JSON text); never a file
    path, which would make the hub read its own files."""
    if not value.startswith(("https://", "http://")) and not value.lstrip().startswith("{"):
        raise InputError(f"{name} must be an http(s) URL or the JWKS itself (files are for the command line)")


@blueprint.get("/admin/mirrors/<mirror_id>/quarantine")
def admin_quarantine(mirror_id: str) -> Response:
    require_scope("admin")
    return jsonify({"quarantined": mirrors().quarantined(mirror_id)})


@blueprint.delete("/admin/mirrors")
def admin_remove() -> tuple[str, int]:
    require_scope("admin")
    runtime().mirror_registry.remove(request.args.get("id") or request.args.get("graph") or "")
    mirrors().wake()
    return "", 202
