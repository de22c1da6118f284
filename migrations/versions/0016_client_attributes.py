"""Clients carry attributes (claim=value) that access conditions may require

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 10:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("oauth_clients") as batch:
        batch.add_column(sa.Column("attributes", sa.String(4096), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("oauth_clients") as batch:
        batch.drop_column("attributes")
