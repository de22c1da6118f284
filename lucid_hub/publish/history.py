"""Reading a graph's history from the archive alone (no store, so it works beside a running hub)."""

from __future__ import annotations

from sqlalchemy import select

from lucid_hub.db.models import Graph, PatchRecord
from lucid_hub.db.session import Database
from lucid_hub.errors import NotFoundError


def graph_history(db: Database, graph: str) -> list[PatchRecord]:
    """The graph's patches, oldest first."""
    with db.session() as session:
        if not db.is_current() or session.get(Graph, graph) is None:
            raise NotFoundError(f"unknown graph <{graph}>")
        return list(session.scalars(select(PatchRecord).where(PatchRecord.graph == graph)
                                    .order_by(PatchRecord.seq)))
