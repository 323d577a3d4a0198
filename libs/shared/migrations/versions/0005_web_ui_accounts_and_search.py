"""web UI: accounts and sessions, list-page indexes, snapshot domain, full-text search

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 15:20:00

- ``app_user`` (Argon2id password hashes) and ``user_session`` (sha256 of the cookie's token).
- ``snapshot.domain`` (the URL's host name, for the list's domain filter), filled for old rows.
- Indexes for the snapshot list: newest first, by status, domain, crawl, and tag.
- The full-text index (``boxcar.shared.search``): on Postgres ``search_document`` with a stored
  ``tsvector`` and a GIN index; on SQLite the FTS5 table ``search_fts``. Both are created with raw
  DDL and are not ORM models (an FTS5 table and a generated ``tsvector`` have no portable model);
  they are filled by the result-projector, and by ``boxcar reindex`` for archives made before.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)

# The search index (boxcar.shared.search). Title weighs most, then URL and tags, then the text.
SEARCH_DOCUMENT = """
CREATE TABLE search_document (
    snapshot_id VARCHAR(32) NOT NULL PRIMARY KEY REFERENCES snapshot (id) ON DELETE CASCADE,
    title TEXT NOT NULL DEFAULT '',
    url TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL DEFAULT '',
    updated_at TIMESTAMP{tz} NOT NULL DEFAULT CURRENT_TIMESTAMP{extra}
)"""
POSTGRES_DOCUMENT = """,
    document tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A')
        || setweight(to_tsvector('simple', url), 'B')
        || setweight(to_tsvector('english', tags), 'B')
        || setweight(to_tsvector('english', body), 'C')
    ) STORED"""
SEARCH_DDL = {
    "postgresql": [
        SEARCH_DOCUMENT.format(tz=" WITH TIME ZONE", extra=POSTGRES_DOCUMENT),
        "CREATE INDEX ix_search_document_document ON search_document USING GIN (document)",
    ],
    "sqlite": [
        SEARCH_DOCUMENT.format(tz="", extra=""),
        "CREATE VIRTUAL TABLE search_fts USING fts5(title, url, tags, body, content='search_document', "
        "content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2')",
        """CREATE TRIGGER search_document_ai AFTER INSERT ON search_document BEGIN
            INSERT INTO search_fts (rowid, title, url, tags, body)
            VALUES (new.rowid, new.title, new.url, new.tags, new.body);
        END""",
        """CREATE TRIGGER search_document_ad AFTER DELETE ON search_document BEGIN
            INSERT INTO search_fts (search_fts, rowid, title, url, tags, body)
            VALUES ('delete', old.rowid, old.title, old.url, old.tags, old.body);
        END""",
        """CREATE TRIGGER search_document_au AFTER UPDATE ON search_document BEGIN
            INSERT INTO search_fts (search_fts, rowid, title, url, tags, body)
            VALUES ('delete', old.rowid, old.title, old.url, old.tags, old.body);
            INSERT INTO search_fts (rowid, title, url, tags, body)
            VALUES (new.rowid, new.title, new.url, new.tags, new.body);
        END""",
    ],
}
SEARCH_DROP = {
    "postgresql": ["DROP TABLE IF EXISTS search_document"],
    "sqlite": [
        "DROP TRIGGER IF EXISTS search_document_au",
        "DROP TRIGGER IF EXISTS search_document_ad",
        "DROP TRIGGER IF EXISTS search_document_ai",
        "DROP TABLE IF EXISTS search_fts",
        "DROP TABLE IF EXISTS search_document",
    ],
}


def _host(url: str) -> str:  # frozen copy of urls.url_domain
    try:
        return (urlsplit(url).hostname or "")[:255]
    except ValueError:
        return ""


def upgrade() -> None:
    op.create_table(
        "app_user",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_login_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_app_user")),
        sa.UniqueConstraint("username", name=op.f("uq_app_user_username")),
    )
    op.create_table(
        "user_session",
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("last_seen_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["app_user.id"], name=op.f("fk_user_session_user_id_app_user"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("token_sha256", name=op.f("pk_user_session")),
    )
    op.create_index(op.f("ix_user_session_user_id"), "user_session", ["user_id"])
    op.create_index(op.f("ix_user_session_expires_at"), "user_session", ["expires_at"])

    with op.batch_alter_table("snapshot") as batch:
        batch.add_column(sa.Column("domain", sa.String(length=255), server_default="", nullable=False))
    conn = op.get_bind()
    snapshot = sa.table(
        "snapshot", sa.column("id", sa.String), sa.column("url", sa.Text), sa.column("domain", sa.String)
    )
    rows = conn.execute(sa.select(snapshot.c.id, snapshot.c.url)).all()
    for start in range(0, len(rows), 1000):
        conn.execute(
            snapshot.update().where(snapshot.c.id == sa.bindparam("sid")).values(domain=sa.bindparam("host")),
            [{"sid": sid, "host": _host(url)} for sid, url in rows[start : start + 1000]],
        )
    op.create_index("ix_snapshot_created_at_id", "snapshot", ["created_at", "id"])
    op.create_index("ix_snapshot_status_created_at", "snapshot", ["status", "created_at"])
    op.create_index("ix_snapshot_domain_created_at", "snapshot", ["domain", "created_at"])
    op.create_index("ix_snapshot_crawl_id_created_at", "snapshot", ["crawl_id", "created_at"])
    op.create_index("ix_snapshot_tag_tag_id", "snapshot_tag", ["tag_id"])
    op.create_index("ix_crawl_created_at", "crawl", ["created_at"])

    for statement in SEARCH_DDL[conn.dialect.name]:
        conn.exec_driver_sql(statement)


def downgrade() -> None:
    conn = op.get_bind()
    for statement in SEARCH_DROP[conn.dialect.name]:
        conn.exec_driver_sql(statement)
    op.drop_index("ix_crawl_created_at", table_name="crawl")
    op.drop_index("ix_snapshot_tag_tag_id", table_name="snapshot_tag")
    op.drop_index("ix_snapshot_crawl_id_created_at", table_name="snapshot")
    op.drop_index("ix_snapshot_domain_created_at", table_name="snapshot")
    op.drop_index("ix_snapshot_status_created_at", table_name="snapshot")
    op.drop_index("ix_snapshot_created_at_id", table_name="snapshot")
    with op.batch_alter_table("snapshot") as batch:
        batch.drop_column("domain")
    op.drop_index(op.f("ix_user_session_expires_at"), table_name="user_session")
    op.drop_index(op.f("ix_user_session_user_id"), table_name="user_session")
    op.drop_table("user_session")
    op.drop_table("app_user")
