"""``boxcar``: run Boxcar on one machine and feed it URLs.

Commands: ``up`` (the whole stack, foreground, Ctrl-C stops it), ``add`` (archive URLs or files,
against a running stack or an embedded one brought up for the duration), ``list`` (what is
archived), ``demo`` (serve the bundled demo site on loopback and archive it), ``migrate``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from boxcar.cli.client import ApiError, BoxcarClient, local_token, running_stack
from boxcar.cli.inputs import InputFileError, parse_file, read_file, rejected_json, split_args
from boxcar.shared.crawlconfig import MAX_DEPTH
from boxcar.shared.messages import FINAL_RESULT_STATUSES, Seed
from boxcar.shared.settings import Settings
from boxcar.shared.urls import InvalidURL

if TYPE_CHECKING:  # the embedded stack imports every service: only commands that start one load it
    from boxcar.cli.stack import EmbeddedStack

err = Console(stderr=True)


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP (a closed terminal) stop us like Ctrl-C: cleanly, stack included."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}")
    sys.exit(code)


def _settings(data_dir: str | None) -> Settings:
    if data_dir:
        os.environ["DATA_DIR"] = data_dir
    return Settings()


@contextlib.contextmanager
def api_for(
    settings: Settings, api: str | None, token: str | None = None
) -> Iterator[tuple[BoxcarClient, EmbeddedStack | None]]:
    """A client of a running stack (``--api``, ``BOXCAR_API_URL`` or DATA_DIR's stack.json), or of an
    embedded stack started here and stopped on exit. The token is ``--token``/``BOXCAR_API_TOKEN``,
    else the CLI's own token for this data dir."""
    url = api or os.environ.get("BOXCAR_API_URL")
    token = token or os.environ.get("BOXCAR_API_TOKEN") or ""
    if not url and (info := running_stack(settings.data_dir)):
        url = info["api_url"]
    if url:
        yield BoxcarClient(url, token or local_token(settings.data_dir)), None
        return
    from boxcar.cli.stack import EmbeddedStack, StackError

    stack = EmbeddedStack(settings, use_external_nats=bool(os.environ.get("NATS_URL")))
    err.print(f"[dim]no running Boxcar for {settings.data_dir}: starting an embedded one …[/]")
    stop_on_signals()
    try:
        stack.start()
    except StackError as exc:
        fail(str(exc))
    try:
        yield BoxcarClient(stack.api_url, stack.token), stack
    finally:
        err.print("[dim]stopping the embedded Boxcar …[/]")
        stack.stop()


def _unarchived(client: BoxcarClient, crawl_id: str) -> list[tuple[dict, str]]:
    """Snapshots where no hook succeeded, each with the most telling reason (a 404, a timeout, …)."""
    out = []
    for snap in client.snapshots(crawl_id):
        results = snap["results"]
        if snap.get("refusal"):
            continue  # said once for the crawl (the summary's "refused" line)
        if results and not any(r["status"] == "succeeded" for r in results):
            failed = [r for r in results if r["status"] == "failed"] or results
            why = next(
                (f"{r['plugin']}: {r['notes'] or r['output_str']}" for r in failed if r["notes"] or r["output_str"]),
                "no hook produced anything",
            )
            out.append((snap, why[:200]))
    return out


def dry_run_preview(urls: list[str], parsed: dict, settings) -> dict:
    """What ``add --dry-run`` shows: the entries *as the import will merge them* (one per URL: the
    first non-empty title, the union of tags, the earliest date: ``admission.admit``, the rule
    ingest applies) with counts, and what was rejected, by the parser or by the URL lists."""
    from boxcar.shared.admission import admit
    from boxcar.shared.urls import UrlFilter

    formats = {r.format for r in parsed.values()} | ({"url"} if urls else set())
    seeds = [Seed.parse(u, source=f"urls[{i}]") for i, u in enumerate(urls)]
    rejected = [rejected_json(x) for r in parsed.values() for x in r.rejected]
    for result in parsed.values():
        pairs, bad = result.seeds()
        seeds += [seed for _entry, seed in pairs]
        rejected += [rejected_json(x) for x in bad]
    admission = admit(seeds, UrlFilter(settings.url_allowlist, settings.url_denylist))
    rejected += [rejected_json(r) for r in admission.rejected]
    entries = [
        {
            "url": seed.url,
            "title": seed.title,
            "tags": list(seed.tags),
            "bookmarked_at": seed.bookmarked_at.isoformat() if seed.bookmarked_at else None,
        }
        for seed in admission.seeds
    ]
    counts = {
        "entries": admission.entries + sum(len(r.rejected) for r in parsed.values()),
        "accepted": len(entries),
        "duplicates": admission.duplicates,
        "rejected": len(rejected),
    }
    return {
        "format": formats.pop() if len(formats) == 1 else "mixed",
        "entries": entries,
        "rejected": rejected,
        "counts": counts,
    }


def summary(state: dict, data_dir: Path) -> dict:
    """The ``--json`` summary of a crawl (see README)."""
    results = state["results"]
    return {
        "crawl_id": state["id"],
        "status": state["status"],
        "cancelled": state.get("cancelled", False),
        "error": state.get("error", ""),
        "snapshots": {"total": state["snapshots"]["total"], "sealed": state["snapshots"]["sealed"]},
        "http_errors": state.get("http_errors", 0),
        "network_errors": state.get("network_errors", 0),
        "results": {str(k): results.get(k, 0) for k in FINAL_RESULT_STATUSES},
        "merged": state.get("merged", 0),
        "refused": state.get("refused", 0),
        "refusal": state.get("refusal", ""),
        "data_dir": str(data_dir),
    }


def common_options(fn):
    @click.option("--data-dir", envvar="DATA_DIR", default=None, help="Archive root (default ./data)")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@click.group()
def cli() -> None:
    """Boxcar: a self-hosted web archiver built on the ArchiveBox plugin suite."""


@cli.command()
@common_options
@click.option("--port", default=None, type=int, help="API port (default API_PORT or 8000; 0 = any free port)")
def up(data_dir: str | None, port: int | None) -> None:
    """Run the whole stack in the foreground until Ctrl-C."""
    settings = _settings(data_dir)
    if running_stack(settings.data_dir):
        fail(f"a Boxcar stack is already running on {settings.data_dir}")
    from boxcar.cli.stack import EmbeddedStack, StackError

    stack = EmbeddedStack(
        settings,
        api_port=settings.api_port if port is None else port,
        use_external_nats=bool(os.environ.get("NATS_URL")),
    )
    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.append(1))
    try:
        stack.start()
    except StackError as exc:
        fail(str(exc))
    err.print(f"[bold green]Boxcar is up[/]  web UI and API {stack.api_url}  (OpenAPI {stack.api_url}/schema)")
    err.print(f"archive origin (replay) http://127.0.0.1:{stack.archive_port}; log in as `boxcar user create` made")
    err.print(f"data {settings.data_dir}  NATS {stack.nats_url}  executors: {', '.join(stack.families)}")
    err.print("[dim]boxcar add URL… submits here; Ctrl-C stops everything[/]")
    try:
        while not stopping:
            for name in stack.supervise_once():
                err.print(f"[yellow]{name} crashed and was restarted[/]")
            time.sleep(1)
    finally:
        err.print("stopping …")
        stack.stop()
        err.print("stopped")


