"""The browser family: real Chromium captures of corpus pages, no orphaned browsers when an
executor is SIGKILLed, bounded browsers under recycling, and `boxcar install` provisioning."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import imagesize
import psutil
import pytest

from boxcar.hook_executor import cdp
from boxcar.hook_executor.reaper import BROWSER_ENV, WORKER_ENV, processes_with
from boxcar.shared.db import Database
from boxcar.shared.settings import Settings
from tests.helpers import api, load_crawl, submit, wait_sealed, wait_until

CORPUS = Path(os.environ.get("BOXCAR_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "corpus"
BOXCAR = str(Path(sys.executable).parent / "boxcar")


def corpus_pages(corpus_server: str, n: int, offset: int = 0) -> list[tuple[str, dict]]:
    """``n`` real captured pages with their expected metadata."""
    rows = [line.split("\t") for line in (CORPUS / "manifest.tsv").read_text().splitlines()[1:]]
    names = [r[0] for r in rows if r[3] == "capture"][offset : offset + n]
    return [
        (f"{corpus_server}/pages/{name}/", json.loads((CORPUS / "pages" / name / "expected-metadata.json").read_text()))
        for name in names
    ]


def og_title(html: str) -> str | None:
    """The page's ``<meta property="og:title" content=…>``, read with a real HTML parser."""

    class Meta(HTMLParser):
        found: str | None = None

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "meta" and attrs.get("property") == "og:title" and self.found is None:
                self.found = (attrs.get("content") or "").strip()

    parser = Meta()
    parser.feed(html)
    return parser.found or None


def browser_processes(data_dir: Path, worker_prefix: str = "browser-", main_only: bool = False) -> list[psutil.Process]:
    """Chromium processes (crash handlers included) started by a browser-family executor of the
    stack on ``data_dir``: they inherit its worker id and DATA_DIR (other stacks on the machine,
    such as a parallel test run, are not counted). ``main_only``: one per browser: a Chromium with
    a profile (``--user-data-dir``), not a renderer, zygote or crash handler (``--type=``), nor the
    launch hook's ``chromium --version`` or Debian's ``/usr/bin/chromium`` wrapper script and its
    subshells, which are named ``chromium`` too for a moment before a browser starts, nor a child
    a browser has forked and not yet exec'd (it has its parent's command line for that moment)."""
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            name = proc.info["name"] or ""
            args = proc.info["cmdline"] or []
            browser = args and Path(args[0]).name == "chromium" and any(a.startswith("--user-data-dir") for a in args)
            if main_only and (not browser or any(a.startswith("--type=") for a in args)):
                continue
            if "chrom" not in name:
                continue
            environ = proc.environ()
            if environ.get(WORKER_ENV, "").startswith(worker_prefix) and environ.get("DATA_DIR") == str(
                data_dir.resolve()
            ):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    if main_only:
        mains = {p.pid for p in out}
        out = [p for p in out if _parent_pid(p) not in mains]
    return out


def _parent_pid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def test_default_selection_captures_pages_with_a_real_browser(pg_url, nats_url, make_stack, corpus_server):
    pages = corpus_pages(corpus_server, 6)
    stack = make_stack(pg_url, nats_url)
    crawl_id = submit(stack, urls=[url for url, _ in pages])
    wait_sealed(stack, crawl_id, timeout=900)
    _, snaps, results = load_crawl(Database(pg_url), crawl_id)
    by_url = {s.url: s for s in snaps}
    width, height = 1440, 2000  # CHROME_RESOLUTION's default
    titles_ok = 0
    for url, meta in pages:
        snap = by_url[url]
        mine = {r.plugin: r for r in results if r.snapshot_id == snap.id and r.plugin != "chrome"}
        for plugin in ("title", "screenshot", "pdf", "dom", "headers"):
            assert mine[plugin].status == "succeeded", f"{url} {plugin}: {mine[plugin].status} {mine[plugin].notes}"
        snap_dir = stack.data_dir / snap.output_dir
        png = snap_dir / "screenshot" / "screenshot.png"
        assert imagesize.get(png)[0] == width and imagesize.get(png)[1] <= height, imagesize.get(png)
        assert (snap_dir / "pdf" / "output.pdf").read_bytes()[:5] == b"%PDF-"
        dom = (snap_dir / "dom" / "output.html").read_text(errors="replace")
        assert "<html" in dom.lower()
        assert json.loads((snap_dir / "headers" / "headers.json").read_text())
        expected = {
            meta.get("title"),
            og_title((CORPUS / "pages" / url.rstrip("/").rsplit("/", 1)[1] / "index.html").read_text(errors="replace")),
        } - {None}
        titles_ok += snap.title in expected
    assert titles_ok >= 5, f"snapshot titles matched the page's on {titles_ok}/6"


