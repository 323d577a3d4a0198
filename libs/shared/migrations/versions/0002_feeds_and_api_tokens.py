"""feeds and api tokens

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 02:28:16.395866
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_api_token_token_sha256")),
    )
    op.create_table(
        "feed_item",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("schedule_id", sa.String(length=32), nullable=False),
        sa.Column("item_key", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("crawl_id", sa.String(length=32), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["crawl_schedule.id"],
            name=op.f("fk_feed_item_schedule_id_crawl_schedule"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feed_item")),
        sa.UniqueConstraint("schedule_id", "item_key", name=op.f("uq_feed_item_schedule_id_item_key")),
    )
    with op.batch_alter_table("crawl_schedule", schema=None) as batch_op:
        batch_op.add_column(sa.Column("feed_url", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("etag", sa.String(length=512), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("last_modified", sa.String(length=128), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("last_polled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("crawl_schedule", schema=None) as batch_op:
        batch_op.drop_column("last_polled_at")
        batch_op.drop_column("failures")
        batch_op.drop_column("last_modified")
        batch_op.drop_column("etag")
        batch_op.drop_column("feed_url")

    op.drop_table("feed_item")
    op.drop_table("api_token")
