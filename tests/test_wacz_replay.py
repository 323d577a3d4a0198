"""What leaves Boxcar replays elsewhere (issue 29): a 20-page crawl with the default selection —
19 corpus pages and a page whose text its script fetches — exported as a WACZ that py-wacz's
``wacz validate`` accepts and that ReplayWeb.page (Debian's Chromium, Playwright) replays with
each page's text; every WARC Boxcar wrote passes ``warcio check``; the scripted page's text
replays from the browser's WARC, which wget's WARC cannot give (it has no record of what the
script fetched: checked here too).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from boxcar.ingest.web import replay
from boxcar.ingest.web.archive_pages import REPLAY_INDEX
from boxcar.shared.settings import DEFAULT_PLUGINS
from tests.capture_site import SCRIPTED_TEXT, CaptureSite
from tests.helpers import (
    api,
    chromium_browser,
    provision_replay,
    serve_directory,
    submit,
    ui_stack,
    wait_sealed,
    wait_until,
)

BIN = Path(sys.executable).parent
PAGES = 20


@pytest.fixture(scope="module")
def archived(tmp_path_factory, lib_dir: Path, site_urls) -> Iterator[dict]:
    """The sealed crawl: its stack, id, snapshots (API items) and the scripted page's URL."""
    with CaptureSite(tmp_path_factory.mktemp("site")) as site:
        data_dir = tmp_path_factory.mktemp("wacz") / "data"
        with ui_stack(
            data_dir, lib_dir, ",".join(DEFAULT_PLUGINS), ("alice", "a long passphrase"), provision_replay
        ) as stack:
            scripted = site.url("/scripted/")
            crawl_id = submit(stack, urls=[*site_urls(PAGES - 1), scripted])
            wait_sealed(stack, crawl_id, timeout=1500)
            items = api(stack).get("/api/v1/snapshots", params={"crawl_id": crawl_id, "limit": 100}).json()["items"]
            assert len(items) == PAGES
            yield {"stack": stack, "crawl_id": crawl_id, "items": items, "scripted": scripted, "site": site}


def _warcs(stack, items: list[dict], plugin: str) -> dict[str, Path]:
    """Snapshot URL → the WARC the plugin's result lists."""
    out = {}
    for item in items:
        for result in item["results"]:
            names = [rel for rel in result["output_files"] if rel.startswith("warc/") and rel.endswith(".warc.gz")]
            if result["plugin"] == plugin and result["status"] == "succeeded" and names:
                [path] = stack.data_dir.glob(f"archive/users/*/snapshots/*/*/{item['id']}/{plugin}/{names[0]}")
                out[item["url"]] = path
    return out


def _records(path: Path) -> list:
    with path.open("rb") as fh:
        return [(r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read()) for r in ArchiveIterator(fh)]


