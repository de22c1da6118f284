"""What went wrong lately with continuous queries and windows, for the console's attention
list: those ended (by lost access, a revoked token, an overrun budget: their reason), and
those whose webhook is failing now."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select

from lucid_hub.db.models import QuerySubscription, WindowedQuery
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware


def troubles(db: Database, since: datetime, limit: int = 50) -> list[dict[str, Any]]:
    """Queries and windows ended since `since`, and those whose webhook fails now; newest first."""
    out: list[dict[str, Any]] = []
    for model, kind in ((QuerySubscription, "query"), (WindowedQuery, "window")):
        label = QuerySubscription.id if model is QuerySubscription else WindowedQuery.name
        query = (select(label.label("name"), model.account, model.state, model.reason, model.updated_at,
                        model.callback, model.callback_attempts, model.callback_error)
                 .where(or_(and_(model.state == "ended", model.updated_at >= since), model.callback_attempts > 0))
                 .order_by(model.updated_at.desc()).limit(limit))
        with db.engine.connect() as conn:
            for row in conn.execute(query):
                out.append({"kind": kind, "name": row.name, "account": row.account, "state": row.state,
                            "reason": row.reason, "at": aware(row.updated_at), "callback": row.callback,
                            "attempts": row.callback_attempts, "error": row.callback_error})
    return sorted(out, key=lambda t: t["at"], reverse=True)[:limit]


def listing(db: Database, limit: int = 200) -> dict[str, list[dict[str, Any]]]:
    """Every continuous query and window (the newest `limit` of each), for the console: who
    holds it, over what, how it stands (ended: why), its last notification, its webhook."""
    out: dict[str, list[dict[str, Any]]] = {}
    for model, kind in ((QuerySubscription, "queries"), (WindowedQuery, "windows")):
        with db.session() as session:
            rows = list(session.scalars(select(model).order_by(model.created_at.desc()).limit(limit)))
            out[kind] = [_row(r) for r in rows]
    return out


def _row(r: Any) -> dict[str, Any]:
    common = {"account": r.account, "state": r.state, "reason": r.reason, "sequence": r.sequence, "query": r.query,
              "created": aware(r.created_at), "updated": aware(r.updated_at), "callback": r.callback,
              "attempts": r.callback_attempts, "error": r.callback_error}
    if isinstance(r, WindowedQuery):
        return {**common, "name": r.name, "graphs": r.graphs, "range": r.range_spec, "step": r.step_spec,
                "next": aware(r.next_end_at) if r.next_end_at else None, "next_position": r.next_end_position}
    return {**common, "name": r.alias or r.id, "id": r.id, "detached": aware(r.detached_at) if r.detached_at else None}
