"""What went wrong lately with continuous queries and windows, for the console's attention
list: those ended (by lost access, a revoked token, an overrun budget: their reason), and
those whose webhook is failing now."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select

from lucid_hub.db.models import QuerySubscription, WindowedQuery, WindowedResult
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
    holds it, over what graphs, how it stands (ended: why), its last notification and results
    (a query's current results, a window's last element), its webhook."""
    out: dict[str, list[dict[str, Any]]] = {}
    with db.session() as session:
        queries = list(session.scalars(select(QuerySubscription).order_by(QuerySubscription.created_at.desc())
                                       .limit(limit)))
        out["queries"] = [_row(r) for r in queries]
        windows = list(session.execute(
            select(WindowedQuery, WindowedResult.created_at, WindowedResult.body)
            .outerjoin(WindowedResult, and_(WindowedResult.query == WindowedQuery.id,
                                            WindowedResult.sequence == WindowedQuery.sequence))
            .order_by(WindowedQuery.created_at.desc()).limit(limit)))  # (each window's last element, in one read)
        out["windows"] = [{**_row(w), "last": aware(at) if at else None, "result": _fold(body)}
                          for w, at, body in windows]
    return out


SHOWN_ROWS = 10  # result rows a query's entry shows
FOLDED = 2000  # characters of a window's last element shown


def _fold(body: str | None) -> str:
    return "" if not body else body if len(body) <= FOLDED else body[:FOLDED] + " …"


def _graphs(*lists: str | None) -> list[str]:
    graphs: list[str] = []
    for raw in lists:
        try:
            value = json.loads(raw) if raw else []
        except ValueError:
            value = []
        graphs += [str(g) for g in value if str(g) not in graphs] if isinstance(value, list) else []
    return graphs


def _results(raw: str) -> dict[str, Any]:
    """A query's current results, a few rows of them: {vars, rows (values), count} or {boolean}."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        value = {}
    if "boolean" in value:
        return {"boolean": bool(value["boolean"])}
    names = [str(v) for v in value.get("vars", [])]
    rows = value.get("rows", [])
    shown = [[str((row.get(v) or {}).get("value", "")) for v in names] for row in rows[:SHOWN_ROWS]]
    return {"vars": names, "rows": shown, "count": len(rows)}


def _row(r: Any) -> dict[str, Any]:
    common = {"account": r.account, "state": r.state, "reason": r.reason, "sequence": r.sequence, "query": r.query,
              "created": aware(r.created_at), "updated": aware(r.updated_at), "callback": r.callback,
              "attempts": r.callback_attempts, "error": r.callback_error}
    if isinstance(r, WindowedQuery):
        return {**common, "name": r.name, "graphs": _graphs(r.graphs), "range": r.range_spec, "step": r.step_spec,
                "next": aware(r.next_end_at) if r.next_end_at else None, "next_position": r.next_end_position}
    return {**common, "name": r.alias or r.id, "id": r.id, "graphs": _graphs(r.default_graphs, r.named_graphs),
            "results": _results(r.results),
            "detached": aware(r.detached_at) if r.detached_at else None}
