"""Administration: the admin API (`/admin/...`, scope `admin`) and the admin page
(`/admin/ui/...`, admin accounts with a session cookie and CSRF tokens on every form)."""

from __future__ import annotations

import hmac
import json
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, redirect, render_template, request, session, url_for

from lucid_hub import nesting
from lucid_hub.auth.ratelimit import FailureLimiter
from lucid_hub.errors import ForbiddenError, InputError, LucidError, NotFoundError, PolicyError, RateLimitedError
from lucid_hub.policy.decisions import Action, Party
from lucid_hub.policy.model import PROPERTIES, Condition, parse_turtle, to_turtle
from lucid_hub.signing import write_private
from lucid_hub.web import rule_offers, rules
from lucid_hub.web.authz import author, require_scope
from lucid_hub.web.http import graph_param, json_object_body, negotiate, request_address, runtime
from lucid_hub.web.moments import moment
from lucid_hub.web.receipts import receipts

api = Blueprint("admin_api", __name__, url_prefix="/admin")
ui = Blueprint("admin_ui", __name__, url_prefix="/admin/ui", template_folder="templates", static_folder="static")
SESSION_SECRET_FILE = "session-secret"  # noqa: S105 (a file name, not a secret)


def init_admin(app: Flask) -> None:
    """Session cookie settings and the secret that signs it (generated at first start)."""
    settings = app.extensions["lucid"].settings
    path: Path = settings.keys_dir / SESSION_SECRET_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, secrets.token_urlsafe(48).encode())
    app.secret_key = path.read_text().strip()
    app.config.update(SESSION_COOKIE_NAME="lucid_admin", SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_SECURE=not settings.dev_mode,
                      PERMANENT_SESSION_LIFETIME=timedelta(hours=8))
    app.extensions["admin_limiter"] = FailureLimiter(settings.auth_rate_limit)


# --- the admin API ------------------------------------------------------------------------

@api.before_request
def _admin_only() -> None:
    require_scope("admin")


def _conditions_body() -> list[Condition]:
    media_type = (request.mimetype or "").lower()
    data = request.get_data(cache=False)
    if media_type == "text/turtle":
        return parse_turtle(data, "request body", base_iri=runtime().settings.public_url + "/")
    if media_type == "application/json":
        parsed = nesting.loads(data, "request body")
        items = parsed if isinstance(parsed, list) else [parsed]
        return [Condition.from_json(item) for item in items]
    raise InputError(f"send conditions as application/json or text/turtle, not {media_type or '(none)'}")


def _conditions_response(conditions: list[Condition], status: int = 200) -> Response:
    if negotiate(["application/json", "text/turtle"], "application/json") == "text/turtle":
        return Response(to_turtle(conditions), status=status, mimetype="text/turtle")
    response = jsonify({"conditions": [c.to_json() for c in conditions]})
    response.status_code = status
    return response


@api.get("/conditions")
def list_conditions() -> Response:
    iri = request.args.get("iri")
    policies = runtime().policies
    return _conditions_response([policies.get(iri)] if iri else list(policies.conditions()))


@api.post("/conditions")
def create_conditions() -> Response:
    new = _conditions_body()
    if not new:
        raise PolicyError("the request body holds no access condition")
    runtime().policies.create(new, author())
    return _conditions_response(new, 201)


@api.put("/conditions")
def update_condition() -> Response:
    iri = request.args.get("iri")
    if not iri:
        raise InputError("PUT /admin/conditions?iri=IRI replaces that condition")
    new = _conditions_body()
    if len(new) != 1 or new[0].iri != iri:
        raise PolicyError(f"the body must hold exactly the condition <{iri}>")
    runtime().policies.update(new[0], author())
    return _conditions_response(new)


@api.delete("/conditions")
def delete_condition() -> Response:
    iri = request.args.get("iri")
    if not iri:
        raise InputError("DELETE /admin/conditions?iri=IRI deletes that condition")
    runtime().policies.delete(iri, author())
    return Response(status=204)


def _party_of_client(client_id: str) -> Party:
    client = runtime().clients.get(client_id)
    if client is None:
        raise NotFoundError(f"unknown client {client_id}")
    return Party(client.client_id, client.client_id, frozenset(client.groups))