@cli.command()
@common_options
@click.argument("inputs", nargs=-1, required=True)
@click.option("--depth", default=0, type=click.IntRange(0, MAX_DEPTH), help=f"Link hops to follow (0–{MAX_DEPTH})")
@click.option("--tag", "tags", multiple=True, help="Tag for every snapshot (repeatable)")
@click.option("--plugins", default="", help="Comma-separated plugins (default: PLUGINS)")
@click.option("--format", "format_", default=None, help="Input format of FILEs (default: detected from content)")
@click.option(
    "--only-new/--no-only-new", "only_new", default=None, help="Skip URLs archived before (default: ONLY_NEW, on)"
)
@click.option("--wait", is_flag=True, help="Show progress until the crawl is sealed")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary at the end")
@click.option("--dry-run", is_flag=True, help="Only show what FILEs/URLs hold; create nothing")
@click.option("--api", default=None, help="API of a running stack (default: DATA_DIR's, else embedded)")
@click.option("--token", default=None, help="API token (default: BOXCAR_API_TOKEN, else this data dir's)")
@click.option("--timeout", default=None, type=float, help="Give up waiting after this many seconds")
def add(data_dir, inputs, depth, tags, plugins, format_, only_new, wait, as_json, dry_run, api, token, timeout) -> None:
    """Archive URLs, or the URLs in FILEs: bookmark exports (any browser or service), feeds,
    browser history, CSV/JSON/JSONL exports, text or markdown; the format is detected from content.

    With no running stack an embedded one is started for the duration (and --wait is implied).
    """
    settings = _settings(data_dir)
    try:
        urls, files = split_args(list(inputs))
        uploads = [(read_file(path), path.name) for path in files]
    except InputFileError as exc:
        fail(str(exc), 2)
    for url in urls:  # say so now rather than after starting a stack
        try:
            Seed.parse(url)
        except InvalidURL as exc:
            fail(f"{url}: {exc.reason}", 2)
    if dry_run:  # the only time the CLI parses files itself: nothing is sent anywhere
        try:
            parsed = {path: parse_file(path, format_) for path in files}
        except InputFileError as exc:
            fail(str(exc), 2)
        preview = dry_run_preview(urls, parsed, settings)
        if as_json:
            click.echo(json.dumps(preview))
        else:
            c = preview["counts"]
            err.print(
                f"format {preview['format']}: {c['entries']} entries → {c['accepted']} URL(s) to archive, "
                f"{c['duplicates']} duplicates merged, {c['rejected']} rejected"
            )
            for r in preview["rejected"][:20]:
                err.print(f"  [yellow]{r['where']}[/]: {r['reason']} ({r['value'][:80]})")
        return
    plugin_list = [p.strip() for p in plugins.split(",") if p.strip()]
    with api_for(settings, api, token) as (client, stack):
        try:
            if files:  # every file to the imports API (parsed once, on the server); URLs ride along
                params = {"max_depth": depth, "tags": ",".join(tags), "plugins": ",".join(plugin_list)}
                if format_:
                    params["format"] = format_
                if only_new is not None:
                    params["only_new"] = str(only_new).lower()
                if urls:
                    uploads.append(("\n".join(urls).encode(), "urls.txt"))
                imported = client.import_files(uploads, params)
                counts = imported["counts"]
                crawl_id = imported["crawl_id"]
                err.print(
                    f"crawl [bold]{crawl_id}[/]: {imported['format']}, {counts['entries']} entries → "
                    f"{counts['accepted']} queued, {counts['duplicates']} duplicates merged, "
                    f"{counts['skipped_existing']} archived before, {counts['rejected']} rejected"
                )
                for r in imported["rejected"][:10]:
                    err.print(f"  [yellow]{r['where']}[/]: {r['reason']} ({r['value'][:80]})")
            else:
                payload = {"urls": urls, "tags": list(tags), "max_depth": depth, "plugins": plugin_list}
                if only_new is not None:
                    payload["only_new"] = only_new
                created = client.create_crawl(payload)
                crawl_id = created["id"]
                err.print(
                    f"crawl [bold]{crawl_id}[/] queued with {created['urls']} URL(s)"
                    + (f" ({created['skipped_existing']} archived before)" if created.get("skipped_existing") else "")
                )
        except ApiError as exc:
            fail(str(exc), 2)
        if not (wait or stack is not None):
            if as_json:
                click.echo(json.dumps({"crawl_id": crawl_id, "status": "queued"}))
            return
        from boxcar.shared.procutil import release_free_memory

        release_free_memory()  # what starting up left free, back to the kernel for the wait
        try:
            state = client.wait(crawl_id, console=err, timeout=timeout, on_tick=stack.supervise_once if stack else None)
        except TimeoutError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail(f"interrupted; crawl {crawl_id} continues when Boxcar runs again", 130)
        empty = [] if as_json else _unarchived(client, crawl_id)
    result = summary(state, settings.data_dir)
    if as_json:
        click.echo(json.dumps(result))
    else:
        for snap, why in empty[:10]:
            err.print(f"[yellow]nothing archived[/] for {snap['url']}: {why}")
        if len(empty) > 10:
            err.print(f"[yellow]… and {len(empty) - 10} more snapshots with nothing archived[/]")
        r = result["results"]
        how = "[bold yellow]cancelled[/]" if result["cancelled"] else "[bold red]given up[/]" if result["error"] else ""
        err.print(
            f"{how or '[bold green]sealed[/]'}: {result['snapshots']['sealed']} snapshot(s)"
            f" ({result['http_errors']} answered 4xx/5xx, {result['network_errors']} unreachable); results "
            f"{r['succeeded']} succeeded, {r['failed']} failed, {r['noresults']} no results, "
            f"{r['skipped']} skipped.  `boxcar list --crawl {crawl_id}` shows them; "
            f"files under {settings.data_dir}/archive"
        )
        if result["merged"]:
            err.print(
                f"{result['merged']} URL(s) merged into snapshots of other crawls that are archiving or "
                "archived them (ONLY_NEW; --no-only-new archives them again)"
            )
        if result["refused"]:
            err.print(f"[bold yellow]refused[/] {result['refused']} page(s): {result['refusal']}")
        if result["error"]:
            err.print(f"[red]crawl given up:[/] {result['error']}")


