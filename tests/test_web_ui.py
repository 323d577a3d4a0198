"""The web UI in a real browser: Playwright drives Debian's Chromium (headless, the system binary:
no browser download) against one embedded stack for the whole module.

A person logs in, adds local pages on ``/add``, watches the crawl seal without reloading, finds a
page by a phrase of its text, sees its screenshot, opens a hostile archived page whose script
tries ``document.cookie`` and ``fetch('/api/v1/crawls')`` (neither reaches Boxcar), replays the
WARC in ReplayWeb.page, and deletes a snapshot. With ``UI_SCREENSHOT_DIR`` set, every page is
saved there as a PNG.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import select

from boxcar.cli.stack import EmbeddedStack
from boxcar.ingest.web.accounts import create_user
from boxcar.shared.db import Database
from boxcar.shared.settings import Settings
from tests.helpers import (
    CHROMIUM,
    chromium_browser,
    load_crawl,
    npm_tool,
    provision_replay,
    serve_directory,
    ui_stack,
    wait_until,
)

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (pip) is needed for browser tests")
PASSWORD = "a long enough password"
PHRASE = "amber kestrel hovered above the quarry"
ARTICLE = f"""<!doctype html><html><head><title>Kestrel field notes</title></head><body>
<h1>Kestrel field notes</h1>
<p>On the third morning the {PHRASE} meadow while the mist lifted from the river.</p>
<p>Later a pair of wrens argued in the hawthorn, and nothing else happened worth writing down.</p>
</body></html>"""
HOSTILE = """<!doctype html><html><head><title>Harmless looking page</title></head><body>
<p id="static">A page with a script that wants Boxcar's cookies and API.</p>
<script>
  document.title = "PWNED";
  var stolen = "";
  try { stolen = document.cookie; } catch (e) { stolen = "threw " + e.name; }
  fetch("/api/v1/crawls?stolen=" + encodeURIComponent(stolen), {credentials: "include"}).catch(function () {});
  document.body.insertAdjacentHTML("beforeend", '<p id="ran">script ran</p>');
