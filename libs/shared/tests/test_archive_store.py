"""The storage contract (issue 32): the local data dir and an S3 bucket (a real S3 API server,
moto's, ``tests/s3_server.py``) pass the same tests: bytes in and out unchanged, listings by
directory, trees up and down, hostile keys and links refused, a missing file told apart from a
store that cannot be reached."""

from __future__ import annotations

import os
import shutil
import stat
import time

import pytest

from boxcar.shared.archive_store import COPY_MARKER, ArchiveStore, StoredFile, StoreUnavailable, check_key
from tests.s3_server import CREDENTIALS, S3Server

SNAP = "archive/users/system/snapshots/20261204/example.com/01a2"


@pytest.fixture(scope="module")
def s3_server():
    server = S3Server()
    server.start()
    yield server
    server.stop()


#: the S3 case starts a server (moto's): like the NATS tests, not one of `make check`'s fast tests
@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.needs_nats)])
def store(request, tmp_path, monkeypatch) -> ArchiveStore:
    if request.param == "local":
        return ArchiveStore.local(tmp_path / "data")
    server = request.getfixturevalue("s3_server")
    bucket = f"archive-{os.urandom(4).hex()}"
    server.create_bucket(bucket)
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    return ArchiveStore.from_url(f"s3://{bucket}/boxcar?endpoint={server.endpoint}", tmp_path / "unused")


def test_bytes_round_trip_unchanged_and_a_put_replaces(store):
    data = bytes(range(256)) * 1000 + b"\r\n\0end"
    store.put_bytes(f"{SNAP}/wget/index.html", data)
    assert store.get_bytes(f"{SNAP}/wget/index.html") == data
    assert b"".join(store.iter_bytes(f"{SNAP}/wget/index.html", chunk=4096)) == data
    assert store.size(f"{SNAP}/wget/index.html") == len(data)
    store.put_bytes(f"{SNAP}/wget/index.html", b"again")
    assert store.get_bytes(f"{SNAP}/wget/index.html") == b"again"


def test_a_missing_file_is_file_not_found(store):
    with pytest.raises(FileNotFoundError, match="no archive/"):
        store.get_bytes(f"{SNAP}/nothing.txt")
    assert store.size(f"{SNAP}/nothing.txt") is None


def test_listing_is_by_directory_with_sizes(store):
    store.put_bytes(f"{SNAP}/a.txt", b"1")
    store.put_bytes(f"{SNAP}/wget/deep/b.txt", b"22")
    store.put_bytes(f"{SNAP}x/sibling.txt", b"333")  # shares the prefix's characters, not its directory
    assert store.list(SNAP) == [StoredFile(f"{SNAP}/a.txt", 1), StoredFile(f"{SNAP}/wget/deep/b.txt", 2)]
    assert store.delete_tree(SNAP) == 2
    assert store.list(SNAP) == []
    assert store.get_bytes(f"{SNAP}x/sibling.txt") == b"333"


def test_a_tree_goes_up_and_comes_down_whole(store, tmp_path):
    task = tmp_path / "scratch" / "snap"
    (task / "wget" / "127.0.0.1" / "pages").mkdir(parents=True)
    (task / "wget" / "127.0.0.1" / "pages" / "index.html").write_bytes(b"<html>page</html>")
    (task / "wget" / "empty.txt").write_bytes(b"")
    (task / "screenshot").mkdir()
    (task / "screenshot" / "screenshot.png").write_bytes(os.urandom(6 * 1024 * 1024))  # multipart on S3
    (task / "title").mkdir()
    (task / "title" / "títle ünïcode.txt").write_text("Ünïcode", encoding="utf-8")
    (task / "title" / "link.txt").symlink_to(task / "title" / "títle ünïcode.txt")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("not for the archive")
    (task / "title" / "escape.txt").symlink_to(secret)

    files, size = store.upload_tree(task, SNAP, only=["wget", "title"])  # one task's plugin dirs
    assert files == 4 and size == len(b"<html>page</html>") + 2 * len("Ünïcode".encode())
    keys = {f.key.removeprefix(SNAP + "/") for f in store.list(SNAP)}
    assert keys == {"wget/127.0.0.1/pages/index.html", "wget/empty.txt", "title/títle ünïcode.txt", "title/link.txt"}
    store.upload_tree(task, SNAP, only=["screenshot"])  # the browser task's, separately
    store.upload_tree(task, SNAP, only=["screenshot"])  # and again: a redelivered task

    down = tmp_path / "other-machine" / "snap"
    assert store.download_tree(SNAP, down) == 5
    for relative in ("wget/127.0.0.1/pages/index.html", "wget/empty.txt", "screenshot/screenshot.png"):
        assert (down / relative).read_bytes() == (task / relative).read_bytes()
    assert (down / "title" / "link.txt").read_text(encoding="utf-8") == "Ünïcode"
    assert not (down / "title" / "escape.txt").exists()