@cli.command("list")
@common_options
@click.option("--crawl", "crawl_id", default=None, help="Only this crawl")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per snapshot")
@click.option("--limit", default=1000, type=int)
def list_(data_dir, crawl_id, as_json, limit) -> None:
    """List snapshots and their results (reads the database directly)."""
    from boxcar.ingest.services import CrawlService
    from boxcar.shared.db import Database
    from boxcar.shared.egress import refusal_kind
    from boxcar.shared.families import load_families
    from boxcar.shared.plugins import get_catalog

    settings = _settings(data_dir)
    if not settings.database_url and not (settings.data_dir / "index.sqlite3").exists():
        fail(f"no archive in {settings.data_dir} (set DATA_DIR or DATABASE_URL)")
    db = Database(settings.sqlalchemy_url)
    db.upgrade()
    service = CrawlService(db, settings, get_catalog(), load_families())
    if crawl_id and service.crawl_status(crawl_id) is None:
        fail(f"no crawl {crawl_id} in {settings.data_dir}")
    page = service.list_snapshots(crawl_id, limit, 0)
    if as_json:
        for snap in page.items:
            click.echo(
                json.dumps(
                    {
                        "id": snap.id,
                        "crawl_id": snap.crawl_id,
                        "url": snap.url,
                        "title": snap.title,
                        "status": snap.status,
                        "http_status": snap.http_status,
                        "final_url": snap.final_url,
                        "network_error": snap.network_error,
                        "refusal": snap.refusal,
                        "depth": snap.depth,
                        "parent_snapshot_id": snap.parent_snapshot_id,
                        "output_dir": str(settings.data_dir / snap.output_dir),
                        "tags": snap.tags,
                        "results": [
                            {
                                "plugin": r.plugin,
                                "hook_name": r.hook_name,
                                "status": r.status,
                                "output_str": r.output_str,
                            }
                            for r in snap.results
                        ],
                    }
                )
            )
        return
    table = Table("status", "http", "depth", "url", "title", "results")
    refusals: dict[str, int] = {}
    for snap in page.items:
        ok = sum(r.status == "succeeded" for r in snap.results)
        http = str(snap.http_status or "") or ("[red]unreachable[/]" if snap.network_error else "")
        if snap.http_status and snap.http_status >= 400:
            http = f"[red]{snap.http_status}[/]"
        outcome = f"{ok}/{len(snap.results)} ok"
        if snap.refusal:
            http, outcome = "[yellow]refused[/]", "[yellow]refused[/]"
            reason = refusal_kind(snap.refusal)
            refusals[reason] = refusals.get(reason, 0) + 1
        table.add_row(snap.status, http, str(snap.depth), snap.url, snap.title or "", outcome)
    Console().print(table)
    for reason, count in refusals.items():  # once per reason, not once per hook or per page
        err.print(f"[bold yellow]refused[/] {count} page(s): {reason}")
    if page.total > len(page.items):
        err.print(f"{len(page.items)} of {page.total} shown (--limit)")


