"""Real pages archived end to end through separate service processes on real NATS JetStream,
once on SQLite and once on Postgres."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from boxcar.shared.db import Database
from boxcar.shared.plugins import get_catalog
from boxcar.shared.settings import DEFAULT_PLUGINS
from boxcar.shared.storage import host_component
from tests.helpers import load_crawl, submit, wait_sealed

# What each default hook should report on a real article page served locally and offline.
EXPECTED = {
    "wget": {"succeeded"},
    "favicon": {"noresults"},  # the corpus serves no /favicon.ico and Google's fallback is offline
    "htmltotext": {"succeeded"},
    "trafilatura": {"succeeded"},
    "parse_html_urls": {"succeeded"},
    "hashes": {"succeeded"},
    "title": {"succeeded"},
    "screenshot": {"succeeded"},
    "pdf": {"succeeded"},
    "dom": {"succeeded"},
    "headers": {"succeeded"},
    "redirects": {"succeeded"},
    "seo": {"succeeded"},
    "staticfile": {"skipped"},  # an HTML page is not a static file: the plugin does not apply
    "parse_dom_outlinks": {"succeeded", "noresults"},
    "singlefile": {"succeeded"},
    "chrome_mhtml": {"succeeded"},
    "responses": {"succeeded"},
    "consolelog": {"succeeded", "noresults"},
    "dns": {"succeeded"},
    "sslcerts": {"noresults"},  # 'URL is not HTTPS': the local site is plain HTTP
    "git": {"noresults"},  # 'Not a git URL'
    "ytdlp": {"noresults"},  # 'No media found' on an article page (the media checks: test_capture_breadth)
    "gallerydl": {"noresults"},  # 'No gallery found'
    "readability": {"succeeded"},
    "defuddle": {"succeeded"},
}
EXPECTED_BY_HOOK = {
    "on_Snapshot__00_chrome_launch.daemon.bg": {"skipped"},  # CHROME_ISOLATION=crawl: the worker's browser is used
    "on_Snapshot__01_chrome_tab.daemon.bg": {"succeeded"},
    "on_Snapshot__30_chrome_navigate": {"succeeded"},
}


def test_archives_real_pages_through_all_services(db_url, nats_url, make_stack, site_urls, tmp_path):
    archive_and_check(make_stack(db_url, nats_url), db_url, site_urls(5))


def test_the_one_process_stack_archives_the_same(sqlite_url, nats_url, make_stack, site_urls):
    """The embedded default: every service as a task of one process (hooks still their own)."""
    stack = make_stack(sqlite_url, nats_url, shape="one")
    assert [c.name for c in stack.children] == ["boxcar"]
    archive_and_check(stack, sqlite_url, site_urls(5))


def archive_and_check(stack, db_url: str, urls: list[str]) -> None:
    crawl_id = submit(stack, urls=urls, tags=["e2e"])
    state = wait_sealed(stack, crawl_id, timeout=600)
    assert state["snapshots"] == {"queued": 0, "started": 0, "paused": 0, "sealed": len(urls), "total": len(urls)}

    crawl, snaps, results = load_crawl(Database(db_url), crawl_id)
    assert crawl.status == "sealed"
    assert sorted(s.url for s in snaps) == sorted(urls)
    assert all(s.status == "sealed" and s.downloaded_at for s in snaps)

    hooks = {(h.plugin, h.name) for h in get_catalog().snapshot_hooks(DEFAULT_PLUGINS)}
    per_key = Counter((r.snapshot_id, r.plugin, r.hook_name) for r in results)
    assert set(per_key.values()) == {1}, "more than one ArchiveResult for a (snapshot, plugin, hook)"
    for snap in snaps:
        mine = {(r.plugin, r.hook_name): r for r in results if r.snapshot_id == snap.id}
        assert set(mine) == hooks, f"{snap.url}: results for {sorted(mine)}"
        for (plugin, hook), result in mine.items():
            expected = EXPECTED_BY_HOOK.get(hook) or EXPECTED[plugin]
            assert result.status in expected, f"{snap.url} {hook}: {result.status} {result.notes}"
        assert snap.output_size == sum(r.output_size for r in mine.values()) > 0

    data_dir: Path = stack.data_dir
    for snap in snaps:
        day = snap.bookmarked_at.strftime("%Y%m%d")
        expected_dir = data_dir / "archive/users/system/snapshots" / day / host_component(snap.url) / snap.id
        assert snap.output_dir == str(expected_dir.relative_to(data_dir))
        wget_files = list((expected_dir / "wget").rglob("*"))
        assert any(f.suffix == ".html" for f in wget_files), f"no wget HTML for {snap.url}"
        assert any(f.name.endswith(".warc.gz") and f.stat().st_size > 0 for f in wget_files), f"no WARC for {snap.url}"
        lines = [json.loads(line) for line in (expected_dir / "index.jsonl").read_text().splitlines()]
        assert lines[0]["type"] == "Snapshot" and lines[0]["id"] == snap.id and lines[0]["url"] == snap.url
        assert lines[0]["tags"] == ["e2e"]
        assert {(r["plugin"], r["hook_name"]) for r in lines[1:]} == hooks
        assert all(r["type"] == "ArchiveResult" for r in lines[1:])
        # the index is a projection of the rows: the same results, the same statuses
        rows = {(r.plugin, r.hook_name): r for r in results if r.snapshot_id == snap.id}
        assert {(r["plugin"], r["hook_name"]): r["status"] for r in lines[1:]} == {k: r.status for k, r in rows.items()}
        assert lines[0]["http_status"] == snap.http_status == 200


def test_depth_one_crawl_archives_linked_pages(db_url, nats_url, make_stack, demo_site):
    # discovery needs only a capture and a parser: the default selection's other hooks are checked above
    stack = make_stack(db_url, nats_url)
    crawl_id = submit(stack, urls=[demo_site], max_depth=1, plugins=["wget", "parse_html_urls"])
    wait_sealed(stack, crawl_id, timeout=300)
    crawl, snaps, results = load_crawl(Database(db_url), crawl_id)

    root = next(s for s in snaps if s.depth == 0)
    children = [s for s in snaps if s.depth == 1]
    # the root's capture and its parser first, so a crawl without children says why
    outcome = {r.plugin: (r.status, r.output_str, r.notes) for r in results if r.snapshot_id == root.id}
    assert outcome.get("wget", ("",))[0] == "succeeded", outcome
    assert outcome.get("parse_html_urls", ("",))[0] == "succeeded", outcome
    linked = set(
        re.findall(r'href="([a-z]+\.html)"', Path(__file__).parents[1].joinpath("cli/demo-site/index.html").read_text())
    )
    base = demo_site.rsplit("/", 1)[0]
    assert root.url == demo_site
    assert sorted(s.url for s in children) == sorted(f"{base}/{name}" for name in linked)
    assert all(s.parent_snapshot_id == root.id for s in children)
    assert len({s.url for s in snaps}) == len(snaps) == 1 + len(linked)
    assert not [s for s in snaps if s.depth > 1], "followed links beyond max_depth"
    assert all(s.status == "sealed" for s in snaps)
    assert crawl.status == "sealed"
    assert crawl.modified_at >= max(s.downloaded_at for s in snaps), "crawl sealed before a child"
    assert all(urlsplit(s.url).hostname == "127.0.0.1" for s in snaps)
