"""WebSub subscriptions with their delivery cursors

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 11:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "subscriptions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("graph", sa.String(2048), nullable=False),
        sa.Column("callback", sa.String(2048), nullable=False),
        sa.Column("account", sa.String(255), nullable=False),
        sa.Column("endpoint_id", sa.String(255), nullable=False),
        sa.Column("groups", sa.String(4096), nullable=False),
        sa.Column("secret", sa.String(200), nullable=True),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_seq", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(1024), nullable=False),
        sa.Column("delivered_total", big, nullable=False),
        sa.Column("failures_total", big, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("graph", "callback", name="uq_subscriptions_graph_callback"),
    )
    op.create_index("ix_subscriptions_graph", "subscriptions", ["graph"])
    op.create_index("ix_subscriptions_state", "subscriptions", ["state"])


def downgrade() -> None:
    op.drop_index("ix_subscriptions_state", "subscriptions")
    op.drop_index("ix_subscriptions_graph", "subscriptions")
    op.drop_table("subscriptions")