@cli.command()
@common_options
@click.option("--depth", default=1, type=click.IntRange(0, MAX_DEPTH), help="Link hops from the demo index (default 1)")
@click.option("--json", "as_json", is_flag=True)
def demo(data_dir, depth, as_json) -> None:
    """Serve the bundled demo site on 127.0.0.1 and archive it (works offline)."""
    from boxcar.cli.demo import serve_demo_site

    # the demo site is on 127.0.0.1: an embedded stack started for the demo may fetch loopback
    os.environ.setdefault("URL_ALLOW_PRIVATE", "true")
    with serve_demo_site() as url:
        err.print(f"demo site at {url}")
        ctx = click.get_current_context()
        ctx.invoke(
            add,
            data_dir=data_dir,
            inputs=(url,),
            depth=depth,
            tags=("demo",),
            plugins="",
            format_=None,
            only_new=False,
            wait=True,
            as_json=as_json,
            dry_run=False,
            api=None,
            token=None,
            timeout=None,
        )


@cli.command()
@common_options
def migrate(data_dir) -> None:
    """Create or upgrade the database schema (services also do this at start)."""
    from boxcar.shared.db import Database

    settings = _settings(data_dir)
    Database(settings.sqlalchemy_url).upgrade()
    err.print(f"schema up to date ({settings.sqlalchemy_url.split('@')[-1]})")


