"""Operations: liveness, readiness, keys."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from sqlalchemy import text

from lucid_hub.web.common import runtime
from lucid_hub.web.errors import text as plain

blueprint = Blueprint("ops", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    return plain(200, "ok")


@blueprint.get("/readyz")
def readyz() -> Response:
    try:
        with runtime().db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # readiness reports, it does not fail
        return plain(503, f"database unreachable: {type(exc).__name__}")
    return plain(200, "ready")


@blueprint.get("/.well-known/jwks.json")
def jwks() -> Response:
    response = jsonify(runtime().keys.jwks())
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


@blueprint.get("/metrics")
def metrics() -> Response:
    """Prometheus text format. Labels are subscription ids only (no graph IRIs or callback
    URLs): the admin API maps ids to subscriptions."""
    lines = ["# HELP lucid_subscription_lag Patches of the graph not yet delivered to the subscription.",
             "# TYPE lucid_subscription_lag gauge"]
    subs = runtime().websub.subscriptions()
    lines += [f'lucid_subscription_lag{{subscription="{s["id"]}",state="{s["state"]}"}} {s["lag"]}' for s in subs]
    lines += ["# HELP lucid_subscription_delivered_total Patches delivered to the subscription.",
              "# TYPE lucid_subscription_delivered_total counter"]
    lines += [f'lucid_subscription_delivered_total{{subscription="{s["id"]}"}} {s["delivered"]}' for s in subs]
    lines += ["# HELP lucid_subscription_failures_total Failed delivery attempts.",
              "# TYPE lucid_subscription_failures_total counter"]
    lines += [f'lucid_subscription_failures_total{{subscription="{s["id"]}"}} {s["failures"]}' for s in subs]
    lines += ["# HELP lucid_subscription_last_success_timestamp_seconds Time of the last delivery.",
              "# TYPE lucid_subscription_last_success_timestamp_seconds gauge"]
    from datetime import datetime

    for s in subs:
        if s["last_success_at"]:
            stamp = datetime.fromisoformat(s["last_success_at"]).timestamp()
            lines.append(f'lucid_subscription_last_success_timestamp_seconds{{subscription="{s["id"]}"}} {stamp:.3f}')
    lines += _mirror_metrics()
    return Response("\n".join(lines) + "\n", mimetype="text/plain; version=0.0.4")


def _mirror_metrics() -> list[str]:
    """Mirrors in aggregate: their ids are part of their callback URLs, not for this page."""
    from collections import Counter

    from lucid_hub.mirror import list_mirrors

    mirrors = list_mirrors(runtime().db)
    lines = ["# HELP lucid_mirrors Mirrors of other hubs' graphs, by state.", "# TYPE lucid_mirrors gauge"]
    states = Counter(m["state"] for m in mirrors)
    lines += [f'lucid_mirrors{{state="{state}"}} {count}' for state, count in sorted(states.items())]
    for key, meaning in (("applied", "Patches verified and applied to mirrors."),
                         ("quarantined", "Delivered patches mirrors refused to apply."),
                         ("hmac_failures", "Deliveries with a wrong HMAC, ignored.")):
        lines += [f"# HELP lucid_mirror_{key}_total {meaning}", f"# TYPE lucid_mirror_{key}_total counter",
                  f"lucid_mirror_{key}_total {sum(int(m[key]) for m in mirrors)}"]
    return lines

