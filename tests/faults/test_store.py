"""The archive in an S3 bucket (issue 32): ``STORE_URL=s3://…`` on a real S3 API server (moto's,
``tests/s3_server.py``), and every hook executor on a data dir of its own that ingest and the
projector never see (as on another host: no shared volume). Executors capture each task in a
scratch dir and put its plugin dirs in the bucket before publishing its results; the projector
writes ``index.jsonl`` there; ingest serves every file from it.

- ``test_a_crawl_with_the_archive_in_a_bucket``: 20 pages with wget and the browser; every output
  file of every result is served by the UI byte for byte as the bucket holds it, every
  ``index.jsonl`` lists exactly the snapshot's results, the WARCs parse, and nothing of the archive
  is left on the executors' disks.
- ``test_the_store_down_for_30_seconds``: for 30 s mid-crawl the S3 server is either gone
  (``refused``: the gate in front of it closed, every connection refused or cut) or hung
  (``hung``: SIGSTOP, connections accepted and never answered), then back: uploads are retried,
  the crawl seals with one result per hook, nothing lost or duplicated (``FAULT …`` lines).
"""

from __future__ import annotations

import html
import io
import os
import re
import signal
import time
from urllib.parse import urljoin

import pytest
from sqlalchemy import select
from warcio.archiveiterator import ArchiveIterator

from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Snapshot
from tests.faults.harness import PLUGINS, MemorySampler, assert_clean, outcome, stack_pids, wait_progress
from tests.faults.test_crashes import ENV, FAMILIES, PAGES
from tests.helpers import api, provision_replay, submit, wait_sealed
from tests.s3_server import CREDENTIALS, S3Server

BROWSER_PLUGINS = [*PLUGINS, "screenshot", "title", "dom"]


@pytest.fixture
def s3(tmp_path):
    server = S3Server(gated=True)
    server.start()
    server.create_bucket("archive")
    yield server
    if server.proc and server.proc.poll() is None:
        os.kill(server.proc.pid, signal.SIGCONT)  # a test that failed while it was stopped
    server.stop()


def bucket_stack(make_stack, pg_url, nats_url, s3, tmp_path, families, env):
    """A stack on ``pg_url``/``nats_url`` with the archive in ``s3``'s bucket ``archive``; each
    executor on its own data dir. Returns ``(stack, store, executor data dirs)``."""
    store_url = f"s3://archive/boxcar?endpoint={s3.endpoint}"
    executor_dirs = {f"hook-executor-{f}": tmp_path / "hosts" / f for f in families}
    stack = make_stack(
        pg_url,
        nats_url,
        families=families,
        env={**env, **CREDENTIALS, "STORE_URL": store_url, "SECRET_KEY": "one key for every host"},
        child_env={name: {"DATA_DIR": str(path)} for name, path in executor_dirs.items()},
    )
    os.environ.update(CREDENTIALS)  # set for this test by make_stack's monkeypatch too
    return stack, ArchiveStore.from_url(store_url, tmp_path / "unused"), executor_dirs


def archive_files_under(root) -> list[str]:
    """Files of the ``archive/`` tree under a data dir."""
    return sorted(str(p.relative_to(root)) for p in (root / "archive").rglob("*") if p.is_file())


