"""snapshot.started_at and an index for per-host politeness (DOMAIN_MAX_CONCURRENT, …)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 16:00:00

The crawl-runner counts, per host name, the snapshots being captured and the captures started in
the last minute before it starts more (``crawl_runner.queries.host_allowance``). Existing rows
get no start time (they are not recent), and snapshots made from now on carry their host name
from the start (the result-projector filled it in later before; it still fills in old rows).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshot") as batch:
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_snapshot_domain_status_started_at", "snapshot", ["domain", "status", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_snapshot_domain_status_started_at", table_name="snapshot")
    with op.batch_alter_table("snapshot") as batch:
        batch.drop_column("started_at")
