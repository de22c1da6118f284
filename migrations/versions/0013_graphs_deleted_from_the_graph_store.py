"""A graph deleted from the Graph Store is gone (404) while its history stays

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 22:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("graphs") as batch:
        batch.add_column(sa.Column("dropped", sa.String(80), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("graphs") as batch:
        batch.drop_column("dropped")
