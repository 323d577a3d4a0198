"""``boxcar add``: archive URLs or the URLs in files, against a running stack or an embedded one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from boxcar.cli.client import ApiError, BoxcarClient
from boxcar.cli.common import (
    api_for,
    common_options,
    err,
    fail,
    settings_for,
)
from boxcar.cli.inputs import InputFileError, parse_file, read_file, rejected_json, split_args
from boxcar.shared.crawlconfig import MAX_DEPTH
from boxcar.shared.messages import FINAL_RESULT_STATUSES, Seed
from boxcar.shared.urls import InvalidURL

if TYPE_CHECKING:
    pass


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


def summary(*, crawl_id: str, skipped_existing: int, data_dir: Path, state: dict | None) -> dict:
    """``boxcar add --json``'s one answer (README, "`boxcar add --json` prints").

    ``state`` is the crawl as ``GET /api/v1/crawls/{id}`` gives it once the add waited; for an add
    that did not wait it is None, and the answer is ``{crawl_id, "status": "queued",
    skipped_existing, data_dir}``. ``skipped_existing``: the URLs the crawl was not given because
    they were archived before (``ONLY_NEW``, decided by ingest when the crawl was made).
    """
    if state is None:
        queued = {"crawl_id": crawl_id, "status": "queued", "skipped_existing": skipped_existing}
        return {**queued, "data_dir": str(data_dir)}
    results = state["results"]
    return {
        "crawl_id": crawl_id,
        "status": state["status"],
        "cancelled": state.get("cancelled", False),
        "error": state.get("error", ""),
        "snapshots": {"total": state["snapshots"]["total"], "sealed": state["snapshots"]["sealed"]},
        "http_errors": state.get("http_errors", 0),
        "network_errors": state.get("network_errors", 0),
        "results": {str(k): results.get(k, 0) for k in FINAL_RESULT_STATUSES},
        "merged": state.get("merged", 0),
        "skipped_existing": skipped_existing,
        "refused": state.get("refused", 0),
        "refusal": state.get("refusal", ""),
        "data_dir": str(data_dir),
    }


@click.command()
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
    settings = settings_for(data_dir)
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
                skipped_existing = counts["skipped_existing"]
                err.print(
                    f"crawl [bold]{crawl_id}[/]: {imported['format']}, {counts['entries']} entries → "
                    f"{counts['accepted']} queued, {counts['duplicates']} duplicates merged, "
                    f"{skipped_existing} archived before, {counts['rejected']} rejected"
                )
                for r in imported["rejected"][:10]:
                    err.print(f"  [yellow]{r['where']}[/]: {r['reason']} ({r['value'][:80]})")
            else:
                payload = {"urls": urls, "tags": list(tags), "max_depth": depth, "plugins": plugin_list}
                if only_new is not None:
                    payload["only_new"] = only_new
                created = client.create_crawl(payload)
                crawl_id = created["id"]
                skipped_existing = created["skipped_existing"]
                err.print(
                    f"crawl [bold]{crawl_id}[/] queued with {created['urls']} URL(s)"
                    + (f" ({skipped_existing} archived before)" if skipped_existing else "")
                )
        except ApiError as exc:
            fail(str(exc), 2)
        if not (wait or stack is not None):
            if as_json:
                click.echo(
                    json.dumps(
                        summary(
                            crawl_id=crawl_id, skipped_existing=skipped_existing, data_dir=settings.data_dir, state=None
                        )
                    )
                )
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
    result = summary(crawl_id=crawl_id, skipped_existing=skipped_existing, data_dir=settings.data_dir, state=state)
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
