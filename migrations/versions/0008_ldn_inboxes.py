"""Linked Data Notifications inboxes

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 19:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ldn_notifications",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("graph", sa.String(2048), nullable=False),
        sa.Column("sender", sa.String(255), nullable=False),
        sa.Column("endpoint_id", sa.String(255), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("kinds", sa.String(1024), nullable=False),
        sa.Column("objects", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_ldn_notifications_graph", "ldn_notifications", ["graph"])
    op.create_index("ix_ldn_notifications_sender", "ldn_notifications", ["sender"])


def downgrade() -> None:
    op.drop_index("ix_ldn_notifications_sender", table_name="ldn_notifications")
    op.drop_index("ix_ldn_notifications_graph", table_name="ldn_notifications")
    op.drop_table("ldn_notifications")
