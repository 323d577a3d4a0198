"""Saving from anywhere, in a real browser: Boxcar's extension loaded into Debian's Chromium
(``--load-extension``, headless) against a running embedded stack, the bookmarklet and the share
target opening ``/add`` prefilled, the web app manifest passing Chromium's installability check,
and Mozilla's ``web-ext lint`` on the Firefox build.

The toolbar popup is opened as the extension's page with the target in its query
(``popup.html?url=…``), since a headless browser has no toolbar to click; the context-menu entries
are clicked by calling the background worker's ``onMenuClick`` with the ``info`` Chromium passes.
With ``UI_SCREENSHOT_DIR`` set, the options page, the popup and ``/settings`` (desktop and phone
widths) are saved there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy import select

from boxcar.cli.stack import EmbeddedStack
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot, Status
from tests.helpers import serve_directory, ui_stack, wait_until

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (pip) is needed for browser tests")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import build_extension  # noqa: E402

expect = playwright_api.expect
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PASSWORD = "a long enough password"
WEB_EXT_VERSION = "8.10.0"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("site")
    for name in ("article", "linked", "bookmarked"):
        (root / f"{name}.html").write_text(
            f"<!doctype html><html><head><title>The {name} page</title></head><body><h1>{name}</h1>"
            f'<p><a id="link" href="linked.html">a link</a></p></body></html>'
        )
    with serve_directory(root) as url:
        yield url


@pytest.fixture(scope="module")
def stack(tmp_path_factory, lib_dir: Path) -> Iterator[EmbeddedStack]:
    with ui_stack(tmp_path_factory.mktemp("ext") / "data", lib_dir, "wget", ("alice", PASSWORD)) as running:
        yield running


@pytest.fixture(scope="module")
def db(stack) -> Iterator[Database]:
    database = Database(stack.settings.sqlalchemy_url)
    yield database
    database.dispose()


@pytest.fixture(scope="module")
def extension_dir(tmp_path_factory) -> Path:
    return build_extension.build(tmp_path_factory.mktemp("extension"))["chromium"].parent / "chromium"


@pytest.fixture(scope="module")
def browser(tmp_path_factory, extension_dir):
    """A Chromium profile with the unpacked extension; yields (context, extension id, worker)."""
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=[f"--disable-extensions-except={extension_dir}", f"--load-extension={extension_dir}"],
        )
        context.set_default_timeout(30_000)
        worker = context.service_workers[0] if context.service_workers else context.wait_for_event("serviceworker")
        yield context, worker.url.split("/")[2], worker
        context.close()


def shot(page, name: str) -> None:
    folder = os.environ.get("UI_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def configure(context, ext_id: str, server: str, token: str) -> str:
    """Fill and save the options page; returns the status it shows."""
    page = context.new_page()
    page.goto(f"chrome-extension://{ext_id}/options.html")
    page.fill("#server", server)
    page.fill("#token", token)
    page.click("#save")
    page.wait_for_selector("#status.ok, #status.error")  # (the extension's CSP forbids eval: no wait_for_function)
    status = page.text_content("#status")
    shot(page, f"ext-options-{'ok' if 'Connected' in status else 'error'}")
    page.close()
    return status


def popup(context, ext_id: str, url: str, title: str = ""):
    page = context.new_page()
    page.set_viewport_size({"width": 360, "height": 420})
    page.goto(f"chrome-extension://{ext_id}/popup.html?url={quote(url, safe='')}&title={quote(title)}")
    return page


def snapshots_of(db: Database, url: str) -> list[Snapshot]:
    with db.read() as s:
        return list(s.scalars(select(Snapshot).where(Snapshot.url == url).order_by(Snapshot.created_at)))


def test_options_check_the_server_and_the_token(browser, stack):
    context, ext_id, _ = browser
    assert "does not know this token" in configure(context, ext_id, stack.api_url, "bx_not-a-token")
    status = configure(context, ext_id, stack.api_url.replace("127.0.0.1", "localhost") + "/some/path", stack.token)
    assert status.startswith("Connected to http://localhost:"), status


def test_popup_archives_the_page_then_says_archived_before(browser, stack, site, db):
    context, ext_id, _ = browser
    assert configure(context, ext_id, stack.api_url, stack.token).startswith("Connected")
    page = popup(context, ext_id, f"{site}/article.html", "The article page")
    assert page.text_content("#url") == f"{site}/article.html"
    page.fill("#tags", "from-extension, reading")
    page.click("#archive")
    link = page.wait_for_selector("#snapshot-link", timeout=180_000)
    assert page.text_content("#status").startswith("Archived")
    shot(page, "ext-popup-archived")
    [snap] = snapshots_of(db, f"{site}/article.html")
    assert snap.status == Status.SEALED and link.get_attribute("href") == f"{stack.api_url}/snapshots/{snap.id}"
    with db.read() as s:
        crawl = s.get(Crawl, snap.crawl_id)
    assert crawl.tags_str == "from-extension,reading" and snap.title

    again = popup(context, ext_id, f"{site}/article.html", "The article page")
    assert again.input_value("#tags") == "from-extension, reading"  # remembered
    again.click("#archive")
    again.wait_for_selector("#again:visible")
    assert again.text_content("#status").startswith("Archived before")
    assert again.get_attribute("#snapshot-link", "href") == f"{stack.api_url}/snapshots/{snap.id}"
    shot(again, "ext-popup-archived-before")
    again.click("#again")
    expect(again.locator("#status")).to_have_text(re.compile(r"^Archived\."), timeout=180_000)
    assert len(snapshots_of(db, f"{site}/article.html")) == 2


def test_popup_refuses_pages_that_are_not_on_the_web(browser, stack):
    context, ext_id, _ = browser
    for url in ("chrome://settings/", "file:///etc/hostname", "chrome-extension://abc/viewer.html?src=x.pdf"):
        page = popup(context, ext_id, url)
        assert page.is_disabled("#archive")
        assert "can't be archived" in page.text_content("#status")
        page.close()


def test_context_menu_archives_a_link(browser, stack, site, db):
    context, ext_id, worker = browser
    outcome = worker.evaluate(
        "([link, page]) => onMenuClick("
        "{menuItemId: 'boxcar-archive-link', linkUrl: link, linkText: 'a link', pageUrl: page},"
        " {url: page, title: 'The article page'})",
        [f"{site}/linked.html", f"{site}/article.html"],
    )
    assert outcome["state"] == "archived", outcome
    [snap] = snapshots_of(db, f"{site}/linked.html")
    assert snap.status == Status.SEALED and outcome["link"].endswith(snap.id)
    last = worker.evaluate("ext.storage.local.get('last').then(x => x.last)")
    assert last["state"] == "archived" and last["source"] == "link"


def test_errors_a_person_can_act_on(browser, stack, site, db):
    """Server down: 'unreachable'; a revoked token: reconnect; a refused page: the policy's reason."""
    context, ext_id, worker = browser
    assert configure(context, ext_id, stack.api_url, stack.token).startswith("Connected")
    worker.evaluate("(url) => ext.storage.local.set({server: url})", "http://127.0.0.1:9")
    page = popup(context, ext_id, f"{site}/bookmarked.html")
    page.click("#archive")
    page.wait_for_selector("#status.error")
    assert "unreachable at http://127.0.0.1:9" in page.text_content("#status")
    shot(page, "ext-popup-unreachable")

    worker.evaluate(
        "([url]) => ext.storage.local.set({server: url, token: 'bx_revoked-or-never-was'})", [stack.api_url]
    )
    page = popup(context, ext_id, f"{site}/bookmarked.html")
    page.click("#archive")
    page.wait_for_selector("#status.error")
    assert "refused the API token" in page.text_content("#status") and page.is_visible("#setup")
    assert not snapshots_of(db, f"{site}/bookmarked.html")