def test_no_browser_survives_a_sigkilled_executor(pg_url, nats_url, make_stack, corpus_server):
    plugins = ["chrome", "title", "screenshot", "dom"]
    stack = make_stack(pg_url, nats_url, env={"PLUGINS": ",".join(plugins), "TASK_ACK_WAIT": "10"})
    executor = next(c for c in stack.children if c.name == "hook-executor-browser")
    pages = [url for url, _ in corpus_pages(corpus_server, 8, offset=20)]
    crawl_id = submit(stack, urls=pages)

    mid_crawl = wait_until(
        lambda: [p for p in browser_processes(stack.data_dir) if "--type=" not in " ".join(p.cmdline())],
        300,
        "the browser executor's Chromium",
    )
    killed_worker = mid_crawl[0].environ()[WORKER_ENV]
    executor.proc.send_signal(signal.SIGKILL)
    executor.proc.wait(10)
    # Chromium is detached by the launch hook: it usually outlives the SIGKILL (then only the restarted
    # executor's sweep removes it), though sometimes it exits on its own when its parent's pipes close.
    print("processes of the killed worker right after SIGKILL:", len(browser_processes(stack.data_dir, killed_worker)))
    assert stack.supervise_once() == ["hook-executor-browser"]  # what `boxcar up` does: restart it

    wait_sealed(stack, crawl_id, timeout=600)
    assert browser_processes(stack.data_dir, killed_worker) == [], "processes of the killed worker survived its restart"
    hook_procs = [p for p in psutil.process_iter() if _env(p).get(WORKER_ENV) == killed_worker]
    assert hook_procs == []
    _, snaps, results = load_crawl(Database(pg_url), crawl_id)
    assert len(snaps) == 8 and all(s.status == "sealed" for s in snaps)
    per_hook = Counter((r.snapshot_id, r.hook_name) for r in results)
    hooks_per_snapshot = Counter(sid for sid, _ in per_hook)
    assert set(per_hook.values()) == {1}
    assert len(set(hooks_per_snapshot.values())) == 1, "some snapshot misses a hook's result"


