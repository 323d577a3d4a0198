"""``boxcar import-archivebox`` against real collections ArchiveBox made in this session
(``tests/archivebox_collections.py``): 10 local corpus pages each, archived by ArchiveBox 0.7.x
and by ArchiveBox 0.9, then imported on SQLite and on Postgres.

Checked for each: a dry run counts and writes nothing; the import has the same snapshots (URL,
title, tags, bookmark date) and the same results per plugin and status as ArchiveBox's own
index; every imported file opens through Boxcar's web app with the bytes ArchiveBox wrote; a
phrase of each page's text finds it; the source is unchanged (sha256 of every file); a second run
imports nothing. The 0.9 build is marked ``archivebox_09`` (``make test-archivebox-import``
runs both; ``make check`` runs the 0.7 one).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from litestar.testing import TestClient
from sqlalchemy import func, select

from boxcar.cli.archivebox_import import EXTRACTORS_07
from boxcar.cli.main import cli
from boxcar.ingest.access import operator
from boxcar.ingest.app import create_app
from boxcar.ingest.library import SnapshotLibrary
from boxcar.ingest.web import accounts
from boxcar.shared import search
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot, SnapshotTag, Status, Tag
from boxcar.shared.settings import Settings
from tests import archivebox_collections as abx

PAGES = 10
STOPWORDS = frozenset({"your", "will", "this", "that", "with", "have", "from", "they", "what", "been", "were", "more"})
PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


def _build(kind: str, site_urls) -> Iterator[Path]:
    build = abx.build_07 if kind == "0.7" else abx.build_09
    try:
        data = build(site_urls(PAGES))
    except abx.Unavailable as exc:
        pytest.skip(str(exc))
    yield data
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def collection_07(site_urls) -> Iterator[Path]:
    yield from _build("0.7", site_urls)


@pytest.fixture(scope="session")
def collection_09(site_urls) -> Iterator[Path]:
    yield from _build("0.9", site_urls)


# ----------------------------------------------------------------------------- what ArchiveBox says


def _dt(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def archivebox_says(root: Path, tmp_path: Path) -> dict:
    """Snapshots, tags and results as ArchiveBox's index has them (read from a copy)."""
    copy = tmp_path / "abx-index.sqlite3"
    for suffix in ("", "-wal"):
        if Path(f"{root}/index.sqlite3{suffix}").exists():
            shutil.copyfile(f"{root}/index.sqlite3{suffix}", f"{copy}{suffix}")
    conn = sqlite3.connect(copy)
    cols = {r[1] for r in conn.execute("PRAGMA table_info(core_snapshot)")}
    modern = "bookmarked_at" in cols
    snaps = {}
    for sid, url, title, bookmarked in conn.execute(
        f"SELECT id, url, title, {'bookmarked_at' if modern else 'added'} FROM core_snapshot"
    ):
        tags = sorted(
            n
            for (n,) in conn.execute(
                "SELECT t.name FROM core_snapshot_tags st JOIN core_tag t ON t.id = st.tag_id WHERE st.snapshot_id = ?",
                (sid,),
            )
        )
        snaps[url] = {
            "id": sid.replace("-", ""),
            "title": title or None,
            "tags": tags,
            "bookmarked_at": _dt(bookmarked),
        }
    plugin = "plugin" if modern else "extractor"
    results = Counter()
    for name, status in conn.execute(f"SELECT {plugin}, status FROM core_archiveresult"):
        results[(name if modern else EXTRACTORS_07[name], status)] += 1
    conn.close()
    return {"snapshots": snaps, "results": results}


# ----------------------------------------------------------------------------- the run


