"""Windowed queries' names are their owners': unique per party, keyed by an id of the hub's

A query made before keeps its name as its id, so its results keep pointing at it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 22:00:00
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = ["account", "endpoint_id", "groups", "token_id", "query", "graphs", "range_spec", "step_spec", "with_state",
           "state", "reason", "next_end_at", "next_end_position", "sequence", "callback", "secret", "callback_seq",
           "callback_attempts", "callback_next_at", "callback_error", "created_at", "updated_at"]


def _query_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("account", sa.String(255), nullable=False),
        sa.Column("endpoint_id", sa.String(255), nullable=False),
        sa.Column("groups", sa.String(4096), nullable=False),
        sa.Column("token_id", sa.String(255), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("graphs", sa.Text(), nullable=False),
        sa.Column("range_spec", sa.String(32), nullable=False),
        sa.Column("step_spec", sa.String(32), nullable=False),
        sa.Column("with_state", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("next_end_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_end_position", sa.Integer(), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("callback", sa.String(2048), nullable=True),
        sa.Column("secret", sa.String(200), nullable=True),
        sa.Column("callback_seq", sa.Integer(), nullable=False),
        sa.Column("callback_attempts", sa.Integer(), nullable=False),
        sa.Column("callback_next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("callback_error", sa.String(1024), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ]


def _rows(name: str) -> list[dict[str, Any]]:
    """A table's rows, its columns' values typed as its reflected schema says (times as times)."""
    bind = op.get_bind()
    table = sa.Table(name, sa.MetaData(), autoload_with=bind)
    return [dict(r._mapping) for r in bind.execute(sa.select(table))]


def _drop_both() -> None:
    op.drop_table("windowed_results")
    op.drop_index("ix_windowed_queries_state", table_name="windowed_queries")
    op.drop_index("ix_windowed_queries_account", table_name="windowed_queries")
    op.drop_table("windowed_queries")


def _results_table(key: str) -> sa.Table:
    return op.create_table(
        "windowed_results",
        sa.Column("query", sa.String(64), sa.ForeignKey(f"windowed_queries.{key}", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("sequence", sa.Integer(), primary_key=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def upgrade() -> None:
    # The tables are made anew (SQLite cannot change a primary key in place); they are small:
    # the queries and the last LUCID_QUERY_RETAIN results of each.
    queries, results = _rows("windowed_queries"), _rows("windowed_results")
    _drop_both()
    table = op.create_table(
        "windowed_queries",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        *_query_columns(),
        sa.UniqueConstraint("account", "name", name="uq_windowed_queries_account_name"),
    )
    op.create_index("ix_windowed_queries_account", "windowed_queries", ["account"])
    op.create_index("ix_windowed_queries_state", "windowed_queries", ["state"])
    kept = _results_table("id")
    op.bulk_insert(table, [{"id": q["name"], **q} for q in queries])
    op.bulk_insert(kept, results)


def downgrade() -> None:
    queries, results = _rows("windowed_queries"), _rows("windowed_results")
    names = [q["name"] for q in queries]
    if len(names) != len(set(names)):
        raise RuntimeError("two parties hold windowed queries of the same name; the previous schema keys them by "
                           "name alone: delete one of each pair before downgrading")
    _drop_both()
    table = op.create_table("windowed_queries", sa.Column("name", sa.String(64), primary_key=True),
                            *_query_columns())
    op.create_index("ix_windowed_queries_account", "windowed_queries", ["account"])
    op.create_index("ix_windowed_queries_state", "windowed_queries", ["state"])
    kept = _results_table("name")
    by_id = {q["id"]: q["name"] for q in queries}
    op.bulk_insert(table, [{k: q[k] for k in ["name", *COLUMNS]} for q in queries])
    op.bulk_insert(kept, [{**r, "query": by_id[r["query"]]} for r in results])