if __name__ == "__main__":
    cli()


@cli.group()
def token() -> None:
    """API tokens (stored hashed; shown once)."""


@token.command("create")
@common_options
@click.option("--name", default="", help="What the token is for")
@click.option("--read-only", is_flag=True, help="Only GET endpoints (lists, status, search)")
def token_create(data_dir, name, read_only) -> None:
    """Create an API token and print it (use it as `Authorization: Bearer <token>`)."""
    from boxcar.ingest.auth import create_token
    from boxcar.shared.db import Database

    settings = _settings(data_dir)
    db = Database(settings.sqlalchemy_url)
    db.upgrade()
    click.echo(create_token(db, name, scope="read" if read_only else "write"))
    err.print("[dim]store it now: only its hash is kept[/]")


@cli.command("status")
@common_options
@click.option("--api", default=None)
@click.option("--token", default=None)
@click.option("--json", "as_json", is_flag=True)
def status_cmd(data_dir, api, token, as_json) -> None:
    """What the running stack is doing: crawls and snapshots by status, disk, executor families."""
    settings = _settings(data_dir)
    try:
        state = _running_client(settings, api, token).status()
    except ApiError as exc:
        fail(str(exc), 2)
    if as_json:
        click.echo(json.dumps(state))
        return
    gib = 1024**3
    err.print(
        f"crawls {state['crawls']}\nsnapshots {state['snapshots']}\n"
        f"archive {state['archive_bytes'] / gib:.2f} GiB, disk {state.get('disk_used_bytes', 0) / gib:.1f} GiB used, "
        f"{state['disk_free_bytes'] / gib:.1f} GiB free in {state['data_dir']}"
    )
    services = state.get("services") or {}
    if services:
        alive = {True: "[green]alive[/]", False: "[red]DOWN[/]"}
        err.print("services " + "  ".join(f"{name} {alive[up]}" for name, up in services.items()))
    table = Table("family", "pending", "in progress", "idle executors", "alive")
    for name, fam in state["families"].items():
        alive = "[green]yes[/]" if fam["alive"] else ("[red]NO[/]" if fam["pending"] else "no")
        table.add_row(name, str(fam["pending"]), str(fam["in_progress"]), str(fam["executors_waiting"]), alive)
    Console().print(table)
    for name in state["stalled_families"]:
        err.print(f"[red]family {name} has tasks waiting and no executor:[/] start `hook-executor --family {name}`")


