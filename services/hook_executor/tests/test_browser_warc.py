"""``warc.from_responses`` on an index as the ``responses`` plugin writes it, lines it must not
trust included (the end-to-end check with a real browser is ``tests/test_wacz_replay.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from boxcar.hook_executor.warc import from_responses
from tests.helpers import assert_one_gzip_member_per_record

PAGE = "http://127.0.0.1:9/story/"


def _entry(url: str, path: str, **extra) -> dict:
    return {
        "ts": "20261203T184501",
        "method": "GET",
        "url": url,
        "status": 200,
        "mimeType": "text/html",
        "path": path,
    } | extra


def test_the_browser_s_responses_become_warc_records_and_untrusted_lines_are_skipped(tmp_path: Path):
    plugin = tmp_path / "responses"
    (plugin / "all").mkdir(parents=True)
    (plugin / "all" / "page.html").write_bytes(b"<html><script src=app.js></script></html>")
    (plugin / "all" / "story.json").write_bytes(b'{"text": "a story"}')
    (tmp_path / "secret.txt").write_text("not the plugin's")
    lines = [
        json.dumps(_entry(PAGE, "./all/page.html")),
        json.dumps(_entry(PAGE + "story.json", "./all/story.json", mimeType="application/json")),
        json.dumps(_entry(PAGE + "form", "./all/page.html", method="POST")),  # no request body kept
        json.dumps(_entry("data:text/plain,hi", "./all/page.html", method="DATA")),
        json.dumps(_entry(PAGE + "escape", "../secret.txt")),  # outside the plugin's directory
        json.dumps(_entry(PAGE + "gone", "./all/missing.bin")),  # body not written
        '{"ts": "20261203T1845',  # cut mid-line (the plugin was killed)
    ]
    (plugin / "index.jsonl").write_text("\n".join(lines) + "\n")
    headers = {
        "final_url": PAGE,
        "response_headers": {
            ":status": "200",
            "content-type": "text/html; charset=utf-8",
            "content-encoding": "gzip",
            "content-length": "31",
            "x-served-by": "cape",
        },
    }

    rel = from_responses(plugin, "snap1", headers, {("127.0.0.1", 9): "127.0.0.1"}, software="Boxcar test")

    assert rel == "warc/1796323501-snap1-browser.warc.gz"
    with (plugin / rel).open("rb") as fh:
        records = [(r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read()) for r in ArchiveIterator(fh)]
    assert [r[0] for r in records] == ["warcinfo", "response", "response"]
    page, story = records[1], records[2]
    assert page[1].get_header("WARC-Target-URI") == PAGE and page[1].get_header("WARC-IP-Address") == "127.0.0.1"
    assert page[1].get_header("WARC-Date") == "2026-12-03T18:45:01Z"
    # the page's own headers, without the transfer ones (the body is stored decoded) or HTTP/2's pseudo-header
    assert page[2].get_header("Content-Type") == "text/html; charset=utf-8"
    assert page[2].get_header("X-Served-By") == "cape" and page[2].get_header("Content-Encoding") is None
    assert page[2].get_header("Content-Length") == str(len(page[3])) and page[2].get_header(":status") is None
    assert story[2].get_header("Content-Type") == "application/json" and story[3] == b'{"text": "a story"}'
    check = subprocess.run(
        [Path(sys.executable).parent / "warcio", "check", str(plugin / rel)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert not list((plugin / "warc").glob("*.tmp"))
    assert_one_gzip_member_per_record(plugin / rel)


def test_nothing_is_written_without_a_response_to_keep(tmp_path: Path):
    plugin = tmp_path / "responses"
    plugin.mkdir()
    assert from_responses(plugin, "snap1", {}, {}, software="Boxcar test") is None  # no index
    (plugin / "index.jsonl").write_text(json.dumps(_entry(PAGE, "./all/missing.html")) + "\n")
    assert from_responses(plugin, "snap1", {}, {}, software="Boxcar test") is None
    assert sorted(p.name for p in plugin.iterdir()) == ["index.jsonl"]  # not even an empty warc/