def test_hostile_keys_are_refused_before_any_request(store):
    for key in ["../etc/passwd", "/abs", "a//b", "a/./b", "a\\b", "a/\0b", "", f"{SNAP}/../../x"]:
        with pytest.raises(ValueError, match="not an archive key"):
            store.put_bytes(key, b"x")
    assert check_key(f"{SNAP}/wget/index.html")


def test_the_local_store_is_the_data_dir_itself(tmp_path):
    store = ArchiveStore.local(tmp_path / "data")
    store.put_bytes(f"{SNAP}/index.jsonl", b"{}\n")
    assert (tmp_path / "data" / SNAP / "index.jsonl").read_bytes() == b"{}\n"
    # an executor that wrote in place has nothing to upload
    assert store.upload_tree(tmp_path / "data" / SNAP, SNAP) == (0, 0)


def test_a_store_that_cannot_be_reached_is_unavailable_not_missing(tmp_path, monkeypatch):
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("boxcar.shared.archive_store.RETRY_TIMEOUT", __import__("datetime").timedelta(seconds=1))
    down = S3Server()  # never started (no install either): nothing listens on its port
    store = ArchiveStore.from_url(f"s3://bucket?endpoint={down.endpoint}", tmp_path)
    with pytest.raises(StoreUnavailable, match=r"s3://bucket/: get .* failed"):
        store.get_bytes("archive/x.txt")


def test_store_urls(tmp_path):
    assert ArchiveStore.from_url("", tmp_path).local_root == tmp_path.resolve()
    assert ArchiveStore.from_url("file:", tmp_path).local_root == tmp_path.resolve()
    for bad in ["ftp://x/y", "s3://", "s3://key:secret@bucket/p"]:
        with pytest.raises(ValueError, match="STORE_URL"):
            ArchiveStore.from_url(bad, tmp_path)


def test_a_second_download_writes_only_what_changed_and_a_local_copy_is_cached(store, tmp_path):
    store.put_bytes(f"{SNAP}/wget/index.html", b"<html>one</html>")
    store.put_bytes(f"{SNAP}/title/title.txt", b"Title")
    cache = tmp_path / "cache"
    local = store.local_copy(SNAP, cache, max_age=0)
    assert (local / "wget" / "index.html").read_bytes() == b"<html>one</html>"
    if store.is_remote:  # a bucket's files are copied once, then only what changed
        assert local == cache / SNAP
        assert store.download_tree(SNAP, local) == 0
        store.put_bytes(f"{SNAP}/title/title.txt", b"A new title")
        assert store.local_copy(SNAP, cache, max_age=3600) == local  # within max_age: not listed again
        assert (local / "title" / "title.txt").read_bytes() == b"Title"
        assert store.download_tree(SNAP, local) == 1
        assert (local / "title" / "title.txt").read_bytes() == b"A new title"
    else:  # the data dir is its own copy: nothing moves
        assert local == store.local_root / SNAP
        assert store.download_tree(SNAP, local) == 0


def test_read_inside_stays_inside_its_directory(store, tmp_path):
    store.put_bytes(f"{SNAP}/htmltotext/page.txt", b"x" * 100)
    store.put_bytes(f"{SNAP}/wget/other.txt", b"other")
    assert store.read_inside(f"{SNAP}/htmltotext/page.txt", f"{SNAP}/htmltotext") == b"x" * 100
    assert store.read_inside(f"{SNAP}/htmltotext/page.txt", f"{SNAP}/htmltotext", limit=10) == b"x" * 10
    with pytest.raises(FileNotFoundError):
        store.read_inside(f"{SNAP}/wget/other.txt", f"{SNAP}/htmltotext")
    with pytest.raises(FileNotFoundError):
        store.read_inside(f"{SNAP}/htmltotext/none.txt", f"{SNAP}/htmltotext")
    if store.local_root is not None:  # a link a hook planted, out of its plugin dir
        secret = tmp_path / "host-secret.txt"
        secret.write_text("not for the index")
        (store.local_root / SNAP / "htmltotext" / "escape.txt").symlink_to(secret)
        with pytest.raises(FileNotFoundError):
            store.read_inside(f"{SNAP}/htmltotext/escape.txt", f"{SNAP}/htmltotext")


