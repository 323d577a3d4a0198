"""snapshot.expected_results: how many results a sealed snapshot's plan ends with

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 15:40:00

The result-projector marks a snapshot indexed only once its index holds that many results, so
"indexed" means complete even when result events arrive after the seal.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expected_results", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.drop_column("expected_results")