def test_a_crawl_with_the_archive_in_a_bucket(pg_url, nats_url, s3, make_stack, site_urls, tmp_path):
    families = ["fetch", "browser", "extract", "parse", "index"]
    # PUBLIC_READS: the archive's files are read here without a login (the UI's guard is not the subject)
    env = {**ENV, "PLUGINS": ",".join(BROWSER_PLUGINS), "BROWSER_CONCURRENCY": "2", "PUBLIC_READS": "true"}
    stack, store, executor_dirs = bucket_stack(make_stack, pg_url, nats_url, s3, tmp_path, families, env)
    db, urls = Database(pg_url), site_urls(PAGES)
    started = time.monotonic()
    crawl_id = submit(stack, urls=urls, plugins=BROWSER_PLUGINS)
    wait_sealed(stack, crawl_id, timeout=900)
    took = time.monotonic() - started
    result = outcome(
        db,
        crawl_id,
        urls,
        "archive in an S3 bucket",
        restarted_at=None,
        peak=0,
        data_dir=store,
        plugins=BROWSER_PLUGINS,
    )
    assert not result.problems and result.sealed == result.total and result.lost == result.duplicated == 0
    assert result.orphans == 0, result.line()  # no process of the crawl (Chromium, a hook) outlives its seal

    for name, data_dir in executor_dirs.items():  # the executors kept nothing of the archive
        assert data_dir.is_dir(), name
        assert archive_files_under(data_dir) == [], name
        assert not list((data_dir / "tmp").rglob("scratch/*/*")), f"{name} left a scratch dir"
    assert archive_files_under(stack.data_dir) == []  # ingest has read nothing yet: no shared files

    with db.read() as s:
        snaps = {x.id: x for x in s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id))}
        results = list(
            s.scalars(
                select(ArchiveResult).where(
                    ArchiveResult.snapshot_id.in_(list(snaps)), ArchiveResult.status == "succeeded"
                )
            )
        )
    client = api(stack)
    served = warcs = 0
    plugins_seen = set()
    for r in results:
        for rel in r.output_files or {}:
            if any(part.startswith(".") for part in rel.split("/")):
                continue  # hidden files are never served (a hook's listing can catch its temp file)
            key = f"{snaps[r.snapshot_id].output_dir}/{r.plugin}/{rel}"
            in_bucket = store.get_bytes(key)
            response = client.get(f"/archive/{r.snapshot_id}/{r.plugin}/{rel}", follow_redirects=True)
            assert response.status_code == 200, (key, response.status_code)
            assert response.content == in_bucket, key
            served += 1
            plugins_seen.add(r.plugin)
            if rel.endswith((".warc.gz", ".warc")):
                kinds = {rec.rec_type for rec in ArchiveIterator(io.BytesIO(response.content))}
                assert "response" in kinds, key
                warcs += 1
    assert {"wget", "screenshot", "dom", "title", "htmltotext"} <= plugins_seen, plugins_seen
    assert warcs >= PAGES

    provision_replay(stack.settings)  # replay: the viewer page names the WARC it plays, from the bucket
    replayed = 0
    for sid, snap in list(snaps.items())[:5]:
        page = client.get(f"http://127.0.0.1:{stack.archive_port}/replay-view/{sid}")  # the archive origin's
        assert page.status_code == 200, (sid, page.status_code)
        source = re.search(r'<replay-web-page source="([^"]+)"', page.text).group(1)
        warc = client.get(urljoin(str(page.url), html.unescape(source)))
        assert warc.status_code == 200, source
        key = f"{snap.output_dir}/{html.unescape(source).split('/', 3)[3]}"
        assert warc.content == store.get_bytes(key), key
        replayed += 1
    print(
        f"STORE bucket: {result.sealed}/{result.total} sealed in {took:.0f}s, {len(results)} results, "
        f"{served} files served from the bucket, {warcs} WARCs parsed, {replayed} replay pages with their WARC; "
        "executors' disks: no archive files"
    )


@pytest.mark.parametrize("how", ["refused", "hung"])
def test_the_store_down_for_30_seconds(how, pg_url, nats_url, s3, make_stack, site_urls, tmp_path):
    stack, store, _ = bucket_stack(make_stack, pg_url, nats_url, s3, tmp_path, FAMILIES, ENV)
    db, urls = Database(pg_url), site_urls(PAGES)
    with MemorySampler(lambda: stack_pids(stack)) as memory:
        crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
        wait_progress(db, crawl_id, 3)
        if how == "refused":
            s3.gate.close()
        else:
            os.kill(s3.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        sealed_before = _sealed(db, crawl_id)
        time.sleep(30)  # the outage itself: what is measured is what happens during and after it
        sealed_during = _sealed(db, crawl_id) - sealed_before
        if how == "refused":
            s3.gate.open()
        else:
            os.kill(s3.proc.pid, signal.SIGCONT)
        back_at, down_for = utcnow(), time.monotonic() - stopped
        wait_sealed(stack, crawl_id, timeout=600)
    retries = sum(
        "could not upload its files" in line or "could not fetch its earlier files" in line
        for log in (stack.data_dir / "logs").glob("hook-executor-*.log")
        for line in log.read_text(errors="replace").splitlines()
    )
    print(
        f"store {how} for {down_for:.0f}s: sealed before {sealed_before}, "
        f"while down {sealed_during}; executor store retries logged: {retries}"
    )
    if how == "refused":  # the executors saw the outage and retried (a hung store only delays them)
        assert retries > 0
    assert_clean(
        outcome(
            db,
            crawl_id,
            urls,
            f"S3 store {how} for 30 s",
            restarted_at=back_at,
            peak=memory.peak,
            data_dir=store,
        ),
        max_recovery=60.0,
    )


def _sealed(db: Database, crawl_id: str) -> int:
    with db.read() as s:
        return len(
            list(s.scalars(select(Snapshot.id).where(Snapshot.crawl_id == crawl_id, Snapshot.status == "sealed")))
        )
