"""Rules offered between hubs: offers this hub made to partners, and offers partners made to it

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 12:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rule_offers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("peer", sa.String(1024), nullable=False),
        sa.Column("rules", sa.Text(), nullable=False),
        sa.Column("rule_iris", sa.Text(), nullable=False),
        sa.Column("summaries", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("jwks", sa.Text(), nullable=False),
        sa.Column("client_id", sa.String(255), nullable=False),
        sa.Column("client_secret", sa.String(255), nullable=False),
        sa.Column("location", sa.String(1024), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_rule_offers_state", "rule_offers", ["direction", "state"])


def downgrade() -> None:
    op.drop_index("ix_rule_offers_state", table_name="rule_offers")
    op.drop_table("rule_offers")
