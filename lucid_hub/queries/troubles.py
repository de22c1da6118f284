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
