"""The console's pages about the partners: subscribers, clients and mirrors, with their
actions behind confirmation pages."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flask import Response, redirect, render_template, request, session, url_for

from lucid_hub.auth.clients import SCOPES
from lucid_hub.errors import InputError, NotFoundError
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.web.admin import ui
from lucid_hub.web.console.figures import PAGE, Chart, _lags, mirror_figures, subscription_figures
from lucid_hub.web.console.live import LIVE_IDLE, _live
from lucid_hub.web.console.pages import _ids, _number
from lucid_hub.web.http import runtime


def client_names() -> dict[str, str]:
    """Each client's name by its id: subscribers are shown by name first."""
    return runtime().clients.names()


@ui.get("/subscriptions")
def subscriptions_page() -> Any:
    """Every subscription to our graphs (partners' mirrors of them among them), or to one
    graph (`graph`), a page at a time, the failing and lagging ones first."""
    offset = _number("offset", 0)
    graph = request.args.get("graph") or None
    page = runtime().hub.subscriptions(graph=graph, worst_first=True, offset=offset, limit=PAGE)
    return render_template("subscriptions.html", subscriptions=page, total=runtime().hub.count(graph=graph),
                           names=client_names(),
                           offset=offset, page=PAGE, graph=graph, figures=subscription_figures(page),
                           ids=",".join(str(s["id"]) for s in page), message=request.args.get("message"))


@ui.get("/subscriptions/events")
def subscriptions_events() -> Response:
    """The moving figures of the subscriptions a page shows."""
    hub, ids = runtime(), _ids()
    return _live(lambda: (subscription_figures(hub.hub.subscriptions(ids=ids)), {}))


ACTIONS = {"redeliver": "Deliver again", "cancel": "Cancel the subscription"}


@ui.get("/subscriptions/confirm")
def confirm_subscription_action() -> Any:
    """What an action will do, and the form that does it (nothing happens on a GET)."""
    action = request.args.get("action", "")
    if action not in ACTIONS:
        raise InputError(f"action must be one of {', '.join(ACTIONS)}")
    sid = _number("id", None)
    subscription = next(iter(runtime().hub.subscriptions(ids=[sid])), None)
    if subscription is None:
        raise NotFoundError(f"no subscription {sid}")
    start = request.args.get("from", "")
    if start:
        check_patch_id(start, "from")
    return render_template("confirm.html", action=action, title=ACTIONS[action], subscription=subscription,
                           start=start)


@ui.post("/subscriptions/act")
def subscription_action() -> Any:
    """Carry out a confirmed action (the CSRF token was checked before this ran)."""
    action = request.form.get("action", "")
    raw = request.form.get("id", "")
    if action not in ACTIONS or not raw.isdigit():
        raise InputError("the form names no known action and subscription")
    sid = int(raw)
    if action == "redeliver":
        start = request.form.get("from") or None
        runtime().delivery.redeliver(sid, check_patch_id(start, "from") if start else None)
        done = f"subscription {sid}: delivering again" + (f" from {start}" if start else "")
    else:
        runtime().hub.cancel(sid, f"cancelled by {session.get('admin')} (console)")
        done = f"subscription {sid} cancelled; its callback was told"
    return redirect(url_for("admin_ui.subscriptions_page", message=done))


@ui.get("/clients")
def clients_page() -> Any:
    """OAuth clients (partners' hubs and tools) with their groups, and the groups the access
    conditions name; a new client's secret is shown once, on the answer to its creation."""
    return render_template("clients.html", **_clients(), scopes=SCOPES, message=request.args.get("message"),
                           created=None)


def _clients() -> dict[str, Any]:
    """The clients, and every group a client is in or a condition names."""
    clients = runtime().clients.list()
    groups = sorted({g for c in clients for g in c.groups}
                    | {g for c in runtime().policies.conditions() for g in c.requiresGroup})
    return {"clients": clients, "groups": groups}


@ui.post("/clients")
def create_client_page() -> Any:
    form = request.form
    record, secret = runtime().clients.create(
        form.get("name", "").strip(), groups=form.get("groups", "").split(), scopes=form.getlist("scopes"),
        callback_prefixes=form.get("callback_prefixes", "").split())
    answer = render_template("clients.html", **_clients(), scopes=SCOPES, message=None, created=(record, secret))
    return Response(answer, status=201, headers={"Cache-Control": "no-store"})  # the secret: never cached


