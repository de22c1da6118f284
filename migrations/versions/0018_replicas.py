"""Each serving process's report of itself: every replica shows on the console's hub page

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 16:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lag", sa.Integer(), nullable=False),
        sa.Column("leader", sa.Boolean(), nullable=False),
        sa.Column("failing", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("replicas")