def explain(args: Any) -> dict[str, Any]:
    """Explanations: a recorded denial, who may access a graph, what a party may access, or
    the decision for one party and graph. Parties: `client=ID`, or `account`/`endpoint`/`group`."""
    policies = runtime().policies
    if args.get("request"):
        return policies.denial(args["request"])
    action: Action = "write" if args.get("action") == "write" else "read"
    party: Party | None = None
    if args.get("client"):
        party = _party_of_client(args["client"])
    elif args.get("account"):
        party = Party(args["account"], args.get("endpoint") or args["account"], frozenset(args.getlist("group")))
    graph = args.get("graph")
    if party and graph:
        return policies.engine.why(party, graph, action)
    if party:
        return policies.engine.what_may(party)
    if graph:
        return {"graph": graph, "action": action, "conditions": policies.engine.who_may(graph, action)}
    raise InputError("explain needs request=ID, graph=IRI, client=ID or account=A (with endpoint, group)")


@api.get("/explain")
def explain_api() -> Response:
    return jsonify(explain(request.args))


@api.get("/history")
def history() -> Response:
    return jsonify({"graph": "urn:lucid-hub:policies", "changes": runtime().policies.history()})


rules.register(api, "/rules")  # the same as /rules, for admins: every rule
rule_offers.register(api, "/rules")


@api.get("/store")
def store_state() -> Response:
    """The operator's store the hub keeps graphs in: where, how far behind, what stops it."""
    return jsonify({"stores": [{"name": sync.store.config.name, "store": sync.store.name,
                                "blank_nodes": sync.store.config.blank_nodes, "graphs": list(sync.store.config.graphs),
                                "behind": sync.behind, "written": sync.written, "problem": sync.problem,
                                "refused": sync.refused} for sync in runtime().remotes]})


@api.post("/store/capture")
def capture() -> Response:
    """Publish what applications changed in the store's copy of a graph (author `capture`)."""
    hub = runtime()
    if hub.capture is None:
        raise NotFoundError("this hub keeps no graphs in a store of the operator's")
    done = hub.capture.graph(graph_param(), store=request.args.get("store"))
    return jsonify({"graph": done.graph, "store": done.store, "patch": done.patch, "removed": done.removed,
                    "added": done.added})


@api.get("/clients")
def list_clients() -> Response:
    return jsonify({"clients": [c.to_json() for c in runtime().clients.list()]})


@api.post("/clients")
def create_client() -> Response:
    usage = '{"name": ..., "groups": [...], "attributes": ["claim=value"], "scopes": [...], "callback_prefixes": [...]}'
    data = json_object_body(usage)
    if not isinstance(data.get("name"), str):
        raise InputError(f"send {usage}")
    lists = {}
    for key in ("groups", "scopes", "callback_prefixes", "attributes"):
        value = data.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise InputError(f"{key} must be a list of strings")
        lists[key] = value
    record, secret = runtime().clients.create(data["name"], **lists)
    response = jsonify({**record.to_json(), "client_secret": secret})
    response.status_code = 201
    response.headers["Cache-Control"] = "no-store"
    return response


@api.delete("/clients/<client_id>")
def delete_client(client_id: str) -> Response:
    runtime().clients.delete(client_id)
    return Response(status=204)


@api.get("/receipts")
def list_receipts() -> Response:
    """Who applied what: each partner's newest receipt (an `as:Announce` in the graph's inbox,
    docs/streams.md "Receipts") with the chain position it names and how far behind it is."""
    graph = graph_param()
    length, out = receipts(runtime(), graph)
    return jsonify({"graph": graph, "length": length, "receipts": out})


@api.get("/subscriptions")
def list_subscriptions() -> Response:
    """WebSub subscriptions with their delivery figures (lag in patches, failures, state)."""
    return jsonify({"subscriptions": runtime().hub.subscriptions()})


@api.delete("/subscriptions/<int:subscription_id>")
def cancel_subscription(subscription_id: int) -> Response:
    """End a subscription; its callback is told (hub.mode=denied) that an admin cancelled it."""
    runtime().hub.cancel(subscription_id, "cancelled by an administrator of the hub")
    return Response(status=204)


@api.post("/subscriptions/<int:subscription_id>/redeliver")
def redeliver(subscription_id: int) -> Response:
    """Deliver again from ?from=PATCH_ID (default: the next undelivered patch); reactivates a
    failed subscription."""
    runtime().delivery.redeliver(subscription_id, request.args.get("from"))
    return Response(status=202)


# --- the admin page -----------------------------------------------------------------------