def run_import(data_dir: Path, db_url: str, source: Path, *args: str) -> dict:
    env = {"DATA_DIR": str(data_dir), "DATABASE_URL": db_url, "ARCHIVE_USER": "system"}
    result = CliRunner().invoke(
        cli, ["import-archivebox", str(source), "--json", *args], env=env, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def prose_phrase(text: str, n: int = 4) -> str:
    """``n`` consecutive plain words of ``text`` (from the middle of what the index keeps, past
    the navigation)."""
    tokens = text[: search.MAX_BODY_CHARS // 2].split()
    plain = [bool(re.fullmatch(r"[^\W\d_]{4,}", t)) and t.lower() not in STOPWORDS for t in tokens]
    starts = [i for i in range(len(tokens) - n + 1) if all(plain[i : i + n])]
    if not starts:
        return ""
    middle = [i for i in starts if i >= len(tokens) // 2] or starts
    return " ".join(tokens[middle[0] : middle[0] + n])


def check_import(kind: str, source: Path, db_url: str, tmp_path: Path, link: bool) -> None:
    before = abx.checksums(source)
    says = archivebox_says(source, tmp_path)
    assert len(says["snapshots"]) == PAGES
    data_dir = tmp_path / "data"

    # a dry run counts and writes nothing
    dry = run_import(data_dir, db_url, source, "--dry-run")
    assert dry["snapshots_new"] == PAGES and dry["snapshots_existing"] == 0
    assert not data_dir.exists()
    if db_url.startswith("postgresql"):
        probe = Database(db_url)
        with probe.engine.connect() as conn:
            assert not conn.dialect.has_table(conn, "snapshot")
        probe.dispose()

    report = run_import(data_dir, db_url, source, *(["--link"] if link else []))
    assert report["snapshots_new"] == PAGES, report
    assert report["results_by_plugin"] == dry["results_by_plugin"]

    db = Database(db_url)
    try:
        with db.read() as s:
            snaps = {x.url: x for x in s.scalars(select(Snapshot))}
            assert set(snaps) == set(says["snapshots"])
            crawls = list(s.scalars(select(Crawl)))
            assert crawls and all(c.status == Status.SEALED and c.created_by == "system" for c in crawls)
            for url, snap in snaps.items():
                want = says["snapshots"][url]
                assert snap.status == Status.SEALED and snap.indexed_at is not None
                assert snap.title == want["title"]
                assert snap.bookmarked_at == want["bookmarked_at"]
                tags = sorted(
                    s.scalars(
                        select(Tag.name)
                        .join(SnapshotTag, SnapshotTag.tag_id == Tag.id)
                        .where(SnapshotTag.snapshot_id == snap.id)
                    )
                )
                assert tags == want["tags"] == sorted(abx.TAGS)
                assert snap.output_dir.startswith("archive/users/system/snapshots/")
                assert (data_dir / snap.output_dir / "index.jsonl").is_file()
            results = list(s.scalars(select(ArchiveResult)))
        got = Counter((r.plugin, r.status) for r in results if not r.notes.startswith("recovered"))
        assert got == says["results"]
        recovered = [r for r in results if r.notes.startswith("recovered")]
        if kind == "0.7":
            # ArchiveBox 0.7.4 writes htmltotext.txt but records no row for it: imported, and reported
            assert {r.plugin for r in recovered} <= {"htmltotext"}
            assert sum("without an ArchiveResult row" in p for p in report["not_mapped"]) == len(recovered)
        else:
            assert not recovered
        by_snapshot = {sid: [r for r in results if r.snapshot_id == sid] for sid in {r.snapshot_id for r in results}}
        for snap in snaps.values():
            text = [r for r in by_snapshot[snap.id] if r.plugin == "htmltotext" and r.status == "succeeded"]
            assert text, f"no readable text for {snap.url}"

        # the files open through the web app, with ArchiveBox's bytes
        accounts.create_user(db, "root", PASSWORD, role="admin")
        app = create_app(Settings(data_dir=data_dir, nats_url="nats://127.0.0.1:9"), db)
        opened = 0
        with TestClient(app, base_url="http://boxcar.lan") as client:
            token = CSRF.search(client.get("/login").text).group(1)
            login = client.post(
                "/login",
                data={"username": "root", "password": PASSWORD, "_csrf_token": token, "next": "/"},
                follow_redirects=False,
            )
            assert login.status_code == 303
            for snap in snaps.values():
                for r in by_snapshot[snap.id]:
                    for rel in r.output_files:
                        path = data_dir / snap.output_dir / r.plugin / rel
                        response = client.get(f"/archive/{snap.id}/{r.plugin}/{rel}")
                        assert response.status_code == 200, (snap.url, r.plugin, rel, response.status_code)
                        assert response.content == path.read_bytes()
                        opened += 1
                        if link:
                            assert path.stat().st_nlink >= 2
                # the snapshot page offers wget's page, the WARC and the text, and they open
                page = client.get(f"/snapshots/{snap.id}")
                assert page.status_code == 200
                for button in ("view-wget", "download-warc", "view-htmltotext"):
                    href = re.search(rf'id="{button}" href="[^"]*?(/archive/{snap.id}/[^"]+)"', page.text)
                    assert href, (snap.url, button)
                    assert client.get(html.unescape(href.group(1))).status_code == 200
        assert opened == report["files"] > 0

        # search finds a phrase of each page's text
        library = SnapshotLibrary(db, data_dir)
        for snap in snaps.values():
            text_result = next(r for r in by_snapshot[snap.id] if r.plugin == "htmltotext")
            text = (data_dir / snap.output_dir / "htmltotext" / next(iter(text_result.output_files))).read_text()
            phrase = prose_phrase(text)
            assert phrase, snap.url
            found = [row.id for row in library.search(f'"{phrase}"', limit=50, viewer=operator("system"))]
            assert snap.id in found, (snap.url, phrase)

        # a second run adds nothing
        again = run_import(data_dir, db_url, source)
        assert again["snapshots_new"] == 0 and again["snapshots_existing"] == PAGES and again["results_new"] == 0
        with db.read() as s:
            assert s.scalar(select(func.count()).select_from(Snapshot)) == PAGES
            assert s.scalar(select(func.count()).select_from(ArchiveResult)) == len(results)
    finally:
        db.dispose()

    # the source is unchanged
    assert abx.checksums(source) == before


def test_import_archivebox_07(collection_07: Path, db_url: str, tmp_path: Path) -> None:
    check_import("0.7", collection_07, db_url, tmp_path, link=False)


@pytest.mark.archivebox_09
def test_import_archivebox_09(collection_09: Path, db_url: str, tmp_path: Path) -> None:
    check_import("0.9", collection_09, db_url, tmp_path, link=True)


def test_rerun_adds_only_what_archivebox_added_since(
    collection_07: Path, site_urls, sqlite_url: str, tmp_path: Path
) -> None:
    """A copy of the 0.7 collection, imported; ArchiveBox then adds 2 more pages to it: the next
    run imports those 2 (into the same crawl) and nothing else."""
    source = tmp_path / "collection"
    shutil.copytree(collection_07, source, symlinks=True)
    data_dir = tmp_path / "data"
    first = run_import(data_dir, sqlite_url, source)
    assert first["snapshots_new"] == PAGES
    abx.add_07(source, site_urls(PAGES + 2)[PAGES:])
    dry = run_import(data_dir, sqlite_url, source, "--dry-run")
    assert (dry["snapshots_new"], dry["snapshots_existing"]) == (2, PAGES)
    second = run_import(data_dir, sqlite_url, source)
    assert (second["snapshots_new"], second["snapshots_existing"], second["crawls_new"]) == (2, PAGES, 0)
    db = Database(sqlite_url)
    try:
        with db.read() as s:
            assert s.scalar(select(func.count()).select_from(Snapshot)) == PAGES + 2
            assert s.scalar(select(func.count()).select_from(Crawl)) == 1
    finally:
        db.dispose()


def test_what_cannot_be_mapped_is_reported(collection_07: Path, sqlite_url: str, tmp_path: Path) -> None:
    """In a copy of the 0.7 collection: a result of an extractor Boxcar has no plugin for, an
    unfinished one, and a snapshot whose dir is gone are left out, each with its reason."""
    source = tmp_path / "collection"
    shutil.copytree(collection_07, source, symlinks=True)
    conn = sqlite3.connect(source / "index.sqlite3")
    (sid, timestamp), (other, _) = conn.execute("SELECT id, timestamp FROM core_snapshot ORDER BY timestamp LIMIT 2")
    for extractor, status in (("shiny_new_thing", "succeeded"), ("pdf", "started")):
        conn.execute(
            "INSERT INTO core_archiveresult (cmd, pwd, status, output, start_ts, end_ts, snapshot_id, uuid, extractor)"
            " VALUES ('[]', '', ?, '', '2026-01-01 00:00:00', '2026-01-01 00:00:01', ?, ?, ?)",
            (status, other, "0" * 32, extractor),
        )
    conn.commit()
    conn.close()
    shutil.rmtree(source / "archive" / timestamp)
    report = run_import(tmp_path / "data", sqlite_url, source)
    assert report["snapshots_new"] == PAGES
    problems = "\n".join(report["not_mapped"])
    assert f"snapshot {sid} (" in problems and "no snapshot dir in the collection" in problems
    assert "extractor 'shiny_new_thing' has no Boxcar plugin: not imported" in problems
    assert "pdf result is 'started' (unfinished): not imported" in problems
