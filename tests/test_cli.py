"""The CLI as a user runs it: an embedded stack (SQLite, NATS from the wheel) brought up by `boxcar add`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import INPUTS, wait_until

BOXCAR = str(Path(sys.executable).parent / "boxcar")


def run_boxcar(*args: str, data_dir: Path, lib_dir: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "NATS_URL", "BOXCAR_API_URL")}
    env.update(DATA_DIR=str(data_dir), ABXPKG_LIB_DIR=str(lib_dir), URL_ALLOW_PRIVATE="true")  # local sites
    return subprocess.run([BOXCAR, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_add_wait_json_archives_30_corpus_pages(corpus_server, tmp_path, lib_dir, monkeypatch):
    """The main job from the command line on 30 pages; the non-browser selection keeps it quick
    (the default selection end to end: tests/test_end_to_end.py)."""
    monkeypatch.setenv("PLUGINS", "wget,favicon,htmltotext,trafilatura,hashes")
    urls_txt = tmp_path / "urls.txt"
    urls_txt.write_text(httpx.get(f"{corpus_server}/urls.txt?limit=30").text)
    done = run_boxcar("add", "--wait", "--json", str(urls_txt), data_dir=tmp_path / "data", lib_dir=lib_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "sealed"
    assert summary["snapshots"] == {"total": 30, "sealed": 30}
    assert summary["data_dir"] == str(tmp_path / "data")

    listed = run_boxcar("list", "--json", "--crawl", summary["crawl_id"], data_dir=tmp_path / "data", lib_dir=lib_dir)
    assert listed.returncode == 0, listed.stderr
    snapshots = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(snapshots) == 30 and all(s["status"] == "sealed" for s in snapshots)
    wget_ok = sum(any(r["plugin"] == "wget" and r["status"] == "succeeded" for r in s["results"]) for s in snapshots)
    assert wget_ok >= 28, f"wget succeeded on only {wget_ok}/30"
    assert sum(summary["results"].values()) == sum(len(s["results"]) for s in snapshots)
    assert not (tmp_path / "data" / ".boxcar" / "stack.json").exists(), "embedded stack left its stack file"

    # the same pages again (ONLY_NEW): the summary says they were archived before
    urls = [s["url"] for s in snapshots[:3]]
    again = run_boxcar("add", "--wait", "--json", *urls, data_dir=tmp_path / "data", lib_dir=lib_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout.strip().splitlines()[-1])
    assert (second["skipped_existing"], second["snapshots"]["total"], second["merged"]) == (3, 0, 0), second


def test_demo_archives_the_bundled_site(tmp_path, lib_dir):
    done = run_boxcar("demo", "--json", data_dir=tmp_path / "data", lib_dir=lib_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "sealed" and summary["snapshots"]["sealed"] == 7
    assert summary["results"]["failed"] == 0


def test_bad_input_is_a_clear_error(tmp_path, lib_dir):
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing to see here\n")
    done = run_boxcar("add", str(empty), data_dir=tmp_path / "data", lib_dir=lib_dir, timeout=60)
    assert done.returncode == 2 and "no URLs found (format tried: text)" in done.stderr  # the server parses files
    done = run_boxcar("add", "ftp://example.com/file", data_dir=tmp_path / "data", lib_dir=lib_dir, timeout=120)
    assert done.returncode == 2 and "ftp://example.com/file: unsupported scheme 'ftp'" in done.stderr
    assert "starting" not in done.stderr  # refused before any stack was started
    done = run_boxcar(
        "add",
        "--api",
        "http://127.0.0.1:9",
        "https://example.com/",
        data_dir=tmp_path / "data",
        lib_dir=lib_dir,
        timeout=60,
    )
    assert done.returncode == 2 and "cannot reach the Boxcar API at http://127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr


def test_dry_run_previews_an_export_without_creating_anything(tmp_path, lib_dir):
    source = INPUTS / "pinboard/pinboard_export.json"
    if not source.exists():
        pytest.skip(f"inputs not found at {INPUTS}")
    copy = tmp_path / "export.txt"  # the name says nothing: the format comes from the content
    copy.write_bytes(source.read_bytes())
    done = run_boxcar("add", "--dry-run", "--json", str(copy), data_dir=tmp_path / "data", lib_dir=lib_dir, timeout=60)
    assert done.returncode == 0, done.stderr
    preview = json.loads(done.stdout)
    assert preview["format"] == "pinboard_json" and len(preview["entries"]) == 3
    assert set(preview["entries"][0]) == {"url", "title", "tags", "bookmarked_at"}
    assert isinstance(preview["entries"][0]["tags"], list) and preview["rejected"] == []
    assert not (tmp_path / "data").exists()


def test_dry_run_shows_entries_as_the_import_will_merge_them(tmp_path, lib_dir):
    export = tmp_path / "bookmarks.html"
    export.write_text(
        "<!DOCTYPE NETSCAPE-Bookmark-file-1>\n<DL><p>\n"
        '<DT><A HREF="https://example.com/a" TAGS="news">Kestrels</A>\n'
        '<DT><A HREF="https://example.com/a" TAGS="birds,news"></A>\n'
        '<DT><A HREF="https://example.com/b">Quarry</A>\n</DL>\n'
    )
    done = run_boxcar(
        "add", "--dry-run", "--json", str(export), data_dir=tmp_path / "data", lib_dir=lib_dir, timeout=60
    )
    assert done.returncode == 0, done.stderr
    preview = json.loads(done.stdout)
    assert preview["counts"] == {"entries": 3, "accepted": 2, "duplicates": 1, "rejected": 0}
    first = preview["entries"][0]
    assert (first["url"], first["title"], sorted(first["tags"])) == (
        "https://example.com/a",
        "Kestrels",
        ["birds", "news"],
    )
    text = run_boxcar("add", "--dry-run", str(export), data_dir=tmp_path / "data", lib_dir=lib_dir, timeout=60)
    assert "3 entries → 2 URL(s) to archive, 1 duplicates merged" in " ".join(text.stderr.split())


def test_no_service_outlives_a_killed_boxcar_up(tmp_path, lib_dir):
    """`boxcar up` killed with SIGKILL (no chance to clean up): its services and NATS go too."""
    import signal

    from tests.helpers import wait_until

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "NATS_URL", "BOXCAR_API_URL")}
    env.update(DATA_DIR=str(tmp_path / "data"), ABXPKG_LIB_DIR=str(lib_dir))
    up = subprocess.Popen([BOXCAR, "up", "--port", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stack_file = tmp_path / "data" / ".boxcar" / "stack.json"
    try:
        info = wait_until(lambda: stack_file.exists() and json.loads(stack_file.read_text()), 60, "boxcar up")
    except AssertionError:
        up.kill()
        raise AssertionError(up.stderr.read().decode()[-2000:]) from None
    children = info["children"]
    assert set(children) == {"boxcar", "nats-server"}  # the embedded default: every service in one process
    up.send_signal(signal.SIGKILL)
    up.wait(10)

    def gone(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_until(lambda: all(gone(pid) for pid in children.values()), 40, "every child of boxcar up to exit")
    # and the data dir is free again: a new stack starts on it
    again = subprocess.Popen([BOXCAR, "up", "--port", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: stack_file.exists() and json.loads(stack_file.read_text())["pid"] == again.pid,
            60,
            "a second boxcar up on the same data dir",
        )
    finally:
        again.send_signal(signal.SIGINT)
        again.wait(60)


def test_the_embedded_nats_server_collects_garbage_sooner_unless_told_otherwise():
    from boxcar.cli.stack import nats_env

    assert nats_env({"PATH": "/bin"}) == {"PATH": "/bin", "GOGC": "25"}
    assert nats_env({"GOGC": "200"})["GOGC"] == "200"  # the user's own setting wins
    assert nats_env({"GOGC": ""})["GOGC"] == "25"


def test_add_wait_polls_often_at_first_then_once_a_second():
    """A one-URL crawl is seen sealed within a tenth of a second; a long import is polled (and
    its snapshots and results counted) once a second, not ten times."""
    from boxcar.cli.client import poll_interval

    schedule = [poll_interval(t) for t in (0, 1, 4, 8, 16, 60, 3600)]
    assert schedule[0] == 0.1 and schedule[-3:] == [1.0, 1.0, 1.0]
    assert schedule == sorted(schedule) and schedule[1] <= 0.2
    elapsed, polls = 0.0, 0
    while elapsed < 600:  # a ten-minute crawl
        elapsed += poll_interval(elapsed)
        polls += 1
    assert polls < 620, polls  # 6,000 at a fixed 0.1 s


def test_add_wait_polls_when_the_crawls_pace_says_it_ends():
    """Near its end a crawl is polled when its pace says it will be done, not up to a second later;
    a sealed crawl whose last results are being written, every tenth of a second. A last snapshot
    that takes long, a paused crawl or one still being seeded is soon polled once a second again."""
    from boxcar.cli.client import PollPace

    def state(sealed: int, total: int, status: str = "started") -> dict:
        return {"status": status, "snapshots": {"sealed": sealed, "total": total}}

    pace = PollPace(started=0.0)
    assert pace.next(state(0, 130), 30.0) == 1.0  # no pace yet: the ramp
    assert pace.next(state(129, 130), 30.0) == pytest.approx(30 / 129)  # one left, due in ~0.23 s
    assert pace.next(state(129, 130), 33.0) == pytest.approx(0.4)  # not sealed 3 s on: the ramp again
    assert pace.next(state(129, 130), 60.0) == 1.0
    assert pace.next(state(130, 130, "sealed"), 61.0) == 0.1  # its results still to be written

    big = PollPace(started=0.0)
    assert big.next(state(9_000, 10_000), 1_000.0) == 1.0  # far from the end
    assert big.next(state(9_999, 10_000), 1_100.0) == pytest.approx(1_100 / 9_999)  # the last one is due
    assert big.next(state(9_999, 10_000), 1_105.0) == pytest.approx(0.6)  # ... and still is not sealed
    # every snapshot sealed but not the crawl (it is sealed with its last snapshot): seeds still
    # being added, or paused — the ramp
    assert big.next(state(10_000, 10_000), 1_106.0) == 1.0


def test_five_concurrent_adds_of_the_same_urls_make_each_snapshot_once(tmp_path, lib_dir, site_urls):
    """The issue's probe: five ``boxcar add`` of the same 20 URLs at once made 100 snapshots, each
    crawl saying "0 archived before". Whether a URL is archived *or in progress* is decided where
    snapshots are made: 20 snapshots, the other 80 reported merged."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import wait_until

    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "NATS_URL", "BOXCAR_API_URL")}
    env.update(DATA_DIR=str(data), ABXPKG_LIB_DIR=str(lib_dir), URL_ALLOW_PRIVATE="true", PLUGINS="wget")
    up = subprocess.Popen([BOXCAR, "up", "--port", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stack_file = data / ".boxcar" / "stack.json"
    try:
        wait_until(lambda: stack_file.exists() and json.loads(stack_file.read_text()), 60, "boxcar up")
        urls = site_urls(20)
        with ThreadPoolExecutor(5) as pool:
            runs = list(
                pool.map(
                    lambda _: subprocess.run(
                        [BOXCAR, "add", "--wait", "--json", *urls], env=env, capture_output=True, text=True, timeout=600
                    ),
                    range(5),
                )
            )
        # an add that does not wait answers at once, in summary()'s "queued" shape
        again = subprocess.run([BOXCAR, "add", "--json", urls[0]], env=env, capture_output=True, text=True, timeout=120)
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    assert all(r.returncode == 0 for r in runs), [r.stderr[-1500:] for r in runs]
    summaries = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    assert sum(s["snapshots"]["total"] for s in summaries) == 20, summaries
    # an add that comes after some of the first crawl's snapshots were sealed is not given those
    # URLs (archived before); the others are merged into the snapshots being archived
    assert sum(s["merged"] + s["skipped_existing"] for s in summaries) == 80, summaries
    snapshot_dirs = list(data.glob("archive/users/*/snapshots/*/*/*"))
    assert len(snapshot_dirs) == 20
    assert again.returncode == 0, again.stderr[-1500:]
    queued = json.loads(again.stdout)
    assert queued.pop("crawl_id") and queued == {"status": "queued", "skipped_existing": 1, "data_dir": str(data)}


def test_a_refused_lan_address_is_explained_once_per_crawl(tmp_path, lib_dir):
    """`boxcar add http://192.168.1.20/` on a stack that keeps to public addresses ended with every
    hook skipped and no word of why: the summary and `boxcar list` now say it once."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "NATS_URL", "BOXCAR_API_URL")}
    env.update(DATA_DIR=str(data), ABXPKG_LIB_DIR=str(lib_dir), URL_ALLOW_PRIVATE="false", PLUGINS="wget,favicon")
    urls = ["http://192.168.1.20/", "http://10.1.2.3/admin"]
    done = subprocess.run([BOXCAR, "add", *urls], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said = " ".join(done.stderr.split())  # rich wraps lines to the terminal's width
    assert said.count("URL_ALLOW_PRIVATE=true") == 1, said[-3000:]
    assert "refused 2 page(s)" in said and "private or special-purpose address" in said
    assert "nothing archived" not in said  # not once per URL either
    listed = subprocess.run([BOXCAR, "list"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and " ".join(listed.stderr.split()).count("URL_ALLOW_PRIVATE=true") == 1
    rows = subprocess.run([BOXCAR, "list", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert all("private" in json.loads(line)["refusal"] for line in rows.stdout.splitlines())


def test_a_stack_stopped_while_jetstream_cannot_answer_its_start_up_exits_at_once(tmp_path, lib_dir):
    """SIGTERM during start-up while JetStream cannot answer (here a real nats-server without
    JetStream: every JetStream request has no responders): the one-process stack stops retrying
    and exits within seconds, not after ``SETUP_RETRY_S`` (two minutes). That is what ``boxcar up``
    killed during its start-up, NATS going with it, looked like."""
    import signal

    from boxcar.cli.stack import free_port, nats_server_binary, wait_for_port

    port = free_port()
    nats = subprocess.Popen([nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, 20, nats)
        data = tmp_path / "data"
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BOXCAR_API_URL")}
        env.update(
            DATA_DIR=str(data),
            ABXPKG_LIB_DIR=str(lib_dir),
            NATS_URL=f"nats://127.0.0.1:{port}",
            API_HOST="127.0.0.1",
            API_PORT=str(free_port()),
            ARCHIVE_PORT="0",
            PYTHONUNBUFFERED="1",
        )
        log = tmp_path / "allinone.log"
        with open(log, "wb") as out:
            stack = subprocess.Popen(
                [sys.executable, "-m", "boxcar.cli.allinone", "--families", "fetch"], env=env, stderr=out, stdout=out
            )
        try:
            wait_until(lambda: b"JetStream is not answering" in log.read_bytes(), 60, "a start-up retry")
            stack.send_signal(signal.SIGTERM)
            stack.wait(30)  # without the stop, it retried for SETUP_RETRY_S (120 s)
        finally:
            if stack.poll() is None:
                stack.kill()
                stack.wait()
        assert b"stopping, not retrying" in log.read_bytes(), log.read_text()[-2000:]
    finally:
        nats.kill()
        nats.wait()
