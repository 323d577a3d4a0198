"""``boxcar user create``, ``search``, ``remove`` and ``reindex`` on an archive (no stack needed)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from boxcar.cli.main import cli
from boxcar.ingest.web.accounts import authenticate
from boxcar.result_projector import fulltext
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot, Status, url_hash
from boxcar.shared.messages import Seed
from boxcar.shared.storage import snapshot_dir


def _archive(data_dir: Path) -> tuple[Database, list[str]]:
    db = Database(f"sqlite:///{data_dir / 'index.sqlite3'}")
    db.upgrade()
    now = utcnow()
    crawl = Crawl.new(user="system", first_url="https://a.example/", seed_count=2, now=now)
    ids = []
    with db.write() as s:
        s.add(crawl)
        s.flush()
        for n, text in enumerate(("Herons wade through the estuary at low tide.", "Otters play below the weir.")):
            url = Seed.parse(f"https://a.example/{n}").url
            sid = f"{n + 1:032x}"
            out = snapshot_dir("system", now, url, sid)
            s.add(Snapshot(id=sid, crawl_id=crawl.id, url=url, url_hash=url_hash(url), status=Status.SEALED,
                           title=f"Note {n}", output_dir=out))  # fmt: skip
            (data_dir / out / "htmltotext").mkdir(parents=True)
            (data_dir / out / "htmltotext" / "htmltotext.txt").write_text(text)
            ids.append(sid)
    return db, ids


def test_user_search_remove_and_reindex(tmp_path: Path, monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    db, (heron, otter) = _archive(data_dir)
    runner = CliRunner()

    made = runner.invoke(cli, ["user", "create", "alice"], input="s3cret-enough\ns3cret-enough\n")
    assert made.exit_code == 0, made.output
    assert authenticate(db, "alice", "s3cret-enough") and not authenticate(db, "alice", "wrong")
    assert runner.invoke(cli, ["user", "create", "alice"], input="x" * 9 + "\n" + "x" * 9 + "\n").exit_code == 2

    # the archive predates the index: reindex builds it from rows (titles, URLs) and files
    assert runner.invoke(cli, ["reindex"]).exit_code == 0
    found = runner.invoke(cli, ["search", "--json", "note"])
    assert found.exit_code == 0 and len(found.output.splitlines()) == 2
    first = json.loads(found.output.splitlines()[0])
    assert set(first) >= {"id", "url", "title", "snippet"}

    refused = runner.invoke(cli, ["remove", heron], input="n\n")
    assert refused.exit_code == 1
    assert runner.invoke(cli, ["remove", "--yes", "https://a.example/0"]).exit_code == 0
    with db.read() as s:
        assert s.get(Snapshot, heron) is None and s.get(Snapshot, otter) is not None
    assert [
        json.loads(line)["id"] for line in runner.invoke(cli, ["search", "--json", "note"]).output.splitlines()
    ] == [otter]
    assert runner.invoke(cli, ["remove", "--yes", "https://nothing.example/"]).exit_code == 2
    assert fulltext.reindex(db, ArchiveStore.local(data_dir)) == 1
