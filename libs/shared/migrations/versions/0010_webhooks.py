"""webhook and webhook_delivery (issue 30: webhooks)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 16:00:00

A user's (or, by an admin, the instance's) webhooks, made by ingest, and the deliveries the
webhook-sender makes of each event to each of them, with their attempts and outcome.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("secret_sealed", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook")),
    )
    op.create_index("ix_webhook_owner", "webhook", ["owner"])
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("webhook_id", sa.String(length=32), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("event_key", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=1000), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["webhook_id"], ["webhook.id"], name=op.f("fk_webhook_delivery_webhook_id_webhook"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_delivery")),
        sa.UniqueConstraint("webhook_id", "event_key", name=op.f("uq_webhook_delivery_webhook_id_event_key")),
    )
    op.create_index("ix_webhook_delivery_next_attempt_at", "webhook_delivery", ["next_attempt_at"])
    op.create_index("ix_webhook_delivery_webhook_id_created_at", "webhook_delivery", ["webhook_id", "created_at"])


def downgrade() -> None:
    op.drop_table("webhook_delivery")
    op.drop_table("webhook")
