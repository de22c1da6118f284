"""Windowed continuous queries and their output streams

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 15:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "windowed_queries",
        sa.Column("name", sa.String(64), primary_key=True),
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
    )
    op.create_index("ix_windowed_queries_account", "windowed_queries", ["account"])
    op.create_index("ix_windowed_queries_state", "windowed_queries", ["state"])
    op.create_table(
        "windowed_results",
        sa.Column("query", sa.String(64), sa.ForeignKey("windowed_queries.name", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("sequence", sa.Integer(), primary_key=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("windowed_results")
    op.drop_index("ix_windowed_queries_state", table_name="windowed_queries")
    op.drop_index("ix_windowed_queries_account", table_name="windowed_queries")
    op.drop_table("windowed_queries")
