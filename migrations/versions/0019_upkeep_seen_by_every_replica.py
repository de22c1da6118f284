"""What one process finds needs attention, where every replica's console reads it: the mirrors'
upkeep in their rows (a round failing since when, how far behind its publisher each mirror is as
the publisher last said: the leader keeps the mirrors), and each replica's notes in its report
(what only its memory holds: its stores' rounds, its inboxes' refusals, the handovers it saw)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 19:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mirrors") as table:
        table.add_column(sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True))
        table.add_column(sa.Column("lag_patches", sa.Integer(), nullable=True))
        table.add_column(sa.Column("lag_more", sa.Boolean(), nullable=False, server_default=sa.false()))
        table.add_column(sa.Column("lag_asked_at", sa.DateTime(timezone=True), nullable=True))
        table.add_column(sa.Column("lag_since", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("replicas") as table:
        table.add_column(sa.Column("notes", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("replicas") as table:
        table.drop_column("notes")
    with op.batch_alter_table("mirrors") as table:
        for column in ("lag_since", "lag_asked_at", "lag_more", "lag_patches", "failing_since"):
            table.drop_column(column)