@cli.group()
def crawl() -> None:
    """Pause, resume or cancel a crawl (needs a running stack: `boxcar up`)."""


def _crawl_control(action: str):
    @common_options
    @click.argument("crawl_id")
    @click.option("--api", default=None)
    @click.option("--token", default=None)
    @click.option("--wait", is_flag=True, help="Wait until the crawl is sealed (cancel)")
    def command(data_dir, crawl_id, api, token, wait) -> None:
        settings = _settings(data_dir)
        client = _running_client(settings, api, token)
        try:
            client.control_crawl(crawl_id, action)
        except ApiError as exc:
            fail(str(exc), 2)
        err.print(f"{action} of crawl {crawl_id} requested")
        if wait:
            try:
                state = client.wait(crawl_id, console=err)
            except ApiError as exc:
                fail(str(exc), 2)
            err.print(f"crawl {crawl_id}: {state['status']}")

    command.__doc__ = {
        "pause": "Pause a crawl: no new snapshot starts; those in flight finish.",
        "resume": "Resume a paused crawl.",
        "cancel": "Cancel a crawl: its running hooks are killed, unfinished ones recorded skipped, and it is sealed.",
    }[action]
    return command


for _action in ("pause", "resume", "cancel"):
    crawl.command(_action)(_crawl_control(_action))


@cli.group()
def feeds() -> None:
    """Feed subscriptions (RSS, Atom, JSON Feed) archived on a schedule."""


@feeds.command("add")
@common_options
@click.argument("url")
@click.option("--schedule", default="hourly", help="hourly, daily, weekly, monthly, yearly, or a cron expression")
@click.option("--tag", "tags", multiple=True)
@click.option("--depth", default=0, type=click.IntRange(0, MAX_DEPTH))
@click.option("--label", default="")
@click.option("--api", default=None)
@click.option("--token", default=None)
@click.option("--json", "as_json", is_flag=True)
def feeds_add(data_dir, url, schedule, tags, depth, label, api, token, as_json) -> None:
    """Subscribe to a feed (needs a running stack: `boxcar up`)."""
    settings = _settings(data_dir)
    client = _running_client(settings, api, token)
    try:
        feed = client.create_feed(
            {"url": url, "schedule": schedule, "tags": list(tags), "max_depth": depth, "label": label}
        )
    except ApiError as exc:
        fail(str(exc), 2)
    click.echo(json.dumps(feed) if as_json else f"subscribed {feed['id']}: {feed['url']} ({feed['schedule']})")


@feeds.command("list")
@common_options
@click.option("--api", default=None)
@click.option("--token", default=None)
@click.option("--json", "as_json", is_flag=True)
def feeds_list(data_dir, api, token, as_json) -> None:
    """List subscriptions with their polling state."""
    settings = _settings(data_dir)
    try:
        items = _running_client(settings, api, token).feeds()
    except ApiError as exc:
        fail(str(exc), 2)
    if as_json:
        for feed in items:
            click.echo(json.dumps(feed))
        return
    table = Table("id", "url", "schedule", "status", "items", "last error")
    for feed in items:
        table.add_row(
            feed["id"], feed["url"], feed["schedule"], feed["status"], str(feed["items_seen"]), feed["last_error"][:60]
        )
    Console().print(table)


@feeds.command("remove")
@common_options
@click.argument("feed_id")
@click.option("--api", default=None)
@click.option("--token", default=None)
def feeds_remove(data_dir, feed_id, api, token) -> None:
    """Unsubscribe (what was archived stays)."""
    settings = _settings(data_dir)
    try:
        _running_client(settings, api, token).delete_feed(feed_id)
    except ApiError as exc:
        fail(str(exc), 2)
    err.print(f"removed {feed_id}")


