"""Windowed queries registered in C-SPARQL: the window's view, static graphs, the text as registered

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("windowed_queries") as batch:
        batch.add_column(sa.Column("view", sa.String(16), nullable=False, server_default="changes"))
        batch.add_column(sa.Column("dataset", sa.Text(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("source", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("windowed_queries") as batch:
        batch.drop_column("source")
        batch.drop_column("dataset")
        batch.drop_column("view")
