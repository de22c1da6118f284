"""OAuth clients, revoked tokens, admin accounts, hub state

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 11:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oauth_clients",
        sa.Column("client_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("secret_hash", sa.String(255), nullable=False),
        sa.Column("groups", sa.String(4096), nullable=False),
        sa.Column("scopes", sa.String(1024), nullable=False),
        sa.Column("callback_prefixes", sa.String(8192), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "revoked_tokens",
        sa.Column("jti", sa.String(128), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_revoked_tokens_expires_at", "revoked_tokens", ["expires_at"])
    op.create_table(
        "admin_accounts",
        sa.Column("username", sa.String(255), primary_key=True),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "hub_state",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.String(4096), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hub_state")
    op.drop_table("admin_accounts")
    op.drop_index("ix_revoked_tokens_expires_at", "revoked_tokens")
    op.drop_table("revoked_tokens")
    op.drop_table("oauth_clients")
