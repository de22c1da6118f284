"""Deliveries a minute, for the console's chart

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 06:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "delivery_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("delivered", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("delivery_minutes")
