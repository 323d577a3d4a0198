"""snapshot.dedup_key (ONLY_NEW decided where snapshots are made), snapshot.refusal, crawl.merged,
login_throttle

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 17:30:00

- ``snapshot.dedup_key``: sha256 of (user, URL key), unique, set on a snapshot made by a crawl
  with ``ONLY_NEW`` while it is open or once it archived something; the crawl-runner's insert of a
  snapshot with a key some other snapshot holds does nothing, and the URL is counted merged. Old
  rows: the newest snapshot with a succeeded result of each (user, URL) gets its key.
- ``snapshot.refusal``: why the egress policy refused the page ("" when it did not).
- ``crawl.merged``: seeds and discovered URLs merged into another crawl's snapshot.
- ``login_throttle``: failed logins per account name and per client address, and lock-outs.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshot") as batch:
        batch.add_column(sa.Column("dedup_key", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("refusal", sa.Text(), server_default="", nullable=False))
        batch.create_index("uq_snapshot_dedup_key", ["dedup_key"], unique=True)
    with op.batch_alter_table("crawl") as batch:
        batch.add_column(sa.Column("merged", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lockouts", sa.Integer(), nullable=False),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_login_throttle")),
    )
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT s.id, s.url_hash, c.created_by FROM snapshot s JOIN crawl c ON c.id = s.crawl_id "
            "WHERE EXISTS (SELECT 1 FROM archiveresult r WHERE r.snapshot_id = s.id AND r.status = 'succeeded') "
            "ORDER BY s.id DESC"
        )
    ).all()
    taken: dict[str, str] = {}
    for snapshot_id, url_hash, user in rows:  # newest first: the newest archived snapshot keeps the key
        taken.setdefault(hashlib.sha256(f"{user}\n{url_hash}".encode()).hexdigest(), snapshot_id)
    items = list(taken.items())
    for start in range(0, len(items), 1000):
        conn.execute(
            sa.text("UPDATE snapshot SET dedup_key = :key WHERE id = :id"),
            [{"key": key, "id": sid} for key, sid in items[start : start + 1000]],
        )


def downgrade() -> None:
    op.drop_table("login_throttle")
    with op.batch_alter_table("crawl") as batch:
        batch.drop_column("merged")
    with op.batch_alter_table("snapshot") as batch:
        batch.drop_index("uq_snapshot_dedup_key")
        batch.drop_column("refusal")
        batch.drop_column("dedup_key")