def test_a_browser_task_cut_short_by_a_crash_runs_again_whole(pg_url, nats_url, make_stack, corpus_server):
    """The browser executor dies mid-task *with its Chromium* (a container's death: `make
    compose-test` SIGKILLs the container's init): the task it held is handed back and run again
    by the restarted executor in its new browser, so the snapshot ends with every browser result
    succeeded, none failed for the crash."""
    plugins = ["chrome", "title", "screenshot", "dom", "pdf"]
    stack = make_stack(pg_url, nats_url, env={"PLUGINS": ",".join(plugins), "BROWSER_CONCURRENCY": "1"})
    executor = next(c for c in stack.children if c.name == "hook-executor-browser")
    pages = [url for url, _ in corpus_pages(corpus_server, 3, offset=40)]
    crawl_id = submit(stack, urls=pages)
    db = Database(pg_url)

    def mid_task():  # a snapshot with some of its browser results recorded, not all
        _, snaps, results = load_crawl(db, crawl_id)
        counts = Counter(r.snapshot_id for r in results)
        return [s.id for s in snaps if s.status != "sealed" and 0 < counts[s.id] < 4]

    cut = wait_until(mid_task, 300, "a snapshot part-way through its browser task", interval=0.05)[0]
    worker = next((stack.data_dir / "tmp").glob("*/workers/browser-*.json")).stem
    killed = [executor.proc.pid, *(p.pid for p in processes_with(WORKER_ENV, {worker}))]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    executor.proc.wait(10)
    assert stack.supervise_once() == ["hook-executor-browser"]

    wait_sealed(stack, crawl_id, timeout=600)
    _, snaps, results = load_crawl(db, crawl_id)
    assert all(s.status == "sealed" for s in snaps)
    failed = [(r.snapshot_id == cut, r.hook_name, r.notes[:200]) for r in results if r.status == "failed"]
    assert failed == [], f"results failed after the crash (snapshot {cut} was cut short): {failed}"
    for snap in snaps:
        mine = {r.plugin for r in results if r.snapshot_id == snap.id and r.status == "succeeded"}
        assert {"title", "screenshot", "dom", "pdf"} <= mine, (snap.url, mine)


def _env(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def _describe(proc: psutil.Process) -> str:
    """pid, parent, status, age and browser generation of a Chromium process, for failure messages."""
    try:
        return (
            f"pid {proc.pid} (parent {proc.ppid()}) {proc.status()} {time.time() - proc.create_time():.1f}s old "
            f"{_env(proc).get(BROWSER_ENV)}"
        )
    except psutil.Error as exc:
        return f"pid {proc.pid} ({type(exc).__name__})"


def test_a_browser_that_fails_to_start_once_costs_the_task_a_retry_not_its_results(
    sqlite_url, nats_url, make_stack, corpus_server, tmp_path
):
    """Chromium refuses its first launch (a wrapper, as ``CHROME_BINARY``, that exits 1 once: a
    browser may fail to start right after its executor's container restarted): the task is handed
    back and tried again instead of recording every browser hook failed, and the snapshot ends
    with its browser results succeeded."""
    marker, bin_dir = tmp_path / "refused-once", tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "chromium-fails-once"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--remote-debugging-port=*)\n'
        f'  if [ ! -e "{marker}" ]; then touch "{marker}"; echo "refusing this first launch" >&2; exit 1; fi;;\n'
        "esac\n"
        f'exec {shutil.which("chromium")} "$@"\n'
    )
    wrapper.chmod(0o755)
    chrome = {"name": wrapper.name, "binproviders": "env", "min_version": None, "max_version": None}
    env = {
        "PLUGINS": "chrome,title,screenshot,dom",
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BINARY_OVERRIDES": json.dumps({"{CHROME_BINARY}": chrome}),
    }
    stack = make_stack(sqlite_url, nats_url, env=env)
    url = corpus_pages(corpus_server, 1, offset=60)[0][0]
    crawl_id = submit(stack, urls=[url])
    wait_sealed(stack, crawl_id, timeout=300)
    assert marker.exists(), "the wrapper never refused a launch: the test did not test anything"
    _, snaps, results = load_crawl(Database(sqlite_url), crawl_id)
    assert [s.status for s in snaps] == ["sealed"]
    failed = [(r.hook_name, r.notes[:200]) for r in results if r.status == "failed"]
    assert failed == []
    assert {"title", "screenshot", "dom"} <= {r.plugin for r in results if r.status == "succeeded"}
    executor = next(c for c in stack.children if c.name == "hook-executor-browser")
    log = executor.log_path.read_text(errors="replace")
    assert "(delivery 1 of 3), retrying: BrowserUnavailable: chromium did not start" in log, log[-3000:]


