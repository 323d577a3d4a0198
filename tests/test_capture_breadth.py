"""Capture breadth (issue 12), end to end on local sites only: the media family (yt-dlp with
ffmpeg, gallery-dl), git, SingleFile and Readability, each through the real services and hooks.

- a page with an HTML5 ``<video>`` and a direct link to the MP4: the media file and its info JSON
  are kept; a download cut half way is ``failed`` with the reason; ``MEDIA_MAX_SIZE`` per crawl;
- a gallery page gallery-dl has no extractor for is ``noresults`` with the reason; a direct image
  URL is kept;
- a bare repository over git's smart HTTP is cloned for a URL ending in ``.git``;
- SingleFile's file opens offline in Chromium (Playwright) with the page's text and inline image;
  Readability's text has the article body of 5 corpus pages and not their navigation.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from boxcar.shared.db import Database
from tests.capture_site import ARTICLE_TEXT, NAV_TEXT, REPO_README, CaptureSite
from tests.helpers import load_crawl, submit, wait_sealed

#: corpus page → (a sentence of its article body, a string only its navigation/chrome holds)
READABILITY_PAGES = {
    "mozilla-1": ("Open the “Customize” panel to add, move or remove any button you want.", "Interest Dashboard"),
    "ars-1": ("Askar has released proof-of-concept attack code", "Advertise with Ars"),
    "guardian-1": ("The public want to hug the whales, they want to touch them", "The Guardian - Back to home"),
    "bbc-1": ("it's in the tens of thousands,\" Mr Obama said.", "Accessibility Help"),
    "nytimes-1": ("Sudan had already shown important progress on a number of these fronts.", "Skip to navigation"),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if subprocess.run(["which", "ffmpeg"], capture_output=True).returncode != 0:
        pytest.skip("ffmpeg is not installed (make install adds it: SYSTEM_PACKAGES)")
    with CaptureSite(tmp_path_factory.mktemp("capture-site")) as running:
        yield running


def results_by_url(db_url: str, crawl_id: str) -> dict[str, dict[str, object]]:
    _crawl, snaps, results = load_crawl(Database(db_url), crawl_id)
    urls = {s.id: s.url for s in snaps}
    out: dict[str, dict[str, object]] = {s.url: {} for s in snaps}
    for r in results:
        out[urls[r.snapshot_id]][r.plugin] = r
    return out


def snap_dirs(stack, db_url: str, crawl_id: str) -> dict[str, Path]:
    _crawl, snaps, _ = load_crawl(Database(db_url), crawl_id)
    return {s.url: stack.data_dir / s.output_dir for s in snaps}


def test_media_family_keeps_media_and_never_calls_a_cut_download_a_success(sqlite_url, nats_url, make_stack, site):
    stack = make_stack(sqlite_url, nats_url, families=["media"])
    urls = {
        "page": site.url("/video/"),
        "direct": site.url("/media/clip.mp4"),
        "cut": site.url("/cut/"),
        "gallery": site.url("/gallery/"),
        "image": site.url("/images/3.png"),
    }
    crawl_id = submit(stack, urls=list(urls.values()), plugins=["ytdlp", "gallerydl"])
    wait_sealed(stack, crawl_id, timeout=600)
    got = results_by_url(sqlite_url, crawl_id)
    dirs = snap_dirs(stack, sqlite_url, crawl_id)

    for key in ("page", "direct"):
        ytdlp = got[urls[key]]["ytdlp"]
        assert ytdlp.status == "succeeded", (key, ytdlp.output_str, ytdlp.notes)
        media = [name for name in ytdlp.output_files if name.endswith(".mp4")]
        assert media, ytdlp.output_files
        assert duration(dirs[urls[key]] / "ytdlp" / media[0]) == pytest.approx(2.0, abs=0.2), "the media is not whole"
        infos = [name for name in ytdlp.output_files if name.endswith(".info.json")]
        assert infos and json.loads((dirs[urls[key]] / "ytdlp" / infos[0]).read_text())["ext"] == "mp4"

    # subtitles are kept converted to SRT, as ArchiveBox keeps them (--write-sub --convert-subs=srt)
    page = got[urls["page"]]["ytdlp"]
    subtitles = [name for name in page.output_files if name.endswith(".srt")]
    assert subtitles, page.output_files
    assert "The test card hums along." in (dirs[urls["page"]] / "ytdlp" / subtitles[0]).read_text()

    cut = got[urls["cut"]]["ytdlp"]
    assert cut.status == "failed", (cut.status, cut.output_str)
    assert "bytes read" in cut.notes or "did not finish" in cut.notes, cut.notes
    assert not [n for n in cut.output_files if n.endswith(".mp4")], "a partial file passed for the media"

    gallery = got[urls["gallery"]]["gallerydl"]
    assert gallery.status == "noresults" and gallery.output_str, (gallery.status, gallery.output_str)
    image = got[urls["image"]]["gallerydl"]
    assert image.status == "succeeded", (image.output_str, image.notes)
    assert any(name.endswith(".png") for name in image.output_files), image.output_files

    # MEDIA_MAX_SIZE per crawl (ArchiveBox's name): a larger file is not downloaded, and the result says so
    small = submit(stack, urls=[site.url("/video/?small")], plugins=["ytdlp"], config={"MEDIA_MAX_SIZE": "10k"})
    wait_sealed(stack, small, timeout=300)
    capped = results_by_url(sqlite_url, small)[site.url("/video/?small")]["ytdlp"]
    assert capped.status == "noresults" and "MEDIA_MAX_SIZE" in capped.output_str, (capped.status, capped.output_str)
    assert not [n for n in capped.output_files if n.endswith(".mp4")]


def duration(path: Path) -> float:
    """Seconds of media ffprobe reads from ``path`` (yt-dlp adds metadata: the bytes differ)."""
    probe = ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)]
    return float(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)


def test_git_clones_a_repository_served_over_http(sqlite_url, nats_url, make_stack, site):
    stack = make_stack(sqlite_url, nats_url, families=["fetch"])
    repo, page = site.url("/git/sample.git"), site.url("/gallery/")
    crawl_id = submit(stack, urls=[repo, page], plugins=["git"], config={"GIT_TIMEOUT": 60})
    wait_sealed(stack, crawl_id, timeout=300)
    got = results_by_url(sqlite_url, crawl_id)
    clone = got[repo]["git"]
    assert clone.status == "succeeded", (clone.output_str, clone.notes)
    assert (snap_dirs(stack, sqlite_url, crawl_id)[repo] / "git" / "README.md").read_text().strip() == REPO_README
    assert got[page]["git"].status == "noresults" and got[page]["git"].output_str == "Not a git URL"


def test_singlefile_opens_offline_and_readability_keeps_the_article(
    sqlite_url, nats_url, make_stack, site, corpus_server
):
    stack = make_stack(sqlite_url, nats_url, families=["browser", "extract"])
    article = site.url("/article/")
    pages = {f"{corpus_server}/pages/{name}/": name for name in READABILITY_PAGES}
    crawl_id = submit(stack, urls=[article, *pages], plugins=["singlefile", "readability"])
    wait_sealed(stack, crawl_id, timeout=600)
    got = results_by_url(sqlite_url, crawl_id)
    dirs = snap_dirs(stack, sqlite_url, crawl_id)

    single = got[article]["singlefile"]
    assert single.status == "succeeded" and single.output_str == "singlefile/singlefile.html", single.notes
    html = (dirs[article] / "singlefile" / "singlefile.html").read_text()
    assert "data:image/png;base64," in html and "/images/" not in html.split("<body", 1)[1]
    text, widths = open_offline(dirs[article] / "singlefile" / "singlefile.html")
    assert ARTICLE_TEXT in text and widths == [42, 43]  # both images, the cross-origin one too, inline

    readable = (dirs[article] / "readability" / "content.txt").read_text()
    assert ARTICLE_TEXT in readable and NAV_TEXT not in readable
    for url, name in pages.items():
        result = got[url]["readability"]
        assert result.status == "succeeded", (name, result.output_str, result.notes)
        assert got[url]["singlefile"].status == "succeeded", (name, got[url]["singlefile"].notes)
        body, nav = READABILITY_PAGES[name]
        readable = " ".join((dirs[url] / "readability" / "content.txt").read_text().split())
        assert body in readable, f"{name}: the article body is missing"
        assert nav not in readable, f"{name}: navigation ({nav!r}) is in the article text"


def open_offline(path: Path) -> tuple[str, list[int]]:
    """The page's text and its images' natural widths, opened from the file in Chromium with every
    network request refused."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            context = browser.new_context(offline=True)
            page = context.new_page()
            refused = []
            page.route(
                "**/*",
                lambda route: (
                    route.continue_()
                    if route.request.url.startswith(("file:", "data:"))
                    else (refused.append(route.request.url), route.abort())
                ),
            )
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            widths = page.evaluate("() => [...document.images].map(i => (i.complete ? i.naturalWidth : 0))")
            assert not refused, f"the saved page asked the network for {refused[:3]}"
            return page.inner_text("body"), widths
        finally:
            browser.close()


def test_a_plugin_whose_binary_cannot_be_had_is_skipped_with_the_reason(sqlite_url, nats_url, make_stack, site):
    """ffmpeg missing (here: a name no provider knows): ytdlp is ``skipped`` saying which binary and
    why; the task goes on and gallery-dl runs."""
    missing = json.dumps({"{FFMPEG_BINARY}": {"name": "ffmpeg-not-on-this-machine", "binproviders": "env"}})
    stack = make_stack(sqlite_url, nats_url, families=["media"], env={"BINARY_OVERRIDES": missing})
    crawl_id = submit(stack, urls=[site.url("/images/1.png")], plugins=["ytdlp", "gallerydl"])
    wait_sealed(stack, crawl_id, timeout=300)
    got = results_by_url(sqlite_url, crawl_id)[site.url("/images/1.png")]
    assert got["ytdlp"].status == "skipped", (got["ytdlp"].status, got["ytdlp"].output_str)
    assert "ffmpeg-not-on-this-machine" in got["ytdlp"].output_str and "not found" in got["ytdlp"].output_str
    assert got["gallerydl"].status == "succeeded", got["gallerydl"].notes