def test_names_that_cannot_be_keys_and_links_out_through_a_directory_are_left_out(store, tmp_path):
    task = tmp_path / "scratch" / "snap"
    (task / "gallerydl").mkdir(parents=True)
    (task / "gallerydl" / "ok.jpg").write_bytes(b"jpg")
    (task / "gallerydl" / "a\\b.jpg").write_bytes(b"a backslash from a title")
    os.close(os.open(os.fsencode(task / "gallerydl") + b"/\xff-not-utf8.jpg", os.O_CREAT | os.O_WRONLY, 0o644))
    elsewhere = tmp_path / "host-dir"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("not for the archive")
    (task / "wget").symlink_to(elsewhere, target_is_directory=True)  # a plugin dir that is a link out

    files, _ = store.upload_tree(task, SNAP, only=["gallerydl", "wget"])
    assert files == 1
    assert [f.key for f in store.list(SNAP)] == [f"{SNAP}/gallerydl/ok.jpg"]


def test_two_stores_copying_one_snapshot_at_once_each_get_it_whole(store, tmp_path):
    import threading

    if not store.is_remote:  # the data dir is its own copy: nothing is copied, nothing can collide
        assert store.local_copy(SNAP, tmp_path / "cache") == store.local_root / SNAP
        assert not (tmp_path / "cache").exists()
        return
    for i in range(20):
        store.put_bytes(f"{SNAP}/wget/page-{i}.html", bytes([i]) * 50_000)
    twin = ArchiveStore(store.store, store.name)  # the UI's two apps in one process, before sharing
    cache, errors = tmp_path / "cache", []

    def copy(s: ArchiveStore) -> None:
        try:
            s.local_copy(SNAP, cache, max_age=0)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=copy, args=(s,)) for s in (store, twin) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i in range(20):
        assert (cache / SNAP / "wget" / f"page-{i}.html").read_bytes() == bytes([i]) * 50_000
    assert not list((cache / SNAP).rglob("*.part"))


def test_the_local_store_writes_private_files(tmp_path):
    store = ArchiveStore.local(tmp_path / "data")
    store.put_bytes("sources/20261204-import.txt", b"https://example.com/private-bookmark")
    path = tmp_path / "data" / "sources" / "20261204-import.txt"
    assert path.read_bytes() == b"https://example.com/private-bookmark"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # as storage.write_atomic has always made them


def test_a_file_url_names_the_data_dir_or_is_refused(tmp_path):
    assert (
        ArchiveStore.from_url(f"file://{tmp_path / 'data'}", tmp_path / "data").local_root
        == (tmp_path / "data").resolve()
    )
    with pytest.raises(ValueError, match="set DATA_DIR"):
        ArchiveStore.from_url("file:///elsewhere", tmp_path / "data")


def _snap(i: int) -> str:
    return f"archive/users/system/snapshots/20261204/example.com/0{i}"


@pytest.fixture
def bucket(tmp_path) -> ArchiveStore:
    """A bucket as ``local_copy`` sees one (obstore's LocalStore behind a store with no local root:
    every copy goes through ``download_tree``), holding five 100,000-byte snapshots 0..4."""
    from obstore.store import LocalStore

    (tmp_path / "bucket").mkdir()
    store = ArchiveStore(LocalStore(str(tmp_path / "bucket")), "bucket")
    assert store.is_remote
    for i in range(5):
        store.put_bytes(f"{_snap(i)}/wget/index.html", bytes([i]) * 100_000)
    return store


def _limited(bucket: ArchiveStore, limit: int, hold: float) -> ArchiveStore:
    """A store on ``bucket`` whose copies are bounded; its scans run when a test calls them."""
    return ArchiveStore(bucket.store, bucket.name, cache_limit=limit, cache_hold=hold, cache_rescan=None)


