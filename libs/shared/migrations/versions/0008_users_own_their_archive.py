"""Multi-user: roles, token owners, quotas, shares; existing rows go to the first user

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 15:30:00

Before this revision every account saw and changed everything, so every existing user becomes an
``admin`` (nobody loses what they could do); users made later are ``member``s unless made admins.
Rows owned by the operator's default name ``system`` (every crawl and feed so far, unless
``ARCHIVE_USER`` was set) are given to the first user (the oldest account), and so are API tokens;
with no user yet they stay ``system``'s. Nothing moves on disk: ``output_dir`` keeps the path the
files are at. ``ONLY_NEW``'s dedup keys hash the owner's name, so the keys of reassigned snapshots
are computed again (the new owner's earlier captures still count as "archived before").
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("app_user") as batch:
        batch.add_column(sa.Column("role", sa.String(length=16), server_default="member", nullable=False))
        batch.add_column(sa.Column("max_snapshots_per_day", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_disk_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("max_concurrent_crawls", sa.Integer(), nullable=True))
    with op.batch_alter_table("api_token") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=64), server_default="system", nullable=False))
        batch.create_index("ix_api_token_owner", ["owner"])
    op.create_table(
        "share",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=128), nullable=False),
        sa.Column("audience", sa.String(length=16), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_share")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_share_token_sha256")),
    )
    op.create_index("ix_share_owner", "share", ["owner"])
    op.create_index("ix_crawl_created_by", "crawl", ["created_by"])

    conn = op.get_bind()
    conn.execute(sa.text("UPDATE app_user SET role = 'admin'"))
    first = conn.execute(sa.text("SELECT username FROM app_user ORDER BY created_at, id LIMIT 1")).scalar()
    if not first:
        return
    for table in ("crawl", "crawl_schedule"):
        conn.execute(sa.text(f"UPDATE {table} SET created_by = :u WHERE created_by = 'system'"), {"u": first})
    conn.execute(sa.text("UPDATE api_token SET owner = :u"), {"u": first})
    rows = conn.execute(
        sa.text(
            "SELECT s.id, s.url_hash FROM snapshot s JOIN crawl c ON c.id = s.crawl_id "
            "WHERE s.dedup_key IS NOT NULL AND c.created_by = :u ORDER BY s.id DESC"
        ),
        {"u": first},
    ).all()
    taken: dict[str, str] = {}
    for sid, hashed in rows:  # newest first: were two captures of a URL to meet, the newest keeps the key
        taken.setdefault(hashlib.sha256(f"{first}\n{hashed}".encode()).hexdigest(), sid)
    ids = [{"id": sid} for sid, _ in rows]
    for start in range(0, len(ids), 1000):
        conn.execute(sa.text("UPDATE snapshot SET dedup_key = NULL WHERE id = :id"), ids[start : start + 1000])
    keys = [{"id": sid, "key": key} for key, sid in taken.items()]
    for start in range(0, len(keys), 1000):
        conn.execute(sa.text("UPDATE snapshot SET dedup_key = :key WHERE id = :id"), keys[start : start + 1000])


def downgrade() -> None:
    op.drop_index("ix_crawl_created_by", table_name="crawl")
    op.drop_index("ix_share_owner", table_name="share")
    op.drop_table("share")
    with op.batch_alter_table("api_token") as batch:
        batch.drop_index("ix_api_token_owner")
        batch.drop_column("owner")
    with op.batch_alter_table("app_user") as batch:
        batch.drop_column("max_concurrent_crawls")
        batch.drop_column("max_disk_bytes")
        batch.drop_column("max_snapshots_per_day")
        batch.drop_column("role")