@ui.get("/clients/confirm")
def confirm_client_delete() -> Any:
    client = runtime().clients.get(request.args.get("id", ""))
    if client is None:
        raise NotFoundError(f"unknown client {request.args.get('id', '')}")
    return render_template("confirm_client.html", client=client)


@ui.post("/clients/delete")
def delete_client_page() -> Any:
    client_id = request.form.get("id", "")
    runtime().clients.delete(client_id)
    return redirect(url_for("admin_ui.clients_page", message=f"client {client_id} deleted: its tokens are refused"))


@ui.get("/mirrors")
def mirrors_page() -> Any:
    """The graphs this hub mirrors: publisher, pinned keys, head, state, and each mirror's
    quarantine with the reason for every patch in it."""
    mirrors = runtime().mirror_registry.list()
    quarantine = {m["id"]: runtime().mirrors.quarantined(m["id"])[:PAGE] for m in mirrors if m["quarantined"]}
    return render_template("mirrors.html", mirrors=mirrors, quarantine=quarantine,
                           figures=mirror_figures(mirrors, _lags(mirrors)), message=request.args.get("message"))


@ui.get("/mirrors/events")
def mirrors_events() -> Response:
    """The mirrors' figures; the publishers are asked again when a mirror's head moved or
    LIVE_IDLE seconds passed (not at every update of a burst of our own patches)."""
    asked: dict[str, Any] = {"heads": None, "at": 0.0, "lags": {}}

    def update() -> tuple[dict[str, Any], dict[str, Chart]]:
        mirrors = runtime().mirror_registry.list()
        heads = [(m["id"], m["head"], m["state"]) for m in mirrors]
        if heads != asked["heads"] or time.monotonic() - asked["at"] >= LIVE_IDLE:
            asked.update(heads=heads, at=time.monotonic(), lags=_lags(mirrors))
        return mirror_figures(mirrors, asked["lags"]), {}

    return _live(update)


def _mirror(mirror_id: str) -> dict[str, Any]:
    found = next((m for m in runtime().mirror_registry.list() if m["id"] == mirror_id), None)
    if found is None:
        raise NotFoundError(f"no mirror {mirror_id}")
    return found


def _mirror_action(act: Callable[[str], int], done: str) -> Any:
    """Carry out an action on the mirror the form names; back to the mirrors with `done`
    (formatted with the patches applied)."""
    mirror = _mirror(request.form.get("id", ""))
    applied = act(mirror["id"])
    return redirect(url_for("admin_ui.mirrors_page", message=f"{mirror['graph']}: {done.format(applied)}"))


@ui.post("/mirrors/reverify")
def reverify_mirror() -> Any:
    """Fetch and verify again what the mirror lacks (after a partner fixed its side, or keys
    were trusted anew): patches that verify now are applied, in order."""
    return _mirror_action(runtime().mirrors.catch_up, "{} patches verified and applied")


@ui.get("/mirrors/reclone")
def confirm_reclone() -> Any:
    return render_template("confirm_reclone.html", mirror=_mirror(request.args.get("id", "")))


@ui.post("/mirrors/reclone")
def reclone_mirror() -> Any:
    """Drop the mirror's copy and clone it again from the publisher (confirmed first)."""
    return _mirror_action(runtime().mirrors.reclone, "cloned again, {} patches verified and applied")


@ui.get("/mirrors/trust")
def confirm_trust() -> Any:
    """The keys to pin anew (a rotated publisher key), asked before it is done."""
    mirror = _mirror(request.args.get("id", ""))
    default = mirror["publisher"].rstrip("/") + "/.well-known/jwks.json"
    return render_template("confirm_trust.html", mirror=mirror, jwks=request.args.get("jwks") or default)


@ui.post("/mirrors/trust")
def trust_keys() -> Any:
    mirror = _mirror(request.form.get("id", ""))
    source = request.form.get("jwks", "")
    if not source.startswith(("https://", "http://")):
        raise InputError("the publisher's keys: an http(s) URL of its JWKS")
    trusted = runtime().mirror_registry.trust(mirror["id"], source,
                           replace=request.form.get("replace") == "yes")
    runtime().mirrors.wake()
    return redirect(url_for("admin_ui.mirrors_page", message=f"{mirror['graph']}: keys pinned "
                                                            f"({', '.join(map(str, trusted.get('keys', [])))})"))