@feeds.command("poll")
@common_options
@click.argument("feed_id")
@click.option("--api", default=None)
@click.option("--token", default=None)
def feeds_poll(data_dir, feed_id, api, token) -> None:
    """Poll a subscription now."""
    settings = _settings(data_dir)
    try:
        _running_client(settings, api, token).control_feed(feed_id, "poll")
    except ApiError as exc:
        fail(str(exc), 2)
    err.print(f"poll of {feed_id} requested")


def _running_client(settings: Settings, api: str | None, token: str | None) -> BoxcarClient:
    url = api or os.environ.get("BOXCAR_API_URL")
    if not url and (info := running_stack(settings.data_dir)):
        url = info["api_url"]
    if not url:
        fail(f"no running Boxcar for {settings.data_dir}: start one with `boxcar up` (or pass --api)")
    return BoxcarClient(url, token or os.environ.get("BOXCAR_API_TOKEN") or local_token(settings.data_dir))


@cli.command("install")
@common_options
@click.option("--family", "families", multiple=True, help="Only this family's plugins (repeatable)")
@click.option("--allow-apt", is_flag=True, help="Let apt-get install host packages (root; changes the machine)")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row")
def install_cmd(data_dir, families, allow_apt, as_json) -> None:
    """Resolve every binary the enabled plugins need into DATA_DIR/lib (abxpkg), and report.

    Exits non-zero when an enabled plugin cannot run. Safe to repeat: a second run installs nothing.
    """
    from boxcar.cli.install import install
    from boxcar.shared.families import load_families
    from boxcar.shared.plugins import get_catalog

    settings = _settings(data_dir)
    known = load_families().families
    unknown = [f for f in families if f not in known]
    if unknown:
        fail(f"unknown family {', '.join(unknown)}; one of {', '.join(known)}", 2)
    with err.status("resolving binaries (first run installs node, npm packages, … into the lib dir)"):
        report = install(settings, get_catalog(), list(families) or None, allow_apt=allow_apt)
    if as_json:
        for row in report.rows:
            click.echo(json.dumps(row.__dict__))
    else:
        table = Table("plugin", "binary", "status", "version", "path / reason", title=f"binaries in {settings.lib_dir}")
        colors = {"found": "green", "installed": "cyan", "missing": "red"}
        for row in report.rows:
            if row.binary:
                table.add_row(row.plugin, row.binary, f"[{colors[row.status]}]{row.status}[/]", row.version, row.where)
        console = Console(width=max(Console().width, 140))
        console.print(table, overflow="fold")
        ready = [row.plugin for row in report.rows if row.status == "ready"]
        console.print(f"[green]ready[/] ({len(ready)}): {', '.join(ready)}", soft_wrap=True)
        for row in report.rows:
            if row.status in ("disabled", "unrunnable") and not row.binary:
                label = "[dim]disabled[/]" if row.status == "disabled" else "[red]cannot run[/]"
                console.print(f"{label} [bold]{row.plugin}[/]: {row.where}", soft_wrap=True)
    from boxcar.ingest import replay

    try:
        err.print(f"WARC replay viewer (ReplayWeb.page {replay.VERSION}): {replay.provision(settings)}")
    except (RuntimeError, OSError) as exc:  # replay is optional: the rest of the archive works without it
        err.print(f"[yellow]WARC replay unavailable:[/] {exc}")
    if not report.ok:
        fail(f"these enabled plugins cannot run: {', '.join(report.unrunnable)} (see the table)", 1)
    err.print("[green]every enabled plugin has what it needs[/]")


# ----------------------------------------------------------------------------- web UI, search, removal (issue 10)


def _database(settings: Settings, *, must_exist: bool = True):
    from boxcar.shared.db import Database

    if must_exist and not settings.database_url and not (settings.data_dir / "index.sqlite3").exists():
        fail(f"no archive in {settings.data_dir} (set DATA_DIR or DATABASE_URL)")
    db = Database(settings.sqlalchemy_url)
    db.upgrade()
    return db


