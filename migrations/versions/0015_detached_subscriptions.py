"""A subscription whose WebSocket closed is detached, and ended when not resumed in time

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("query_subscriptions") as batch:
        batch.add_column(sa.Column("detached_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("query_subscriptions") as batch:
        batch.drop_column("detached_at")