def test_recycling_keeps_one_browser_per_worker(pg_url, nats_url, make_stack, corpus_server):
    # a browser is recycled once no task uses it: 2 tabs at once, so after 8 or 9 snapshots (with the
    # default 3 at once, 8 to 10: 20 snapshots could need only 2 browsers)
    env = {"PLUGINS": "chrome,title", "BROWSER_RECYCLE_AFTER": "8", "BROWSER_CONCURRENCY": "2"}
    stack = make_stack(pg_url, nats_url, env=env)
    pages = [url for url, _ in corpus_pages(corpus_server, 20, offset=30)]
    assert len(pages) == 20
    peak, mains, stop, seen_together = [0], set(), threading.Event(), []

    def sample() -> None:
        while not stop.is_set():
            browsers = browser_processes(stack.data_dir, main_only=True)
            if len(browsers) > peak[0]:
                peak[0] = len(browsers)
                seen_together[:] = [_describe(p) for p in browsers]  # for the failure message
            mains.update(p.pid for p in browsers)
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        crawl_id = submit(stack, urls=pages)
        wait_sealed(stack, crawl_id, timeout=900)
    finally:
        stop.set()
        sampler.join(5)
    _, snaps, results = load_crawl(Database(pg_url), crawl_id)
    assert len(snaps) == 20 and sum(r.plugin == "title" and r.status == "succeeded" for r in results) >= 19
    assert peak[0] == 1, f"{peak[0]} browsers alive at once (one worker must have at most one): {seen_together}"
    assert len(mains) >= 3, f"20 snapshots, recycled after 8 or 9 each, need 3 browsers; saw {len(mains)}"


