"""A disk that fills up mid-crawl: the crawl still seals (hooks that could not write say so), and
once space is back every sealed snapshot gets its ``index.jsonl`` (the projector's repair sweep)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from boxcar.shared.db import Database
from boxcar.shared.db.models import Snapshot
from tests.faults.harness import PLUGINS
from tests.helpers import submit, wait_sealed, wait_until


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs, nearly full, that the test can grow later (``remount``)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_mid_crawl_is_repaired_once_space_is_back(
    pg_url, nats_url, make_stack, corpus_server, site_urls, small_disk
):
    # corpus_server: skips without the corpus, whose pages fill the disk; the 7 small demo pages never do
    stack = make_stack(pg_url, nats_url, families=["fetch", "extract", "parse", "index"], data_dir=small_disk / "data")
    filler = small_disk / "filler"
    free = _free(small_disk)
    filler.write_bytes(b"\0" * max(0, free - 6 * 2**20))  # leave ~6 MiB: a few snapshots' worth
    urls = site_urls(20)
    crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
    db = Database(pg_url)
    wait_until(lambda: _free(small_disk) < 512 * 1024, 300, "the disk to fill up")
    subprocess.run(["mount", "-o", "remount,size=512m", str(small_disk)], check=True)  # space is back
    filler.unlink()
    wait_sealed(stack, crawl_id, timeout=600)

    def every_index_written() -> bool:
        with db.read() as s:
            snaps = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id, Snapshot.attempts > 0)))
        return all((stack.data_dir / x.output_dir / "index.jsonl").is_file() for x in snaps) and len(snaps) == 20

    wait_until(every_index_written, 120, "every sealed snapshot's index.jsonl")


def _free(path: Path) -> int:
    import shutil

    return shutil.disk_usage(path).free
