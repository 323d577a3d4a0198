"""A binary that cannot be had skips that hook's ArchiveResult with the binary named; the rest run.
Which binary a hook uses is the operator's choice (the environment), never a crawl's config."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sqlalchemy import select

from boxcar.shared.db import Database
from boxcar.shared.db.models import Binary
from tests.helpers import load_crawl, submit, wait_sealed


def test_missing_binary_skips_its_hook_and_names_it(pg_url, nats_url, make_stack, demo_site):
    stack = make_stack(pg_url, nats_url, env={"WGET_BINARY": "wget-that-does-not-exist"})
    crawl_id = submit(stack, urls=[demo_site], plugins=["wget", "htmltotext"])
    state = wait_sealed(stack, crawl_id, timeout=300)
    assert state["snapshots"]["sealed"] == 1
    _, _, results = load_crawl(Database(pg_url), crawl_id)
    by_plugin = {r.plugin: r for r in results}
    assert by_plugin["wget"].status == "skipped"
    assert "wget-that-does-not-exist" in by_plugin["wget"].notes and "not found" in by_plugin["wget"].notes
    assert by_plugin["htmltotext"].status in ("noresults", "failed", "skipped")  # nothing to read; it still ran
    assert by_plugin["htmltotext"].process_id  # a real process, unlike the wget hook that never started


def test_resolved_binaries_are_recorded(pg_url, nats_url, make_stack, demo_site):
    stack = make_stack(pg_url, nats_url)
    crawl_id = submit(stack, urls=[demo_site], plugins=["wget"])
    wait_sealed(stack, crawl_id, timeout=300)
    db = Database(pg_url)

    def recorded():
        with db.read() as s:
            return list(s.scalars(select(Binary).where(Binary.name == "wget")))

    from tests.helpers import wait_until

    [wget] = wait_until(recorded, 30, "the wget Binary row")
    assert wget.abspath and wget.version and wget.binprovider == "env" and wget.machine


def test_the_warm_up_of_trafilaturas_interpreter_runs_clean_in_the_venv_boxcar_resolved(
    sqlite_url, nats_url, make_stack, demo_site
):
    """The warm trafilatura interpreter runs ``SECOND_INTERPRETERS``' warm-up once before it forks
    per page (a failing warm-up only costs speed, so the zygote would hide it): run it in the very
    venv the resolver installed and check it loaded what the forks reuse."""
    from boxcar.hook_executor.warm import SECOND_INTERPRETERS

    stack = make_stack(sqlite_url, nats_url)
    crawl_id = submit(stack, urls=[demo_site], plugins=["wget", "trafilatura"])
    wait_sealed(stack, crawl_id, timeout=300)
    with Database(sqlite_url).read() as s:
        [abspath] = set(s.scalars(select(Binary.abspath).where(Binary.name == "trafilatura")))
    python = Path(abspath).resolve().with_name("python")  # where the hook looks for it
    preload, warmup = SECOND_INTERPRETERS["TRAFILATURA_BINARY"]
    check = "import trafilatura.external as e, tld.utils as t; print(e.JT_STOPLIST is not None, bool(t.tld_names))"
    code = f"import {', '.join(preload)}\n{warmup}\n{check}"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]  # the jusText stop words and the public suffix list


def test_a_resolver_that_never_answers_fails_hooks_started_together_with_its_own_error(
    sqlite_url, nats_url, make_stack, demo_site
):
    """wget and favicon start together (``order.start_batches``). With no binary-resolver up, the
    task fails on its last delivery, and each hook's stand-in result says why in the resolver
    client's own words, as a hook started alone would: not an ``ExceptionGroup``'s ("unhandled
    errors in a TaskGroup")."""
    env = {"BINARY_RESOLVE_TIMEOUT": "2", "TASK_MAX_DELIVER": "1"}
    stack = make_stack(sqlite_url, nats_url, families=["fetch"], env=env)
    resolver = next(c for c in stack.children if c.name == "binary-resolver")
    resolver.proc.kill()
    resolver.proc.wait(10)
    crawl_id = submit(stack, urls=[demo_site], plugins=["wget", "favicon"])
    wait_sealed(stack, crawl_id, timeout=120)
    _, _, results = load_crawl(Database(sqlite_url), crawl_id)
    notes = {r.plugin: (r.status, r.notes) for r in results}
    assert set(notes) == {"wget", "favicon"}, notes
    for status, text in notes.values():
        assert status == "failed" and text.startswith("ResolverUnreachable: no binary-resolver answered"), notes