def test_bookmarklet_and_share_target_open_add_prefilled(browser, stack, site):
    context, _, _ = browser
    page = context.new_page()
    page.goto(f"{stack.api_url}/login")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    for width, name in ((1280, "desktop"), (390, "phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{stack.api_url}/settings")
        shot(page, f"settings-bookmarklet-{name}")
    code = page.get_attribute("#bookmarklet", "href")
    assert code.startswith("javascript:")

    article = context.new_page()
    article.goto(f"{site}/article.html")
    with context.expect_page() as opened:
        article.evaluate(code.removeprefix("javascript:"))  # what clicking the bookmark runs
    added = opened.value
    added.wait_for_load_state()
    assert added.url.startswith(f"{stack.api_url}/add?url=")
    assert added.input_value("textarea[name=urls]") == f"{site}/article.html"
    assert added.input_value("input[name=title]") == "The article page"

    shared = f"{stack.api_url}/add?title=Look&text={quote(f'Worth keeping: {site}/linked.html')}"
    page.goto(shared)
    assert page.input_value("textarea[name=urls]") == f"{site}/linked.html"


def test_the_ui_is_an_installable_app(browser, stack):
    context, _, _ = browser
    page = context.new_page()
    page.goto(f"{stack.api_url}/login")
    cdp = context.new_cdp_session(page)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["url"].endswith("/manifest.webmanifest") and not manifest["errors"], manifest["errors"]
    assert json.loads(manifest["data"])["share_target"]["action"] == "/add"
    wait_until(
        lambda: page.evaluate("navigator.serviceWorker.getRegistration().then(r => !!(r && r.active))"),
        30,
        "the app-shell service worker to activate",
    )
    errors = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
    assert errors == [], errors


def test_web_ext_lint_passes_on_the_firefox_build(tmp_path):
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed for web-ext lint (make system-deps installs it)")
    tools = ROOT / ".cache" / "web-ext"
    web_ext = tools / "node_modules" / ".bin" / "web-ext"
    if not web_ext.exists():
        subprocess.run(
            [
                npm,
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(tools),
                f"web-ext@{WEB_EXT_VERSION}",
            ],
            check=True,
            timeout=600,
        )
    firefox = build_extension.build(tmp_path)["firefox"].parent / "firefox"
    run = subprocess.run(
        ["node", str(web_ext), "lint", "--source-dir", str(firefox), "--output", "json", "--no-config-discovery"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(run.stdout)
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0, report
