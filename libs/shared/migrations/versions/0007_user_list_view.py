"""app_user.list_view: the snapshot list's layout a person chose ("list" or "grid")

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 08:10:00

Remembered per user (the web UI's list/grid toggle), not per browser: the same view on the phone
and the desktop. Existing users get "list" (the layout they had).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("app_user") as batch:
        batch.add_column(sa.Column("list_view", sa.String(length=8), server_default="list", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("app_user") as batch:
        batch.drop_column("list_view")