</script>
</body></html>"""

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[str]:
    """Two local pages: an article with a distinctive phrase, and a hostile page."""
    root = tmp_path_factory.mktemp("site")
    (root / "article.html").write_text(ARTICLE)
    (root / "hostile.html").write_text(HOSTILE)
    with serve_directory(root) as url:
        yield url


@pytest.fixture(scope="module")
def stack(tmp_path_factory, lib_dir: Path) -> Iterator[EmbeddedStack]:
    """One embedded stack (SQLite, its own NATS) for every test of this module, with a user."""
    data_dir = tmp_path_factory.mktemp("ui") / "data"
    plugins = "chrome,title,screenshot,dom,wget,htmltotext"
    with ui_stack(data_dir, lib_dir, plugins, ("alice", PASSWORD), prepare=provision_replay) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with chromium_browser() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def page(browser, stack):
    """One logged-in browser tab for the module (the session cookie is kept between tests)."""
    context = browser.new_context(base_url=stack.api_url, viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


@pytest.fixture(scope="module")
def state() -> dict:
    """What one test leaves for the next (crawl and snapshot ids)."""
    return {}


def shot(page, name: str) -> None:
    """Save a PNG of the page under UI_SCREENSHOT_DIR when it is set."""
    folder = os.environ.get("UI_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_log_in_add_urls_and_watch_the_crawl_seal_without_a_reload(page, stack, site, state):
    page.goto("/")
    assert "/login" in page.url  # nothing is shown without a login (PUBLIC_READS is off)
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    shot(page, "01-login")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    cookie = next(c for c in page.context.cookies() if c["name"] == "boxcar_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

    page.goto("/add")
    page.fill("textarea[name=urls]", f"{site}/article.html\n{site}/hostile.html")
    page.fill("input[name=tags]", "birds")
    shot(page, "02-add")
    page.click("#submit")
    page.wait_for_url(re.compile(r"/crawls/[0-9a-f]{32}$"))
    state["crawl_id"] = page.url.rsplit("/", 1)[1]
    page.evaluate("window.__sameDocument = true")  # gone if the page were reloaded
    page.wait_for_function(
        "document.querySelector('#crawl-status')?.textContent.trim() === 'sealed'"
        " && !document.querySelector('#progress[hx-trigger]')",
        timeout=300_000,
    )
    assert page.evaluate("window.__sameDocument") is True
    assert page.inner_text("#snapshots-sealed") == "2"
    shot(page, "03-crawl-sealed")

    _, snaps, results = load_crawl(Database(stack.settings.sqlalchemy_url), state["crawl_id"])
    by_url = {s.url: s.id for s in snaps}
    state["article"], state["hostile"] = by_url[f"{site}/article.html"], by_url[f"{site}/hostile.html"]
    assert any(r.plugin == "htmltotext" and r.status == "succeeded" for r in results)


def test_find_the_page_by_a_phrase_of_its_text(page, state):
    page.fill("header input[name=q]", "kestrel hovered above the quarry")
    page.press("header input[name=q]", "Enter")
    page.wait_for_url(re.compile(r"\?q="))
    first = page.locator("tr.snapshot-row").first
    assert first.get_attribute("data-id") == state["article"]
    assert "Kestrel field notes" in first.inner_text()
    assert page.locator("tr.snapshot-row .snippet mark").count() >= 1
    shot(page, "04-search")


def test_the_snapshot_page_shows_its_screenshot(page, state):
    page.goto("/")
    row = page.locator(f"tr.snapshot-row[data-id='{state['article']}']")
    assert "birds" in row.inner_text() and "200" in row.inner_text()
    page.wait_for_function(f"document.querySelector(\"tr[data-id='{state['article']}'] img.thumb\")?.naturalWidth > 0")
    shot(page, "05-list")
    page.goto(f"/snapshots/{state['article']}")
    page.wait_for_function("document.querySelector('#screenshot')?.complete")
    assert page.evaluate("document.querySelector('#screenshot').naturalWidth") > 0
    for view in ("#view-wget", "#view-dom", "#view-htmltotext", "#download-warc", "#replay"):
        assert page.locator(view).count() == 1, view
    shot(page, "06-snapshot")


def requests_into(urls: list[str]):
    """A request listener that records each request's URL into ``urls``."""
    return lambda request: urls.append(request.url)


def test_a_hostile_archived_page_never_reaches_boxcar(page, stack, state):
    page.goto(f"/snapshots/{state['hostile']}")
    views = [page.get_attribute(v, "href") for v in ("#view-wget", "#view-dom")]
    assert all(views), views
    for href in views:
        requests: list[str] = []
        listener = requests_into(requests)
        page.on("request", listener)
        response = page.goto(href)
        assert response.status == 200
        assert response.headers["content-security-policy"].startswith("sandbox")
        assert page.locator("#static").count() == 1  # the archived page is shown …
        time.sleep(1.5)  # … and had time to run a script, if it could
        page.remove_listener("request", listener)
        assert page.locator("#ran").count() == 0 or href.endswith("output.html")
        assert page.evaluate("document.title") != "PWNED" or href.endswith("output.html")
        assert not [u for u in requests if "/api/" in u], requests  # no fetch left the page
        shot(page, "07-hostile-" + ("dom" if href.endswith("output.html") else "wget"))
    # the browser holds a live session for the whole test: it was never available to the page
    assert any(c["name"] == "boxcar_session" for c in page.context.cookies())


def shows_phrase(page, seen: dict[str, str]) -> bool:
    """Whether a frame of ``page`` (ReplayWeb.page nests them) shows the article's phrase; notes
    each frame's URL and the start of its text in ``seen``."""
    for frame in page.frames:
        try:
            text = frame.evaluate("document.body ? document.body.innerText : ''") or ""
        except playwright_api.Error as exc:
            text = f"<{exc.message.splitlines()[0]}>"
        seen[frame.url] = " ".join(text.split())[:200]
        if PHRASE in text:
            return True
    return False


