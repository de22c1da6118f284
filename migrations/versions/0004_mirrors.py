"""Mirrors of other hubs' graphs, and the patches they quarantined

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 14:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "mirrors",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("graph", sa.String(2048), nullable=False, unique=True),
        sa.Column("hub_url", sa.String(2048), nullable=False),
        sa.Column("publisher_url", sa.String(2048), nullable=False),
        sa.Column("client_id", sa.String(255), nullable=False),
        sa.Column("client_secret", sa.String(255), nullable=False),
        sa.Column("jwks", sa.Text(), nullable=False),
        sa.Column("hmac_secret", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("renew_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(1024), nullable=False),
        sa.Column("applied_total", big, nullable=False),
        sa.Column("quarantined_total", big, nullable=False),
        sa.Column("hmac_failures_total", big, nullable=False),
        sa.Column("last_applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "mirror_quarantine",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("mirror_id", sa.String(64), nullable=False, index=True),
        sa.Column("patch_id", sa.String(80), nullable=True),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mirror_quarantine")
    op.drop_table("mirrors")
