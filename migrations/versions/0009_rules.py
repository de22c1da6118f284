"""Event-condition-action rules: firing history, deferred rules' cursors, pending reactions

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 22:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rule_firings",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rule", sa.String(2048), nullable=False),
        sa.Column("trigger", sa.String(80), nullable=False),
        sa.Column("graph", sa.String(2048), nullable=False),
        sa.Column("coupling", sa.String(16), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("instances", sa.Integer(), nullable=False),
        sa.Column("kept", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("patches", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("rule", "trigger", name="uq_rule_firings_rule_trigger"),
    )
    op.create_index("ix_rule_firings_rule", "rule_firings", ["rule"])
    op.create_table(
        "rule_cursors",
        sa.Column("rule", sa.String(2048), primary_key=True),
        sa.Column("graph", sa.String(2048), nullable=False),
        sa.Column("patch", sa.String(80), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "pending_reactions",
        sa.Column("patch_id", sa.String(80), sa.ForeignKey("patches.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("graph", sa.String(2048), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pending_reactions")
    op.drop_table("rule_cursors")
    op.drop_index("ix_rule_firings_rule", table_name="rule_firings")
    op.drop_table("rule_firings")
