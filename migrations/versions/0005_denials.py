"""Recorded access denials, shared by every process of a hub (explain by request id)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 21:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "denials",
        sa.Column("request_id", sa.String(32), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )
    op.create_index("ix_denials_created_at", "denials", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_denials_created_at", table_name="denials")
    op.drop_table("denials")