def test_local_copies_past_store_cache_max_go_least_recently_used_first(bucket, tmp_path):
    """``STORE_CACHE_MAX``: the copies ``local_copy`` keeps under a cache root are trimmed to 90 %
    of the limit, least recently used first; copies an earlier process left (found by the scan) go
    first, and one left half removed is deleted; a removed copy comes back whole when asked for
    again; a directory that was there before (the data dir's own archive) is never counted or
    removed; a ``pinned`` block's copies stay until it ends."""
    cache = tmp_path / "cache"
    left = cache / _snap(9) / "wget" / "index.html"  # an earlier process's copy, last used an hour ago
    left.parent.mkdir(parents=True)
    left.write_bytes(b"x" * 100_000)
    (cache / _snap(9) / COPY_MARKER).touch()
    own = cache / _snap(8) / "wget" / "index.html"  # the data dir's own archive, from before the bucket
    own.parent.mkdir(parents=True)
    own.write_bytes(b"y" * 100_000)
    bucket.put_bytes(f"{_snap(8)}/title/title.txt", b"in the bucket too")
    for old in (_snap(9), _snap(8)):
        os.utime(cache / old, (os.path.getmtime(left) - 3600,) * 2)
    aside = cache / _snap(9).replace("/09", "/.07.removing-1-2")  # a removal cut short by a crash
    aside.mkdir()
    (aside / "index.html").write_bytes(b"z")
    limited = _limited(bucket, 250_000, hold=0)
    limited.local_copies(cache).scan()
    assert not aside.exists()

    def kept() -> list[int]:
        assert own.read_bytes() == b"y" * 100_000  # never counted, never removed
        return [i for i in (0, 1, 2, 3, 4, 9) if (cache / _snap(i)).is_dir()]

    limited.local_copy(_snap(0), cache, max_age=0)
    assert kept() == [0, 9]
    limited.local_copy(_snap(1), cache, max_age=0)
    assert kept() == [0, 1]  # 300,000 bytes: the leftover went first, down to 90 %
    limited.local_copy(_snap(2), cache, max_age=0)
    assert kept() == [1, 2]  # then 0, the least recently used
    limited.local_copy(_snap(1), cache, max_age=0)  # 1 used again: 2 is now the older
    limited.local_copy(_snap(3), cache, max_age=0)
    assert kept() == [1, 3]
    again = limited.local_copy(_snap(0), cache, max_age=0)  # removed before: copied again, whole
    assert (again / "wget" / "index.html").read_bytes() == bytes([0]) * 100_000
    assert kept() == [0, 3]
    assert not [p for p in (cache / _snap(0)).parent.iterdir() if p.name.startswith(".")]  # none left aside

    with limited.pinned():  # an export: everything it takes stays until it ends
        for i in range(5):
            limited.local_copy(_snap(i), cache, max_age=0)
        assert limited.local_copies(cache).trim() == []  # as a scan's trim or another request's would
        assert kept() == [0, 1, 2, 3, 4]
    assert kept() == [3, 4]  # trimmed on the way out
    limited.local_copy(_snap(8), cache, max_age=0)  # brought up to date, still not a copy of ours
    assert (cache / _snap(8) / "title" / "title.txt").read_bytes() == b"in the bucket too"
    assert not (cache / _snap(8) / COPY_MARKER).exists()
    for i in range(3):
        limited.local_copy(_snap(i), cache, max_age=0)
    assert kept() == [1, 2]
    assert bucket.list(_snap(1)) == [StoredFile(f"{_snap(1)}/wget/index.html", 100_000)]  # the bucket untouched


def test_a_copy_is_counted_from_the_bucket_listing(bucket, tmp_path):
    """A refreshed copy's size is the bytes the bucket lists under it (no walk of the copy on the
    request path): it follows a file added to the bucket, and a refresh that writes nothing keeps it."""
    cache = tmp_path / "cache"
    limited = _limited(bucket, 10_000_000, hold=0)
    copies = limited.local_copies(cache)
    limited.local_copy(_snap(0), cache, max_age=0)
    assert copies.total == 100_000
    bucket.put_bytes(f"{_snap(0)}/title/title.txt", b"t" * 123)
    limited.local_copy(_snap(0), cache, max_age=0)
    assert copies.total == 100_123
    limited.local_copy(_snap(0), cache, max_age=0)  # nothing new: the same count
    limited.local_copy(_snap(1), cache, max_age=0)
    assert copies.total == 200_123


