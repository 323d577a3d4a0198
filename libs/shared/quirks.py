"""What is special about particular plugins, as data: one row per plugin, each with its reason.

Boxcar runs abx-plugins' hooks as they are; where a plugin needs handling of its own, that is a
row here, not an ``if plugin == "…"`` in the code that runs hooks (pywb keeps its site rules in
``rules.yaml`` the same way). The executor, the projector and the UI read the rows through the
lookups at the bottom; the reasons are the documentation.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec


class Credentials(StrEnum):
    """How a hook gets a page's HTTP Basic credentials."""

    URL = "url"  #: in ``--url`` (``http://user:pass@host/``); its outputs are scrubbed afterwards
    WGETRC = "wgetrc"  #: a private ``WGETRC`` file (``http_user``/``http_password``), the URL without them
    DEVTOOLS = "devtools"  #: the tab answers the auth challenge over DevTools; the URL without them


class AfterRun(StrEnum):
    """What the executor does with a hook's output before it records the result."""

    NOTHING = ""
    WARC = "warc"  #: name wget's WARCs by snapshot and add WARC-IP-Address (``hook_executor.warc``)
    BROWSER_WARC = "browser_warc"  #: write what the browser received as a WARC (``warc.from_responses``)
    DOCUMENT = "document"  #: give a document its type's extension, take a PDF's title (``documents``)
    MEDIA = "media"  #: a cut download is failed, metadata without media noresults (``media``)


class PageResponse(StrEnum):
    """What, of a hook's run, tells the page's HTTP status and final URL."""

    NONE = ""
    WGET_LOG = "wget_log"  #: wget's log of the request and its redirects
    NAVIGATION = "navigation"  #: the browser's navigation (its network error when it fails)


class Quirk(msgspec.Struct, frozen=True, kw_only=True):
    """One plugin's special handling (every field's default is "nothing special").

    Attributes:
        plugin: the plugin's name.
        reason: why, in words for the next reader.
        hook_env: environment Boxcar sets for the plugin's hooks, after everything else.
        substitutes: hook name → Boxcar's own script run in its place (a file in
            ``boxcar.hook_executor``), same plugin and name so its result is the plugin's.
        credentials: how its hooks get a page's Basic-auth credentials (a plugin that requires chrome
            runs in the tab: ``DEVTOOLS`` whatever its row says).
        tab_hook: the hook (by name) that opens the snapshot's tab: the tab's credentials are
            given once it is ready.
        after_run: what the executor does with its output before recording the result.
        page_response: what of its run tells the page's response.
        internal_files: files it writes in its output dir for the executor's own use while a
            task runs (never archived, never served); names or ``fnmatch`` patterns, relative to it.
        title_rank: where its result stands as a snapshot title source (1 first; 0: not one).
        text_rank: where its output stands as a snapshot's searchable text (1 first; 0: not one).
        hook_labels: what a hook is, for people reading a snapshot's results, by the part of its
            name after ``on_Snapshot__NN_`` (``chrome_launch``): a daemon's ``skipped`` after the
            session it kept ended is its normal end, not a failure.
        first_look: its foreground hook runs as soon as the plugins it requires have run (before
            the task's other foreground hooks, whatever its NN): it only reads the page, and it is
            what the UI shows first (title, screenshot).
        first_look_when_equal: config keys that must all resolve to the same value for that early
            run (else the hook keeps its NN place: the early run would change what later hooks see).
        reads_page: its foreground hook only reads the snapshot's tab (``page.evaluate`` of code
            that changes nothing, a capture the page cannot see): it starts together with the
            ``reads_page`` hooks next to it in the run order, as each still runs after every hook
            that may change the page before it and before every one after it
            (``hook_executor.order.start_batches``). Not: screenshot (sets the viewport, brings the
            tab to the front), pdf (printing fires the page's ``beforeprint``/``afterprint``
            handlers), SingleFile (its page script loads deferred images).
    """

    plugin: str
    reason: str
    hook_env: dict[str, str] = {}
    substitutes: dict[str, str] = {}
    credentials: Credentials = Credentials.URL
    tab_hook: str = ""
    after_run: AfterRun = AfterRun.NOTHING
    page_response: PageResponse = PageResponse.NONE
    internal_files: frozenset[str] = frozenset()
    title_rank: int = 0
    text_rank: int = 0
    hook_labels: dict[str, str] = {}
    first_look: bool = False
    first_look_when_equal: tuple[str, ...] = ()
    reads_page: bool = False


