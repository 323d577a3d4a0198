"""seeds as rows, capture outcomes, cancellation, index projection, token scopes

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 14:28:30.282640

- ``crawl.seeds`` (one JSON value) becomes ``crawl_seed`` rows, turned into snapshots a batch at a
  time (``crawl.seed_count`` / ``crawl.seeded``); a crawl that started already is fully seeded.
- ``snapshot.url_hash`` is recomputed on the RFC 3986 dedup key (``urls.url_key``).
- ``snapshot_task.results`` and ``kind`` go (the index is the projector's projection of rows).
"""

from __future__ import annotations

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "crawl_seed",
        sa.Column("crawl_id", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("bookmarked_at", TS, nullable=True),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("credentials", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["crawl_id"], ["crawl.id"], name=op.f("fk_crawl_seed_crawl_id_crawl"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("crawl_id", "position", name=op.f("pk_crawl_seed")),
    )
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scope", sa.String(length=16), nullable=False, server_default="write"))

    with op.batch_alter_table("crawl", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_files", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("seed_count", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("seeded", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("cancelled_at", TS, nullable=True))
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=False, server_default=""))

    _move_seeds()
    with op.batch_alter_table("crawl", schema=None) as batch_op:
        batch_op.drop_column("seeds")

    with op.batch_alter_table("crawl_schedule", schema=None) as batch_op:
        batch_op.add_column(sa.Column("items_rejected", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("last_rejection", sa.Text(), nullable=False, server_default=""))

    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.add_column(sa.Column("http_status", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("final_url", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("network_error", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("credentials", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("indexed_at", TS, nullable=True))
        batch_op.create_index(
            "ix_snapshot_crawl_id_status_depth_created_at", ["crawl_id", "status", "depth", "created_at"], unique=False
        )
    _rehash_urls()

    with op.batch_alter_table("snapshot_task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("started_at", TS, nullable=True))
        batch_op.drop_column("results")
        batch_op.drop_column("kind")


def _move_seeds() -> None:
    """``crawl.seeds`` JSON → ``crawl_seed`` rows; crawls past ``queued`` count as seeded."""
    conn = op.get_bind()
    crawl = sa.table(
        "crawl",
        sa.column("id"),
        sa.column("seeds", sa.JSON),
        sa.column("status"),
        sa.column("seed_count"),
        sa.column("seeded"),
    )
    seed = sa.table(
        "crawl_seed",
        sa.column("crawl_id"),
        sa.column("position"),
        sa.column("url"),
        sa.column("title"),
        sa.column("tags", sa.JSON),
        sa.column("bookmarked_at", TS),
        sa.column("source"),
        sa.column("credentials"),
    )
    for crawl_id, seeds, status in conn.execute(sa.select(crawl.c.id, crawl.c.seeds, crawl.c.status)).all():
        if isinstance(seeds, str):
            seeds = json.loads(seeds)
        seeds = [s for s in seeds or [] if isinstance(s, dict) and s.get("url")]
        rows = [
            {
                "crawl_id": crawl_id,
                "position": i,
                "url": s["url"],
                "title": s.get("title"),
                "tags": list(s.get("tags") or []),
                "bookmarked_at": _when(s.get("bookmarked_at")),
                "source": "",
                "credentials": "",
            }
            for i, s in enumerate(seeds)
        ]
        for start in range(0, len(rows), 500):
            conn.execute(seed.insert(), rows[start : start + 500])
        seeded = len(rows) if status != "queued" else 0
        conn.execute(crawl.update().where(crawl.c.id == crawl_id).values(seed_count=len(rows), seeded=seeded))


def _when(value):
    from datetime import datetime

    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _rehash_urls() -> None:
    """``snapshot.url_hash`` on the dedup key (a duplicate under the new key keeps its old hash)."""
    from boxcar.shared.urls import url_key

    conn = op.get_bind()
    snapshot = sa.table("snapshot", sa.column("id"), sa.column("crawl_id"), sa.column("url"), sa.column("url_hash"))
    rows = conn.execute(sa.select(snapshot.c.id, snapshot.c.crawl_id, snapshot.c.url, snapshot.c.url_hash)).all()
    taken = {(r.crawl_id, r.url_hash) for r in rows}
    for row in rows:
        new = hashlib.sha256(url_key(row.url).encode("utf-8")).hexdigest()
        if new != row.url_hash and (row.crawl_id, new) not in taken:
            conn.execute(snapshot.update().where(snapshot.c.id == row.id).values(url_hash=new))
            taken.add((row.crawl_id, new))


def downgrade() -> None:
    with op.batch_alter_table("snapshot_task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="hooks"))
        batch_op.add_column(sa.Column("results", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.drop_column("started_at")

    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.drop_index("ix_snapshot_crawl_id_status_depth_created_at")
        for column in ("indexed_at", "credentials", "attempts", "network_error", "final_url", "http_status"):
            batch_op.drop_column(column)

    with op.batch_alter_table("crawl_schedule", schema=None) as batch_op:
        batch_op.drop_column("last_rejection")
        batch_op.drop_column("items_rejected")

    with op.batch_alter_table("crawl", schema=None) as batch_op:
        batch_op.add_column(sa.Column("seeds", sa.JSON(), nullable=False, server_default="[]"))
        for column in ("error", "cancelled_at", "seeded", "seed_count", "source_files"):
            batch_op.drop_column(column)

    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.drop_column("scope")

    op.drop_table("crawl_seed")
