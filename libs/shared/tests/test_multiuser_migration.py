"""Issue 28: a single-user data dir from before users owned their archive upgrades with
``boxcar migrate`` and loses nothing: every row and file is still there, the old accounts are
admins, the operator's rows (``system``) are the first user's, ``ONLY_NEW`` keys follow, and the
files stay at the paths the rows name."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text

from boxcar.shared.migrations import upgrade_connection

TABLES = ("app_user", "crawl", "snapshot", "archiveresult", "crawl_schedule", "api_token", "tag", "snapshot_tag")


def insert(conn, table: str, **values) -> None:
    """A row with ``values`` and a plain value in every other NOT NULL column without a default
    (the schema of an older revision, which the models no longer describe)."""
    for _, name, kind, notnull, default, _pk in conn.execute(text(f"PRAGMA table_info({table})")):
        if name in values or not notnull or default is not None:
            continue
        kind = kind.upper()
        values[name] = (
            0
            if "INT" in kind or "BOOL" in kind
            else "2026-01-02 00:00:00"
            if "DATE" in kind or "TIME" in kind
            else "{}"
            if kind == "JSON"
            else ""
        )
    columns = ", ".join(values)
    conn.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(':' + c for c in values)})"), values)


def counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in TABLES}
    engine.dispose()
    return found


def files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix not in (".lock",) and p.name != "index.sqlite3"
    }


def test_boxcar_migrate_keeps_every_row_and_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    url = f"sqlite:///{data / 'index.sqlite3'}"
    engine = create_engine(url)
    with engine.connect() as conn:
        upgrade_connection(conn, "0007")  # the schema before issue 28
    snaps = []
    with engine.begin() as conn:
        insert(conn, "app_user", id="u1", username="alice", created_at="2026-01-01 00:00:00")
        insert(conn, "app_user", id="u2", username="bob", created_at="2026-02-01 00:00:00")
        insert(conn, "crawl", id="c1", created_by="system", status="sealed", output_dir="archive/users/system/c1")
        for n in (1, 2):
            sid, hashed = f"{n:032x}", f"{n:064x}"
            out = f"archive/users/system/snapshots/20260102/example.com/{sid}"
            key = hashlib.sha256(f"system\n{hashed}".encode()).hexdigest()
            insert(
                conn,
                "snapshot",
                id=sid,
                crawl_id="c1",
                url=f"https://example.com/{n}",
                url_hash=hashed,
                status="sealed",
                output_dir=out,
                dedup_key=key,
            )
            insert(conn, "archiveresult", id=f"r{n}", snapshot_id=sid, plugin="wget", status="succeeded")
            snaps.append((sid, out))
            folder = data / out / "wget"
            folder.mkdir(parents=True)
            (folder / "index.html").write_text(f"<p>page {n}</p>")
        insert(conn, "crawl_schedule", id="s1", created_by="system", schedule="@daily", status="queued")
        insert(conn, "api_token", id="t1", name="cli", token_sha256="ab", scope="write")
        insert(conn, "tag", id=1, name="kept")
        insert(conn, "snapshot_tag", snapshot_id=snaps[0][0], tag_id=1)
    engine.dispose()
    before_rows, before_files = counts(url), files(data)

    env = {**os.environ, "DATA_DIR": str(data)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "boxcar.cli.main", "migrate", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    assert counts(url) == before_rows
    assert files(data) == before_files
    engine = create_engine(url)
    with engine.connect() as conn:
        roles = dict(conn.execute(text("SELECT username, role FROM app_user")).all())
        assert roles == {"alice": "admin", "bob": "admin"}  # everyone could do everything before
        assert conn.execute(text("SELECT created_by FROM crawl")).scalar() == "alice"  # the first user
        assert conn.execute(text("SELECT created_by FROM crawl_schedule")).scalar() == "alice"
        assert conn.execute(text("SELECT owner FROM api_token")).scalar() == "alice"
        for sid, out in snaps:
            row = conn.execute(
                text("SELECT output_dir, dedup_key, url_hash FROM snapshot WHERE id = :i"), {"i": sid}
            ).one()
            assert row[0] == out and (data / out / "wget" / "index.html").exists()  # nothing moved
            assert row[1] == hashlib.sha256(f"alice\n{row[2]}".encode()).hexdigest()
    engine.dispose()