def test_every_warc_boxcar_wrote_passes_warcio_check(archived):
    stack, items = archived["stack"], archived["items"]
    wget, browser = _warcs(stack, items, "wget"), _warcs(stack, items, "responses")
    assert len(wget) == len(browser) == PAGES, (sorted(wget), sorted(browser))
    on_disk = set(stack.data_dir.glob("archive/**/*.warc.gz"))
    assert on_disk == {*wget.values(), *browser.values()}  # no WARC the results do not list
    check = subprocess.run([BIN / "warcio", "check", "-v", *map(str, on_disk)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]

    for url, path in browser.items():
        records = _records(path)
        assert records[0][0] == "warcinfo"
        responses = [r for r in records if r[0] == "response"]
        assert responses and all(r[1].get_header("WARC-IP-Address") == "127.0.0.1" for r in responses), url
        page = [r for r in responses if r[1].get_header("WARC-Target-URI") == url]
        assert page and page[0][2].get_statuscode() == "200", url


def test_the_browser_s_warc_has_what_the_page_s_script_fetched_and_wget_s_has_not(archived):
    """The evidence for item 2: wget keeps the page and its script, never runs it, so the story
    the script fetches is in no record of wget's WARC; the browser's WARC has it."""
    stack, items, scripted = archived["stack"], archived["items"], archived["scripted"]
    story = scripted + "story.json"
    wget = {r[1].get_header("WARC-Target-URI"): r for r in _records(_warcs(stack, items, "wget")[scripted])}
    browser = {r[1].get_header("WARC-Target-URI"): r for r in _records(_warcs(stack, items, "responses")[scripted])}
    assert scripted + "app.js" in wget and story not in wget
    assert json.loads(browser[story][3])["text"] == SCRIPTED_TEXT
    assert browser[story][2].get_header("Content-Type") == "application/json"


@pytest.fixture(scope="module")
def wacz(archived, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "crawl.wacz"
    stack = archived["stack"]
    run = subprocess.run(
        [BIN / "boxcar", "export", "wacz", "--crawl", archived["crawl_id"], "-o", str(out)]
        + ["--data-dir", str(stack.data_dir)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out


def test_the_default_selection_s_wacz_passes_wacz_validate(wacz, archived):
    validate = subprocess.run([BIN / "wacz", "validate", "-f", str(wacz)], capture_output=True, text=True)
    assert validate.returncode == 0, validate.stdout[-2000:] + validate.stderr[-2000:]
    with zipfile.ZipFile(wacz) as z:
        pages = [json.loads(line) for line in z.read("pages/pages.jsonl").decode().splitlines()[1:]]
        warcs = [n for n in z.namelist() if n.startswith("archive/")]
    assert len(pages) == PAGES and len(warcs) == 2 * PAGES  # wget's and the browser's of each page


#: the share of a page's words that must show in its replay (what is left is text hidden on screen)
SHOWN = 0.75


def _words(text: str) -> set[str]:
    """A text's distinct words of five letters or more, lower-cased."""
    return {w.lower() for w in re.findall(r"\w{5,}", text)}


def _shown(tab, words: set[str], seen: dict[str, float]) -> bool:
    """Whether a replayed frame of ``tab`` (ReplayWeb.page nests them) shows ``SHOWN`` of
    ``words``; notes each frame's share in ``seen``."""
    for frame in tab.frames:
        try:
            text = frame.evaluate("document.body ? document.body.innerText : ''") or ""
        except Exception:  # noqa: BLE001 - a frame navigating away
            continue
        seen[frame.url[:120]] = share = len(words & _words(text)) / len(words)
        if share >= SHOWN:
            return True
    return False


EMBED = """<!doctype html><html><head><script src="ui.js"></script></head><body>
<script>
  const wanted = new URLSearchParams(location.search).get("url");
  const viewer = document.createElement("replay-web-page");
  viewer.setAttribute("source", "crawl.wacz");
  viewer.setAttribute("url", wanted);
  viewer.setAttribute("replayBase", "./replay/");
  viewer.style.height = "800px";
  document.body.appendChild(viewer);
</script></body></html>
"""


def test_the_wacz_replays_in_replaywebpage_with_each_page_s_text(wacz, archived, tmp_path):
    """ReplayWeb.page's own embed (its ``ui.js`` and service worker, the files Boxcar serves for
    replay) loads the WACZ; every page of ``pages.jsonl`` is opened in turn and shows its readable
    text (``SHOWN`` of its words); the scripted page shows its script's story, which only the
    browser's WARC holds."""
    assets = replay.assets_dir(archived["stack"].settings)
    root = tmp_path / "viewer"
    (root / "replay").mkdir(parents=True)
    shutil.copy(assets / "ui.js", root / "ui.js")
    for name in replay.ASSETS:  # the viewer's frame loads ui.js from replayBase too
        shutil.copy(assets / name, root / "replay" / name)
    # /replay/ answers with the viewer, as Boxcar's server does, for a frame loaded before the
    # service worker controls it (replayweb.page #412)
    (root / "replay" / "index.html").write_text(REPLAY_INDEX)
    shutil.copy(wacz, root / "crawl.wacz")
    (root / "index.html").write_text(EMBED)
    with zipfile.ZipFile(wacz) as z:
        pages = [json.loads(line) for line in z.read("pages/pages.jsonl").decode().splitlines()[1:]]
    wanted = {p["url"]: _words(p.get("text", "")) for p in pages}
    wanted[archived["scripted"]] = _words(SCRIPTED_TEXT)
    assert len(wanted) == PAGES and all(len(words) >= 5 for words in wanted.values()), wanted

    missing = {}
    with serve_directory(root) as base, chromium_browser() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        for url, words in wanted.items():
            tab.goto(f"{base}/index.html?url={url}")
            seen: dict[str, float] = {}
            try:
                wait_until(partial(_shown, tab, words, seen), 60, f"{url} replayed")
            except AssertionError:
                missing[url] = seen
        context.close()
    assert not missing, missing