def test_replay_shows_the_captured_page(page, state):
    page.goto(f"/snapshots/{state['article']}")
    page.click("#replay")
    page.wait_for_url(re.compile(r"/replay$"))
    frame_src = page.get_attribute("#replay-frame", "src")
    assert not frame_src.startswith(page.url.split("/snapshots")[0])  # another origin than Boxcar's

    seen: dict[str, str] = {}  # each frame's URL and the start of its text, for the failure message
    try:
        wait_until(partial(shows_phrase, page, seen), 90, "the replayed page's text inside ReplayWeb.page")
    except AssertionError as exc:
        shot(page, "08-replay-failed")
        raise AssertionError(f"{exc}; frames seen: {seen}") from None
    state["replay_frame"] = next(f.url for f in page.frames if "/replay/?" in f.url and "source=" in f.url)
    shot(page, "08-replay")


def test_the_replay_frame_works_before_a_service_worker_controls_it(browser, page, state):
    """The frame the embed loaded (``/replay/?source=…``), opened where no service worker is
    registered yet (a new browser context with the same login): the server's answer is the viewer
    itself, which registers its worker and replays, instead of a 404 (replayweb.page #412)."""
    frame_url = state["replay_frame"]
    context = browser.new_context(storage_state=page.context.storage_state())
    try:
        fresh = context.new_page()
        assert fresh.goto(frame_url).status == 200
        wait_until(partial(shows_phrase, fresh, {}), 90, "the replayed text where no service worker was yet")
    finally:
        context.close()


VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
AXE_VERSION = "4.10.3"


@pytest.fixture(scope="module")
def axe_source() -> str:
    """axe-core's script (npm, kept under .cache/ like web-ext): injected into each page."""
    return npm_tool("axe-core", AXE_VERSION, "axe.min.js").read_text()


