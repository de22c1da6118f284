"""Continuous SPARQL query subscriptions and their notifications

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "query_subscriptions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("alias", sa.String(255), nullable=False),
        sa.Column("account", sa.String(255), nullable=False),
        sa.Column("endpoint_id", sa.String(255), nullable=False),
        sa.Column("groups", sa.String(4096), nullable=False),
        sa.Column("token_id", sa.String(255), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("default_graphs", sa.Text(), nullable=True),
        sa.Column("named_graphs", sa.Text(), nullable=True),
        sa.Column("form", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("refusal", sa.String(64), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("results", sa.Text(), nullable=False),
        sa.Column("callback", sa.String(2048), nullable=True),
        sa.Column("secret", sa.String(200), nullable=True),
        sa.Column("callback_seq", sa.Integer(), nullable=False),
        sa.Column("callback_attempts", sa.Integer(), nullable=False),
        sa.Column("callback_next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("callback_error", sa.String(1024), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_query_subscriptions_account", "query_subscriptions", ["account"])
    op.create_index("ix_query_subscriptions_state", "query_subscriptions", ["state"])
    op.create_table(
        "query_notifications",
        sa.Column("subscription", sa.String(64), sa.ForeignKey("query_subscriptions.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("sequence", sa.Integer(), primary_key=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("query_notifications")
    op.drop_index("ix_query_subscriptions_state", table_name="query_subscriptions")
    op.drop_index("ix_query_subscriptions_account", table_name="query_subscriptions")
    op.drop_table("query_subscriptions")