def test_a_copy_in_use_stays_past_the_limit(bucket, tmp_path):
    """Within the hold a copy stays however far past the limit: one this process used, one another
    process used (only its mtime says so), and always the one just asked for; a copy removed by
    someone else (a deleted snapshot) stops counting."""
    cache = tmp_path / "cache"
    mine = _limited(bucket, 1, hold=3600)
    for i in range(3):
        mine.local_copy(_snap(i), cache, max_age=0)
    assert all((cache / _snap(i) / "wget" / "index.html").is_file() for i in range(3))

    other = _limited(bucket, 1, hold=3600)  # another process on the same volume: nothing in memory
    other.local_copies(cache).scan()
    other.local_copy(_snap(3), cache, max_age=0)
    assert all((cache / _snap(i)).is_dir() for i in range(4))  # their mtimes are fresh
    for i in range(4):
        os.utime(cache / _snap(i), (time.time() - 7200,) * 2)  # ... an hour and more ago
    other.local_copy(_snap(4), cache, max_age=0)  # 0..2 were found by the scan; 3 is its own, used within the hold
    assert [i for i in range(5) if (cache / _snap(i)).is_dir()] == [3, 4]

    alone = _limited(bucket, 1, hold=0)
    lone = tmp_path / "lone"
    alone.local_copy(_snap(0), lone, max_age=0)
    assert (lone / _snap(0) / "wget" / "index.html").is_file()  # the one asked for, alone past the limit
    copies = alone.local_copies(lone)
    shutil.rmtree(lone / _snap(0))
    alone.forget_copy(_snap(0))
    assert copies.total == 0 and not copies.over()


def test_a_copy_being_copied_by_another_process_is_not_removed(bucket, tmp_path):
    """``local_copy`` holds a shared flock on the copy's marker while it copies; a removal (in any
    process) needs it exclusively, so a copy whose refresh outlasts the hold is left alone."""
    import fcntl

    cache = tmp_path / "cache"
    store = _limited(bucket, 1, hold=0)
    store.local_copy(_snap(0), cache, max_age=0)
    fd = os.open(cache / _snap(0) / COPY_MARKER, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # as another process's local_copy holds it (another open file)
        os.utime(cache / _snap(0), (time.time() - 7200,) * 2)  # ... for longer than the hold
        store.local_copy(_snap(1), cache, max_age=0)
        assert (cache / _snap(0) / "wget" / "index.html").is_file()
    finally:
        os.close(fd)
    store.local_copy(_snap(2), cache, max_age=0)
    assert not (cache / _snap(0)).exists() and not (cache / _snap(1)).exists()


def test_the_mark_of_a_copy_never_goes_up_or_down(bucket, tmp_path):
    task = tmp_path / "task"
    (task / "wget").mkdir(parents=True)
    (task / "wget" / "index.html").write_bytes(b"page")
    (task / COPY_MARKER).touch()
    bucket.upload_tree(task, _snap(7))
    assert [f.key for f in bucket.list(_snap(7))] == [f"{_snap(7)}/wget/index.html"]
    bucket.put_bytes(f"{_snap(6)}/{COPY_MARKER}", b"")  # one that came from elsewhere
    bucket.put_bytes(f"{_snap(6)}/wget/index.html", b"page")
    own = tmp_path / "own"
    (own / _snap(6)).mkdir(parents=True)
    bucket.download_tree(_snap(6), own / _snap(6))
    assert not (own / _snap(6) / COPY_MARKER).exists()


def test_store_cache_max_is_a_size_setting(tmp_path, monkeypatch):
    from boxcar.shared.settings import Settings

    monkeypatch.setenv("STORE_CACHE_MAX", "2g")
    assert Settings(data_dir=tmp_path).store_cache_max == 2 * 1024**3
    monkeypatch.setenv("STORE_CACHE_MAX", "lots")
    with pytest.raises(ValueError, match="500m or 2g"):
        Settings(data_dir=tmp_path)