def _csrf_token() -> str:
    token = session.get("csrf")
    if not token:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


def _check_csrf() -> None:
    sent = request.form.get("csrf", "")
    if not sent or not hmac.compare_digest(sent, session.get("csrf", "")):
        raise ForbiddenError("the form's CSRF token is missing or wrong; reload the page and try again")


@ui.before_request
def _signed_in() -> Any:
    if request.method == "POST":
        _check_csrf()
    if request.endpoint in ("admin_ui.login", "admin_ui.static") or session.get("admin"):
        return None
    return redirect(url_for("admin_ui.login", next=request.path))


ui.add_app_template_filter(moment, "moment")  # (every page shows moments one way)


@ui.app_context_processor
def _template_globals() -> dict[str, Any]:
    return {"csrf_token": _csrf_token, "admin_user": session.get("admin"), "properties": list(PROPERTIES)}


@ui.route("/login", methods=["GET", "POST"])
def login() -> Any:
    error = None
    if request.method == "POST":
        username = request.form.get("username", "")[:255]
        limiter: FailureLimiter = current_app.extensions["admin_limiter"]
        keys = (f"admin {username}", request_address())
        wait = limiter.retry_after(*keys)
        if wait:
            raise RateLimitedError(f"too many failed sign-ins; try again in {wait} s", wait)
        if runtime().admins.verify(username, request.form.get("password", "")):
            session.clear()
            session.permanent = True
            session["admin"] = username
            session["csrf"] = secrets.token_urlsafe(32)
            target = request.args.get("next", "")
            return redirect(target if target.startswith("/admin/ui/") else url_for("admin_ui.conditions"))
        limiter.failed(*keys)
        error = "wrong username or password"
    return render_template("login.html", error=error), 401 if error else 200


@ui.post("/logout")
def logout() -> Any:
    session.clear()
    return redirect(url_for("admin_ui.login"))


@ui.get("/")
def conditions() -> Any:
    return render_template("conditions.html", conditions=runtime().policies.conditions(),
                           message=request.args.get("message"))


def _form_condition() -> Condition:
    data: dict[str, Any] = {"iri": request.form.get("iri", "").strip(), "label": request.form.get("label", "").strip(),
                            "comment": request.form.get("comment", "").strip()}
    for name in PROPERTIES:
        data[name] = [line.strip() for line in request.form.get(name, "").splitlines() if line.strip()]
    return Condition.from_json(data)


@ui.route("/edit", methods=["GET", "POST"])
def edit() -> Any:
    """New condition (no iri), or edit the one named by ?iri=."""
    iri = request.args.get("iri")
    policies = runtime().policies
    error = None
    if request.method == "POST":
        try:
            condition = _form_condition()
            who = f"admin {session['admin']} (admin page)"
            if iri:
                if condition.iri != iri:
                    raise PolicyError("a condition's IRI cannot change; create a new one instead")
                policies.update(condition, who)
            else:
                policies.create([condition], who)
            return redirect(url_for("admin_ui.conditions", message=f"saved {condition.iri}"))
        except LucidError as exc:
            error = str(exc)
        values = {name: request.form.get(name, "") for name in ("iri", "label", "comment", *PROPERTIES)}
        return render_template("edit.html", iri=iri, values=values, error=error), 400
    values = {"iri": "", "label": "", "comment": "", **{name: "" for name in PROPERTIES}}
    if iri:
        c = policies.get(iri)
        values = {"iri": c.iri, "label": c.label, "comment": c.comment,
                  **{name: "\n".join(getattr(c, name)) for name in PROPERTIES}}
    return render_template("edit.html", iri=iri, values=values, error=error)


@ui.post("/delete")
def delete() -> Any:
    iri = request.form.get("iri", "")
    runtime().policies.delete(iri, f"admin {session['admin']} (admin page)")
    return redirect(url_for("admin_ui.conditions", message=f"deleted {iri}"))


@ui.get("/explain")
def explain_page() -> Any:
    result, error = None, None
    if any(request.args.get(k) for k in ("request", "graph", "client", "account")):
        try:
            result = json.dumps(explain(request.args), indent=2, default=list)
        except LucidError as exc:
            error = str(exc)
    return render_template("explain.html", result=result, error=error, args=request.args)


@ui.get("/history")
def history_page() -> Any:
    return render_template("history.html", changes=list(reversed(runtime().policies.history())))