@cli.group()
def user() -> None:
    """Accounts of the web UI (passwords stored as Argon2id hashes)."""


@user.command("create")
@common_options
@click.argument("name")
@click.password_option(help="Prompted (twice) when not given; or set BOXCAR_PASSWORD", envvar="BOXCAR_PASSWORD")
def user_create(data_dir, name, password) -> None:
    """Create a user who can log in to the web UI."""
    from boxcar.ingest.accounts import AccountError, create_user

    try:
        create_user(_database(_settings(data_dir), must_exist=False), name, password)
    except AccountError as exc:
        fail(str(exc), 2)
    err.print(f"user {name} created: log in at /login")


@user.command("password")
@common_options
@click.argument("name")
@click.password_option(envvar="BOXCAR_PASSWORD")
def user_password(data_dir, name, password) -> None:
    """Set a user's password (their sessions end)."""
    from boxcar.ingest.accounts import AccountError, set_password

    try:
        if not set_password(_database(_settings(data_dir)), name, password):
            fail(f"no user {name}", 2)
    except AccountError as exc:
        fail(str(exc), 2)
    err.print(f"password of {name} changed")


@cli.command("search")
@common_options
@click.argument("query", nargs=-1, required=True)
@click.option("--tag", default="", help="Only snapshots with this tag")
@click.option("--limit", default=20, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per match")
def search_cmd(data_dir, query, tag, limit, as_json) -> None:
    """Full-text search of titles, URLs, tags and page text: words, "a phrase", -excluded, a or b."""
    from boxcar.ingest.library import SnapshotLibrary
    from boxcar.shared.search import SearchHit

    settings = _settings(data_dir)
    rows = SnapshotLibrary(_database(settings), settings.data_dir).search(" ".join(query), tag, limit)
    for row in rows:
        snippet = SearchHit(row.id, 0.0, row.snippet_html).snippet
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "id": row.id,
                        "url": row.url,
                        "title": row.title,
                        "tags": row.tags,
                        "status": row.status,
                        "created_at": row.created_at.isoformat(),
                        "snippet": snippet,
                    }
                )
            )
        else:
            err.print(f"[bold]{row.title or row.url}[/]  [dim]{row.id}[/]\n  {row.url}\n  [dim]{snippet[:200]}[/]")
    if not rows and not as_json:
        err.print("no matches")


@cli.command("remove")
@common_options
@click.argument("targets", nargs=-1, required=True)
@click.option("--yes", is_flag=True, help="Do not ask")
def remove_cmd(data_dir, targets, yes) -> None:
    """Delete snapshots (by id, or every snapshot of a URL): their rows and their files."""
    from boxcar.ingest.library import SnapshotBusy, SnapshotLibrary

    settings = _settings(data_dir)
    library = SnapshotLibrary(_database(settings), settings.data_dir)
    ids: list[str] = []
    for target in targets:
        found = library.find(target)
        if not found:
            fail(f"no snapshot matches {target}", 2)
        ids += [i for i in found if i not in ids]
    if not yes:
        for sid in ids:
            detail = library.detail(sid)
            err.print(f"  {sid}  {detail.snapshot.url if detail else ''}")
        if not click.confirm(f"delete {len(ids)} snapshot(s) and their files?", err=True):
            fail("nothing deleted", 1)
    busy = 0
    for sid in ids:
        try:
            library.delete(sid)
        except SnapshotBusy as exc:
            busy += 1
            err.print(f"[yellow]{exc}[/]")
    err.print(f"deleted {len(ids) - busy} snapshot(s)")
    if busy:
        sys.exit(1)


@cli.command("reindex")
@common_options
def reindex_cmd(data_dir) -> None:
    """Rebuild the full-text search index from the archive's rows and files."""
    from boxcar.result_projector.fulltext import reindex

    settings = _settings(data_dir)
    db = _database(settings)
    with err.status("indexing …") as status:
        count = reindex(db, settings.data_dir, progress=lambda done, total: status.update(f"indexing {done}/{total}"))
    err.print(f"indexed {count} snapshot(s)")
