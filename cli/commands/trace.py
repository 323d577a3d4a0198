"""``boxcar trace CRAWL_ID``: a crawl's trace as a waterfall in the terminal, read from the spans
the stack kept (``DATA_DIR/logs``, ``boxcar.shared.spanlog``): no collector needed."""

from __future__ import annotations

import json

import click

from boxcar.cli.common import common_options, fail, open_database, settings_for


@click.command("trace")
@common_options
@click.argument("crawl_id")
@click.option("--json", "as_json", is_flag=True, help="The spans as JSON lines instead")
def trace_cmd(data_dir, crawl_id, as_json) -> None:
    """Show a crawl's trace: snapshot → stage → task → hook, with durations; failures in red."""
    from rich.console import Console
    from rich.tree import Tree

    from boxcar.shared import spanlog
    from boxcar.shared.db.models import Crawl

    settings = settings_for(data_dir)
    db = open_database(settings)
    with db.read() as s:
        crawl = s.get(Crawl, crawl_id)
        carrier = dict(crawl.trace_context or {}) if crawl is not None else None
    if crawl is None:
        fail(f"no crawl {crawl_id} in {settings.data_dir}")
    trace_id = spanlog.trace_id_of(carrier)
    folder = settings.data_dir / "logs"
    spans = list(spanlog.read_spans(folder, trace_id)) if trace_id else []
    if not spans:
        fail(
            f"no spans of crawl {crawl_id} (trace {trace_id or 'unknown'}) in {folder}: "
            "they are kept while SPAN_LOG is on (the default), by the processes of this data dir"
        )
    if as_json:
        for span in sorted(spans, key=lambda x: x["start"]):
            click.echo(json.dumps(span))
        return
    services = sorted({s["service"] for s in spans})
    errors = sum(s["error"] for s in spans)
    tree = Tree(
        f"[bold]crawl {crawl_id}[/] trace {trace_id}: {len(spans)} spans from {', '.join(services)}"
        + (f", [red]{errors} failed[/]" if errors else "")
    )

    def add(branch: Tree, node: spanlog.SpanNode) -> None:
        colour = "red" if node.span["error"] else "default"
        where = f"[dim]{node.span['service']} +{node.offset:.2f}s[/]"
        text = f"[{colour}]{node.label}[/] {where} {node.duration * 1000:.0f} ms"
        child = branch.add(text)
        for sub in node.children:
            add(child, sub)

    for root in spanlog.trace_tree(spans):
        add(tree, root)
    Console().print(tree)