def axe_violations(page, axe_source: str) -> list[str]:
    """axe-core's serious and critical violations on the page, as "rule: target" strings."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source)
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{v['id']}: {', '.join(str(n['target']) for n in v['nodes'][:3])}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


#: Visible form controls whose right edge is past the viewport's (or cut off by a clipping parent).
CONTROLS_OUT_OF_VIEW = """[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter(e => e.offsetParent !== null && e.getBoundingClientRect().right > window.innerWidth + 1)
  .map(e => `${e.tagName.toLowerCase()}[name=${e.name || e.id || '?'}]`)"""


def test_every_page_fits_a_phone_and_passes_axe(page, state, axe_source):
    """At 1280×900 and 390×844, light and dark: no page wider than the viewport, no serious or
    critical axe-core violation, and a screenshot of each (UI_SCREENSHOT_DIR)."""
    paths = {
        "list": "/",
        "search": "/?q=" + "+".join(PHRASE.split()[:2]),
        "snapshot": f"/snapshots/{state['article']}",
        "crawl": f"/crawls/{state['crawl_id']}",
        "crawls": "/crawls",
        "add": "/add",
        "feeds": "/feeds",
        "settings": "/settings",
        "users": "/admin/users",
    }
    problems = []
    try:
        for size, viewport in VIEWPORTS.items():
            page.set_viewport_size(viewport)
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                for name, path in paths.items():
                    page.goto(path)
                    page.wait_for_load_state("networkidle")
                    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
                    if width[0] > width[1]:
                        problems.append(f"{name} {size}: {width[0]} px wide in a {width[1]} px viewport")
                    # a control can stick out of a box that clips it without widening the page
                    cut = page.evaluate(CONTROLS_OUT_OF_VIEW)
                    problems += [f"{name} {size}: {c} reaches past the viewport's right edge" for c in cut]
                    problems += [f"{name} {size} {scheme}: {v}" for v in axe_violations(page, axe_source)]
                    shot(page, f"layout-{size}-{scheme}-{name}")
            page.emulate_media(color_scheme="dark")
            page.goto("/")
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == "rgb(18, 22, 27)", background  # the dark theme followed the system
    finally:
        page.set_viewport_size(VIEWPORTS["desktop"])
        page.emulate_media(color_scheme="light")
    assert not problems, "\n".join(problems)


def test_theme_toggle_and_keyboard_shortcuts(page):
    page.goto("/")
    page.click("#theme-toggle")  # auto → light
    page.click("#theme-toggle")  # light → dark
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"  # remembered
    page.click("#theme-toggle")  # dark → auto
    assert page.evaluate("document.documentElement.dataset.theme") is None
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search-box"
    page.keyboard.press("Escape")
    page.locator("body").click(position={"x": 5, "y": 400})
    page.keyboard.press("a")
    page.wait_for_url(re.compile(r"/add$"))


def test_grid_view_is_remembered_and_bulk_actions_work(page, state, stack):
    page.goto("/")
    page.click("#view-grid")
    page.wait_for_selector("article.snap-card")
    card = page.locator(f"article.snap-card[data-id='{state['article']}']")
    page.wait_for_function(
        f"document.querySelector(\"article[data-id='{state['article']}'] .shot img\")?.naturalWidth > 0"
    )
    assert "ok" in card.locator(".summary").inner_text()
    shot(page, "grid-desktop")
    page.set_viewport_size(VIEWPORTS["phone"])
    shot(page, "grid-phone")
    page.set_viewport_size(VIEWPORTS["desktop"])
    page.goto("/crawls")
    page.goto("/")
    assert page.locator("article.snap-card").count() == 2  # remembered (the person's, in the database)

    card.locator("input.pick").check()
    page.select_option("#bulk-action", "tag")
    page.fill("#bulk-tags", "picked, bulk")
    page.click("#bulk-apply")
    page.wait_for_selector(".flash")
    assert "Tagged 1." in page.inner_text(".flash")
    assert {t.inner_text() for t in card.locator(".tag").all()} >= {"picked", "bulk"}

    page.locator(f"article.snap-card[data-id='{state['hostile']}'] input.pick").check()
    page.locator(f"article.snap-card[data-id='{state['article']}'] input.pick").check()
    page.select_option("#bulk-action", "export")
    with page.expect_download() as download:
        page.click("#bulk-apply")
    lines = Path(download.value.path()).read_text().splitlines()
    assert {json.loads(line)["id"] for line in lines} == {state["article"], state["hostile"]}

    page.click("#view-list")
    page.wait_for_selector("tr.snapshot-row")


def test_add_shows_defaults_by_family_and_previews_a_list(page, site):
    page.goto("/add")
    assert page.locator("fieldset.plugin-family").count() >= 2
    ticked = {b.get_attribute("value") for b in page.locator("input[name=plugins]:checked").all()}
    assert ticked == {"chrome", "title", "screenshot", "dom", "wget", "htmltotext"}  # PLUGINS of this stack
    page.fill("textarea[name=urls]", f"{site}/article.html\nnot a url\n{site}/article.html\n{site}/new.html")
    page.wait_for_selector("#preview p")
    preview = page.inner_text("#preview")
    assert "1 URL(s) to archive" in preview and "1 duplicate(s) merged" in preview
    assert "1 archived before" in preview
    shot(page, "add-preview")


def test_the_same_flows_work_on_a_phone(browser, stack, site):
    """At 390×844 in a fresh context: log in, add a page, watch its crawl seal without a reload,
    find it by a phrase, open it with its screenshot, delete it — no page wider than the screen."""
    context = browser.new_context(base_url=stack.api_url, viewport=VIEWPORTS["phone"], is_mobile=True, has_touch=True)
    phone = context.new_page()
    phone.set_default_timeout(30_000)

    def fits() -> None:
        width = phone.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"{phone.url}: {width[0]} px wide in {width[1]}"

    try:
        phone.goto("/")
        phone.fill("input[name=username]", "alice")
        phone.fill("input[name=password]", PASSWORD)
        phone.click("button[type=submit]")
        phone.wait_for_url(re.compile(r"/$"))
        fits()
        phone.goto("/add")
        fits()
        url = f"{site}/article.html?from=phone"
        phone.fill("textarea[name=urls]", url)
        phone.click("#submit")
        phone.wait_for_url(re.compile(r"/crawls/[0-9a-f]{32}$"))
        phone.evaluate("window.__sameDocument = true")
        phone.wait_for_function(
            "document.querySelector('#crawl-status')?.textContent.trim() === 'sealed'"
            " && !document.querySelector('#progress[hx-trigger]')",
            timeout=300_000,
        )
        assert phone.evaluate("window.__sameDocument") is True
        fits()
        shot(phone, "phone-crawl-sealed")
        phone.goto("/?q=" + "+".join(PHRASE.split()))
        fits()
        row = phone.locator("tr.snapshot-row", has_text="from=phone")
        assert row.count() == 1 and row.locator(".snippet mark").count() >= 1
        shot(phone, "phone-search")
        row.locator("a.title").click()
        phone.wait_for_url(re.compile(r"/snapshots/[0-9a-f]{32}$"))
        phone.wait_for_function("document.querySelector('#screenshot')?.complete")
        assert phone.evaluate("document.querySelector('#screenshot').naturalWidth") > 0
        fits()
        shot(phone, "phone-snapshot")
        snapshot_url = phone.url
        phone.once("dialog", lambda dialog: dialog.accept())
        phone.click("#delete")
        phone.wait_for_url(re.compile(r"/\?deleted=1$"))
        assert phone.goto(snapshot_url).status == 404
    finally:
        context.close()


def test_delete_a_snapshot_and_it_is_gone_from_list_and_search(page, state):
    page.goto(f"/snapshots/{state['article']}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete")
    page.wait_for_url(re.compile(r"/\?deleted=1$"))
    assert page.locator(f"tr[data-id='{state['article']}']").count() == 0
    assert page.locator(f"tr[data-id='{state['hostile']}']").count() == 1
    shot(page, "09-deleted")
    page.goto("/?q=" + "+".join(PHRASE.split()))
    assert page.locator("tr.snapshot-row").count() == 0
    assert page.goto(f"/snapshots/{state['article']}").status == 404


@contextmanager
def ingest_alone(tmp_path: Path, page: str, **overrides) -> Iterator[tuple[Settings, Database, str, Path]]:
    """Ingest alone (no stack) on free ports, with a user and one archived page (``page``, the
    snapshot's ``wget/index.html``); with ``archive_security_mode="separate-origin"`` the archive
    origin too, on its own port of the same host. Yields (settings, database, the page's URL path,
    the page's file)."""
    import uvicorn

    from boxcar.cli.stack import free_port, wait_for_port
    from boxcar.ingest.app import create_app, create_archive_app
    from boxcar.shared.clock import utcnow
    from boxcar.shared.db.models import Crawl, Snapshot, Status
    from boxcar.shared.storage import snapshot_dir

    separate = overrides.get("archive_security_mode") == "separate-origin"
    api_port = free_port()
    if separate:  # a port of its own (two free_port() calls may name the same one)
        overrides["archive_port"] = next(port for port in iter(free_port, None) if port != api_port)
    settings = Settings(data_dir=tmp_path / "data", nats_url="nats://127.0.0.1:9", api_port=api_port, **overrides)
    db = Database(settings.sqlalchemy_url)
    db.upgrade()
    create_user(db, "alice", PASSWORD, role="admin")
    now = utcnow()
    crawl = Crawl.new(user="system", first_url="http://h.test/", seed_count=1, now=now)
    out = snapshot_dir("system", now, "http://h.test/", "a" * 32)
    with db.write() as s:
        s.add(crawl)
        s.flush()
        s.add(Snapshot(id="a" * 32, crawl_id=crawl.id, url="http://h.test/", url_hash="a" * 64,
                       status=Status.SEALED, output_dir=out))  # fmt: skip
    archived = settings.data_dir / out / "wget" / "index.html"
    archived.parent.mkdir(parents=True)
    archived.write_text(page)
    apps = [(create_app(settings, db), settings.api_port)]
    if separate:
        apps.append((create_archive_app(settings, db), settings.archive_port))
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")) for app, port in apps
    ]
    threads = [threading.Thread(target=server.run, daemon=True) for server in servers]
    for thread in threads:
        thread.start()
    try:
        for _, port in apps:
            wait_for_port(port, 20)
        yield settings, db, f"/archive/{'a' * 32}/wget/index.html", archived
    finally:
        for server in servers:
            server.should_exit = True
        for thread in threads:
            thread.join(10)
        db.dispose()


@pytest.fixture
def sandboxed_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Ingest alone in ``sandboxed-scripts`` mode with the hostile page archived; yields (base URL,
    the archived page's path)."""
    with ingest_alone(tmp_path, HOSTILE, archive_security_mode="sandboxed-scripts") as (settings, _db, path, _file):
        yield f"http://127.0.0.1:{settings.api_port}", path


def logged_in(browser, base: str):
    """A new browser context at ``base`` and a tab in it where alice has logged in."""
    context = browser.new_context(base_url=base)
    tab = context.new_page()
    tab.goto("/login")
    tab.fill("input[name=username]", "alice")
    tab.fill("input[name=password]", PASSWORD)
    tab.click("button[type=submit]")
    tab.wait_for_url(re.compile(r"/$"))
    return context, tab


def test_sandboxed_scripts_run_in_an_opaque_origin_without_boxcar_s_cookies(browser, sandboxed_server):
    base, path = sandboxed_server
    context, tab = logged_in(browser, base)
    sent: list = []
    tab.on("request", lambda request: sent.append(request) if "/api/" in request.url else None)
    tab.goto(path)
    tab.wait_for_selector("#ran")  # this mode lets the page's script run …
    wait_until(lambda: sent, 10, "the page's fetch")
    request = sent[0]
    assert "stolen=threw" in request.url  # … but document.cookie throws in its opaque origin
    assert "cookie" not in request.all_headers()  # and its request carries none of Boxcar's cookies
    assert any(c["name"] == "boxcar_session" for c in context.cookies())  # though the browser holds one
    shot(tab, "10-sandboxed-scripts")
    context.close()


#: An archived page that forges a form post to Boxcar from the archive origin (same host, another
#: port: same-site, so the session cookie goes along): it plants a CSRF cookie holding a token
#: Boxcar signed (anyone gets one from /login) and posts that token with the form.
FORGER = """<!doctype html><html><head><title>Forger</title></head><body>
<form id="f" method="post" action="%(target)s/settings/tokens">
<input name="name" value="forged-by-archived-page"><input name="_csrf_token" value="%(token)s"></form>
<script>document.cookie = "csrftoken=%(token)s; path=/"; document.getElementById("f").submit();</script>
</body></html>"""


def test_an_archived_page_on_the_archive_origin_cannot_post_boxcar_s_forms(browser, tmp_path):
    import httpx

    from boxcar.shared.db.models import ApiToken

    with ingest_alone(tmp_path, "", archive_security_mode="separate-origin") as (settings, db, path, archived):
        main, archive = f"http://127.0.0.1:{settings.api_port}", f"http://127.0.0.1:{settings.archive_port}"
        token = httpx.get(f"{main}/login").cookies["csrftoken"]  # a token Boxcar signed, for anyone
        archived.write_text(FORGER % {"target": main, "token": token})
        context, tab = logged_in(browser, main)
        context.clear_cookies(name="csrftoken")  # the page's cookie is the only one (an expired one, a new tab)
        with tab.expect_navigation(url=re.compile(re.escape(main) + "/settings/tokens")) as landed:
            tab.goto(archive + path)  # the archived page runs with its own origin, and posts
        answer = landed.value
        assert answer.status == 403, answer.status
        assert "Cross-origin request refused" in tab.content()
        shot(tab, "11-forged-post-refused")
        assert any(c["name"] == "boxcar_session" for c in context.cookies())  # it had the session
        with db.read() as s:
            assert not s.scalars(select(ApiToken).where(ApiToken.name == "forged-by-archived-page")).all()
        context.close()


def test_status_says_which_services_are_alive(stack):
    import json

    from click.testing import CliRunner

    from boxcar.cli.main import cli
    from tests.helpers import api

    def alive():
        state = api(stack).get("/api/v1/status").json()
        return state if all(state["services"].values()) else None

    state = wait_until(alive, 20, "every service to be seen alive")
    assert set(state["services"]) == {"ingest", "nats", "crawl-runner", "result-projector", "webhook-sender"}
    assert state["disk_used_bytes"] > 0
    out = CliRunner().invoke(cli, ["status", "--json", "--api", stack.api_url, "--token", stack.token])
    assert out.exit_code == 0 and json.loads(out.output)["services"]["result-projector"] is True