QUIRKS: tuple[Quirk, ...] = (
    Quirk(
        plugin="chrome",
        reason=(
            "The browser's session markers (cdp_url.txt, browser.json, …) hold the DevTools address, which no "
            "page or reader may have; Basic-auth credentials in the URL would land in Chromium's profile, so the "
            "tab gets them over DevTools; its navigation tells the page's network error."
        ),
        credentials=Credentials.DEVTOOLS,
        page_response=PageResponse.NAVIGATION,
        tab_hook="chrome_tab",
        internal_files=frozenset(
            {"cdp_url.txt", "browser.json", "chrome.pid", "target_id.txt", ".target.lock", "export-tabs/.closing-*"}
        ),
        hook_labels={
            "chrome_launch": "browser session: the shared Chromium, kept for the snapshot's browser hooks "
            "(its time is the session's; it ends when they are done)",
            "chrome_tab": "browser tab: the snapshot's tab in the shared Chromium, open while the browser hooks run",
            "chrome_navigate": "page load: the tab navigating to the URL",
        },
    ),
    Quirk(
        plugin="wget",
        reason=(
            "wget writes the password of a URL into its WARC and converted links, so it gets a private WGETRC; "
            "its WARCs are named by seconds only (collisions across a crawl) and carry no WARC-IP-Address behind "
            "the egress proxy; its log tells the page's response and redirects."
        ),
        credentials=Credentials.WGETRC,
        after_run=AfterRun.WARC,
        page_response=PageResponse.WGET_LOG,
    ),
    Quirk(
        plugin="responses",
        reason=(
            "It keeps every body the browser received (what the page's scripts fetched too) but writes no WARC; "
            "the executor writes one from its index (responses/warc/), so a page built by JavaScript replays and "
            "exports in WACZ with what the browser saw, not only wget's fetch."
        ),
        after_run=AfterRun.BROWSER_WARC,
    ),
    Quirk(
        plugin="staticfile",
        reason=(
            "With RESPONSES_ENABLED (its default) staticfile waits for the responses plugin's capture, which "
            "Chromium's PDF-viewer wrapper overwrites; with it off it keeps the original body (abx-plugins "
            "1.13.572). A document gets its type's extension and, for a PDF, gives the snapshot its title."
        ),
        hook_env={"RESPONSES_ENABLED": "False"},
        after_run=AfterRun.DOCUMENT,
        title_rank=3,
        text_rank=3,
    ),
    Quirk(
        plugin="singlefile",
        reason=(
            "abx-plugins 1.13.572's singlefile hook drives the SingleFile extension from the Chrome Web Store "
            "(unreachable here); singlefile_tab.js runs the same page script from the npm single-file-cli package "
            "in the snapshot's tab and writes the same singlefile/singlefile.html."
        ),
        substitutes={"on_Snapshot__50_singlefile": "singlefile_tab.js"},
    ),
    Quirk(
        plugin="ytdlp",
        reason=(
            "yt-dlp reports success for a download cut short and leaves .part files; MEDIA_MAX_SIZE must reach it "
            "as --max-filesize (ArchiveBox #1102)."
        ),
        after_run=AfterRun.MEDIA,
    ),
    Quirk(
        plugin="screenshot",
        reason=(
            "The picture the snapshot page shows first. Its hook only reads the page once it sets the viewport "
            "to SCREENSHOT_RESOLUTION, which is the tab's own (CHROME_RESOLUTION) unless someone sets them apart; "
            "then it keeps its NN place after SingleFile, whose copy a viewport change could alter."
        ),
        first_look=True,
        first_look_when_equal=("SCREENSHOT_RESOLUTION", "CHROME_RESOLUTION"),
    ),
    Quirk(
        plugin="title",
        reason=(
            "The page's <title> as the browser saw it: the first title source, read (never changed) as soon as "
            "the page has loaded, so the snapshot has its name before the slower captures end."
        ),
        title_rank=1,
        first_look=True,
        reads_page=True,
    ),
    Quirk(
        plugin="seo",
        reason="og:title and friends, read with one page.evaluate: the title when <title> is empty.",
        title_rank=2,
        reads_page=True,
    ),
    Quirk(
        plugin="dom",
        reason="The rendered DOM, serialized from a clone (computed image sizes copied onto it; the page untouched).",
        reads_page=True,
    ),
    Quirk(
        plugin="chrome_mhtml",
        reason="Page.captureSnapshot of the tab: a capture the page cannot see.",
        reads_page=True,
    ),
    Quirk(
        plugin="parse_dom_outlinks",
        reason="The rendered page's links, read with one page.evaluate.",
        reads_page=True,
    ),
    Quirk(plugin="htmltotext", reason="The page's whole text: the first searchable text.", text_rank=1),
    Quirk(plugin="trafilatura", reason="The article's text: searchable when htmltotext has none.", text_rank=2),
)

_BY_PLUGIN: dict[str, Quirk] = {q.plugin: q for q in QUIRKS}
_NONE = Quirk(plugin="", reason="")


def quirk(plugin: str) -> Quirk:
    """The plugin's row (a row of defaults for a plugin with nothing special)."""
    return _BY_PLUGIN.get(plugin, _NONE)


def hook_label(plugin: str, hook_name: str) -> str:
    """What a hook is, in words (``Quirk.hook_labels``); "" when nothing needs saying."""
    labels = quirk(plugin).hook_labels
    if not labels:
        return ""
    stem = hook_name.split("__", 1)[-1].lstrip("0123456789_").split(".", 1)[0]
    return labels.get(stem, "")


def substitutes() -> dict[str, str]:
    """Every hook Boxcar replaces: hook name → its script's file name."""
    return {name: script for q in QUIRKS for name, script in q.substitutes.items()}


def internal_files() -> dict[str, frozenset[str]]:
    """plugin → the files it keeps for the executor's own use (see ``Quirk.internal_files``)."""
    return {q.plugin: q.internal_files for q in QUIRKS if q.internal_files}


def title_sources() -> tuple[str, ...]:
    """Plugins whose result may give a snapshot its title, best first."""
    return tuple(q.plugin for q in sorted(QUIRKS, key=lambda q: q.title_rank) if q.title_rank)


def text_sources() -> tuple[str, ...]:
    """Plugins whose output is a snapshot's searchable text, best first."""
    return tuple(q.plugin for q in sorted(QUIRKS, key=lambda q: q.text_rank) if q.text_rank)