def test_install_provisions_everything_then_is_a_no_op(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ABXPKG_LIB_DIR", "DATABASE_URL", "NATS_URL")}
    env["DATA_DIR"] = str(tmp_path / "data")
    first = subprocess.run([BOXCAR, "install", "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = [json.loads(line) for line in first.stdout.splitlines()]
    by_binary = {r["binary"]: r for r in rows if r["binary"]}
    expected = {"node", "abxbus", "browsers", "chromium", "pdftoppm", "wget", "trafilatura"}
    if Settings().warm_hooks:  # (WARM_HOOKS, read from the environment the install gets too)
        expected.add("esbuild")  # the bundler of the browser hooks' puppeteer-core
    assert expected <= set(by_binary)
    assert {"yt-dlp", "ffmpeg", "gallery-dl", "git", "single-file", "readability-extractor", "defuddle"} <= set(
        by_binary
    )
    ready = {r["plugin"] for r in rows if r["status"] == "ready"}
    assert {"singlefile", "ytdlp", "gallerydl", "git", "readability", "defuddle", "chrome_mhtml", "dns"} <= ready
    assert all(r["status"] in ("found", "installed") for r in by_binary.values())
    assert by_binary["node"]["version"] == "24.22.1"
    assert str(tmp_path / "data" / "lib") in by_binary["abxbus"]["where"]  # managed installs stay in DATA_DIR/lib
    disabled = {r["plugin"]: r["where"] for r in rows if r["status"] == "disabled"}
    assert "Chrome Web Store" in disabled["ublock"] and "singlefile" not in disabled

    second = subprocess.run([BOXCAR, "install", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    again = [json.loads(line) for line in second.stdout.splitlines() if line.strip()]
    assert [r["status"] for r in again if r["binary"]] == ["found"] * len(by_binary)  # nothing installed twice
    assert "GitHub" in disabled["mercury"]  # off, and why


@pytest.fixture(autouse=True)
def _needs_chromium():
    if not any(Path(p, "chromium").exists() for p in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("chromium is not installed (make install-system-deps / apt-get install chromium)")


def test_a_captured_page_cannot_drive_the_browser_or_read_local_files(sqlite_url, nats_url, make_stack, tmp_path):
    """The issue's probe: a page opened a WebSocket to the browser executor's DevTools port (found
    through the ``chrome/cdp_url.txt`` the UI served) and read ``DATA_DIR/.boxcar/api_token``.
    Now the DevTools port is refused by the egress policy and Chromium allows no page origin, the
    CDP URL file is neither kept nor served, and ``file://`` is out of a page's reach: the hostile
    page reports every attempt refused."""
    from tests.capture_site import CaptureSite

    with CaptureSite(tmp_path / "site") as site:
        stack = make_stack(sqlite_url, nats_url, families=["browser"], env={"PUBLIC_READS": "true"})
        client = api(stack)
        first = submit(stack, urls=[site.url("/article/")], plugins=["title"])
        wait_sealed(stack, first, timeout=180)
        [snapshot] = client.get("/api/v1/snapshots", params={"crawl_id": first}).json()["items"]
        [cdp_file] = list((stack.data_dir / "tmp").glob("*/browsers/*/gen-*/chrome/cdp_url.txt"))
        devtools_ws = cdp_file.read_text().strip()
        port = urlsplit(devtools_ws).port
        # the executor-internal files are gone from the snapshot and never served
        [snapshot_dir] = stack.data_dir.glob(f"archive/users/*/snapshots/*/*/{snapshot['id']}")
        assert (snapshot_dir / "chrome").is_dir() and not (snapshot_dir / "chrome" / "cdp_url.txt").exists()
        for name in ("cdp_url.txt", "browser.json", "chrome.pid", "target_id.txt"):
            assert client.get(f"/archive/{snapshot['id']}/chrome/{name}").status_code == 404, name
        site.hostile = {
            "devtools_ws": devtools_ws,
            "devtools_http": f"http://127.0.0.1:{port}/json/version",
            "token_file": str(stack.data_dir / ".boxcar" / "api_token"),
            "cdp_file": f"{stack.api_url}/archive/{snapshot['id']}/chrome/cdp_url.txt",
        }
        assert Path(site.hostile["token_file"]).is_file()
        second = submit(stack, urls=[site.url("/hostile/devtools")], plugins=["title"])
        wait_sealed(stack, second, timeout=180)
        wait_until(lambda: ("done", "1") in site.reports, 60, "the hostile page to report")
        reached = [(what, outcome) for what, outcome in site.reports if outcome.startswith(("open", "read"))]
        assert not reached, f"a captured page reached {reached}"
        assert {what for what, _ in site.reports} >= {"devtools-ws", "devtools-http", "token-file", "cdp-file"}


def test_basic_auth_reaches_the_tab_over_devtools_and_never_the_browser_profile(sqlite_url, nats_url, make_stack):
    """The probe found a Basic-auth password in Chromium's session files while the browser ran
    (it was in the URL the hooks navigated to). The tab now gets the credentials over DevTools:
    the page is captured behind its login, and no file of the running browser holds the password."""
    from tests.fault_site import PASSWORD, USER, FaultSite

    with FaultSite() as site:
        stack = make_stack(sqlite_url, nats_url, families=["browser"])
        private = site.url("/private/").replace("http://", f"http://{USER}:{PASSWORD}@")
        crawl_id = submit(stack, urls=[private], plugins=["title", "dom"])
        wait_sealed(stack, crawl_id, timeout=180)
        [snapshot] = api(stack).get("/api/v1/snapshots", params={"crawl_id": crawl_id}).json()["items"]
        assert snapshot["title"] == "Private Page", snapshot  # the browser got past the login
        assert snapshot["url"] == site.url("/private/")
        [browser] = browser_processes(stack.data_dir, main_only=True)  # still running: check it now
        assert browser.is_running()
        needle = PASSWORD.encode()
        for path in (stack.data_dir / "tmp").rglob("*"):
            if path.is_file() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    assert needle not in path.read_bytes(), f"the password is in {path} while the browser runs"


def test_a_page_that_wedges_its_renderer_costs_one_timeout_not_one_per_hook(sqlite_url, nats_url, make_stack):
    """la-nacion in the corpus makes Chromium's printToPDF spin for ever, and every later hook on
    its tab then waited out a timeout of its own (minutes per page). Here a page that wedges when
    printed: the PDF hook waits out its timeout, the tab is found not answering, and the task's
    later tab hooks are recorded failed with that reason instead of being started; the hooks before
    it (the first look runs title and screenshot first) are not touched; the crawl seals, and pages
    of the same site captured beside it in other tabs are not touched either."""
    from tests.fault_site import FaultSite

    with FaultSite() as site:
        stack = make_stack(sqlite_url, nats_url, families=["browser"])
        plugins = ["screenshot", "pdf", "dom", "title"]
        urls = [site.url("/spin/"), site.url("/items/one.html"), site.url("/items/two.html")]
        crawl_id = submit(stack, urls=urls, plugins=plugins, config={"TIMEOUT": 20})
        wait_sealed(stack, crawl_id, timeout=300)
        _crawl, snapshots, results = load_crawl(Database(sqlite_url), crawl_id)
        url_of = {snapshot.id: snapshot.url for snapshot in snapshots}
        by_page: dict[str, dict] = {url: {} for url in urls}
        for r in results:
            if r.plugin in plugins:
                by_page[url_of[r.snapshot_id]][r.plugin] = r
        for url in urls[1:]:
            assert {p: r.status for p, r in by_page[url].items()} == dict.fromkeys(plugins, "succeeded"), url
        by_plugin = by_page[urls[0]]
        assert set(by_plugin) == set(plugins), sorted((r.plugin, r.status) for r in results)
        not_run = [p for p, r in by_plugin.items() if r.output_str.startswith("not run: the page stopped answering")]
        statuses = {p: (r.status, r.output_str[:120]) for p, r in by_plugin.items()}
        # title and screenshot (the first look) before the print, the PDF waits out its timeout, the
        # DOM after it is not started
        assert {p: s for p, (s, _) in statuses.items()} == {
            "title": "succeeded",
            "screenshot": "succeeded",
            "pdf": "failed",
            "dom": "failed",
        }, statuses
        assert not_run == ["dom"], statuses
        assert "renderer is hung" in by_plugin[not_run[-1]].notes


def test_a_page_that_wedges_under_one_reader_stops_the_readers_started_with_it(sqlite_url, nats_url, make_stack):
    """seo and dom start together (both only read the page: ``order.start_batches``). On a page
    that wedges its renderer when either reads it, dom gives up first (``DOM_TIMEOUT`` 8 s against
    seo's 30: puppeteer's protocol timeout); the tab is then found not answering, and seo, started
    with it, is killed with that reason at once instead of waiting out its own timeout (about 22 s
    more), as the hooks after dom are not started at all."""
    from tests.fault_site import FaultSite

    with FaultSite() as site:
        stack = make_stack(sqlite_url, nats_url, families=["browser"])
        crawl_id = submit(stack, urls=[site.url("/wedge-on-read/")], plugins=["seo", "dom"], config={"DOM_TIMEOUT": 8})
        wait_sealed(stack, crawl_id, timeout=300)
        _crawl, _snapshots, results = load_crawl(Database(sqlite_url), crawl_id)
        by_plugin = {r.plugin: r for r in results if r.plugin in ("seo", "dom")}
        statuses = {p: (r.status, r.notes[:160]) for p, r in by_plugin.items()}
        assert statuses["dom"][0] == "failed" and "timed out" in statuses["dom"][1].lower(), statuses
        assert statuses["seo"][0] == "failed", statuses
        reason = "killed: the page stopped answering after on_Snapshot__53_dom"
        assert by_plugin["seo"].notes.startswith(reason), statuses
        assert by_plugin["seo"].end_ts - by_plugin["dom"].end_ts < timedelta(seconds=cdp.TAB_ANSWER_S + 10), statuses
