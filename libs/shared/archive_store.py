"""Where the archive's files live: the local ``DATA_DIR`` (the default) or an S3-compatible bucket,
behind one interface (issue 32).

Keys are paths relative to ``DATA_DIR`` in ArchiveBox's layout (``boxcar.shared.storage``), with
``/`` separators — ``archive/users/<user>/snapshots/<YYYYMMDD>/<host>/<id>/wget/index.html`` — so
a bucket's tree (under an optional prefix) is the data dir's tree, and a data dir copied into a
bucket, or a bucket synced down, is an archive as it is.

The two stores are obstore's (``obstore.store.LocalStore`` and ``S3Store``: one Rust
implementation, ``object_store``, behind both); ``ArchiveStore`` adds what Boxcar needs on top:
key checks (a key from a hostile page never leaves the archive), whole trees up and down (a task's
snapshot dir handed to the store when the task ends, and fetched by the next task of the snapshot
on another machine), and one error for "the store cannot be reached now" (``StoreUnavailable``:
the task is retried later) apart from "no such file" (``FileNotFoundError``).

Atomicity: one object is written whole or not at all (obstore's ``put``: a staged file renamed
into place on a local disk, a single PUT or a completed multipart upload on S3; no reader ever
sees part of a file). A tree is not one object: ``upload_tree`` is idempotent, and callers make
a tree visible only after it returned — the executor publishes a task's results (which name its
files) after the upload, so a crashed upload is redone by the task's redelivery and never linked
half-done.

Who uses it (``STORE_URL``): executors capture a task in a scratch dir, ``download_tree`` the
snapshot's earlier files into it first and ``upload_tree`` the task's plugin dirs before they
publish its results; the projector writes ``index.jsonl`` and reads text for the search index
through it; ingest mirrors a snapshot into its local cache (``download_tree``, unchanged files
skipped) before it serves, replays or exports its files, and removes the least recently used
copies once they pass ``STORE_CACHE_MAX`` (``LocalCopies``). With the default local store all of
that is a no-op and every service works in ``DATA_DIR`` as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import shutil
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import obstore
from obstore.exceptions import BaseError, NotFoundError
from obstore.store import LocalStore, S3Store

from boxcar.shared.storage import SNAPSHOT_DIR_GLOB, write_atomic

if TYPE_CHECKING:
    from obstore.store import S3Config

log = logging.getLogger("boxcar.archive_store")

#: How long one request to a remote store keeps being retried (obstore's backoff) before the
#: caller gets ``StoreUnavailable``; the task it belongs to is then redelivered later.
RETRY_TIMEOUT = timedelta(seconds=20)


def store_endpoint(url: str, environ: Mapping[str, str] | None = None) -> str:
    """The S3 endpoint a ``STORE_URL`` talks to (its ``endpoint=`` parameter, else
    ``AWS_ENDPOINT_URL`` of ``environ``, default ``os.environ``); "" for the local store or AWS
    itself."""
    parts = urlsplit(url)
    if parts.scheme != "s3":
        return ""
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return query.get("endpoint") or (os.environ if environ is None else environ).get("AWS_ENDPOINT_URL", "")


#: the environment a bucket's client is configured from (``from_url``)
CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL")
_SHARED: dict[tuple[str, ...], ArchiveStore] = {}
_SHARED_LOCK = threading.Lock()

#: Seconds a local copy stays after its last use, whatever the cache's size: a page being served, a
#: replay reading its WARC by ranges, or another process's copy (its directory's mtime, which every
#: use sets, and which a ``pinned`` block keeps fresh) is never removed from under it.
CACHE_HOLD = 60.0

#: Seconds between scans of a cache root for copies other processes made (a CLI export, another
#: ingest on the same volume) or left (an earlier process); the first starts at once.
CACHE_RESCAN = 600.0

#: The file ``local_copy`` leaves in a copy it made (a directory that was not there before it):
#: only such directories are ever removed, so an archive of the data dir's own (one that was there
#: before ``STORE_URL`` named a bucket, with files the bucket may not have) never is. Never served
#: (archived files whose names start with a dot are not), and never taken from or put in a bucket.
COPY_MARKER = ".boxcar-copy"

#: In the name a copy being removed is renamed to (``.<id>.removing-<pid>-<thread>``), beside it.
_REMOVING = ".removing-"

#: The copies ``ArchiveStore.pinned`` holds in this context (None: not inside one).
_PINNED: ContextVar[list[tuple[LocalCopies, str]] | None] = ContextVar("boxcar_store_pinned", default=None)


class LocalCopies:
    """The local copies ``ArchiveStore.local_copy`` keeps of a bucket's snapshot directories under
    one cache root (``root/<prefix>``), at most ``limit`` bytes of them (0: no limit, no removal),
    counting every copy on the volume, other processes' too (each process holds the volume to its
    own limit): past it ``trim`` removes the least recently used (down to 90 % of the limit), except
    one used less than ``hold`` seconds ago (by this process; or by another: the directory's mtime,
    which every use sets and a ``pinned`` block keeps fresh), one a ``pinned`` block here holds,
    one being copied (a shared ``flock`` on its ``COPY_MARKER``, which ``local_copy`` holds while
    it copies, in any process; removal takes it exclusively), and the one just asked for. A cache can
    so exceed its limit for a while. Only directories with ``COPY_MARKER`` count. A copy is renamed
    out of view, then deleted. Copies other processes made or left are found by ``scan``: with a
    limit, in a background thread at once and every ``rescan`` seconds (None: only when called),
    the oldest (by mtime) put first; ``scanned`` is set after the first. Thread-safe; one trim runs
    at a time."""

    def __init__(
        self,
        root: Path,
        limit: int,
        hold: float,
        lock_for: Callable[[str], threading.Lock],
        rescan: float | None = CACHE_RESCAN,
    ) -> None:
        self.root = root
        self.limit = limit
        self.hold = hold
        self.total = 0  #: bytes of the copies known, as last measured
        self.scanned = threading.Event()
        self._lock_for = lock_for
        self._sizes: OrderedDict[str, int] = OrderedDict()  # prefix -> bytes, least recent first
        self._used: dict[str, float] = {}  # prefix -> time.monotonic() of its last use here
        self._pins: dict[str, int] = {}
        self._lock = threading.Lock()
        self._trimming = threading.Lock()
        if limit and rescan is not None:
            threading.Thread(target=self._scans, args=(rescan,), name="store-cache-scan", daemon=True).start()

    def use(self, prefix: str, size: int | None = None) -> None:
        """Note a use of the copy ``root/prefix`` now; ``size``: its bytes as just brought up to
        date (None: unchanged; a copy not known here yet is then measured on disk). Nothing
        without a limit, or for a directory without ``COPY_MARKER`` (or a link)."""
        path = self.root / prefix
        if not self.limit or path.is_symlink() or not os.path.isfile(path / COPY_MARKER):
            return
        if size is None and prefix not in self._sizes:
            size = _tree_bytes(path)
        with self._lock:
            if size is not None:
                self.total += size - self._sizes.get(prefix, 0)
                self._sizes[prefix] = size
            self._sizes.move_to_end(prefix)
            self._used[prefix] = time.monotonic()

    def pin(self, prefix: str) -> None:
        """Keep ``root/prefix`` until as many ``unpin`` calls."""
        with self._lock:
            self._pins[prefix] = self._pins.get(prefix, 0) + 1

    def unpin(self, prefix: str) -> None:
        """Undo one ``pin``."""
        with self._lock:
            left = self._pins.get(prefix, 0) - 1
            if left > 0:
                self._pins[prefix] = left
            else:
                self._pins.pop(prefix, None)

    def forget(self, prefix: str) -> None:
        """Stop counting ``root/prefix`` (removed, here or by someone else)."""
        with self._lock:
            self.total -= self._sizes.pop(prefix, 0)
            self._used.pop(prefix, None)

    def over(self) -> bool:
        """Whether the copies known pass the limit (always False without one)."""
        return bool(self.limit) and self.total > self.limit

    def trim(self, keep: str | None = None) -> list[str]:
        """Remove copies, least recently used first, until the known total is within 90 % of the
        limit (see the class); returns the prefixes removed. Returns at once, removing nothing,
        while another thread trims. An error removing one is logged and that copy skipped."""
        removed: list[str] = []
        if not self.over() or not self._trimming.acquire(blocking=False):
            return removed
        try:
            with self._lock:
                candidates = list(self._sizes)
            for prefix in candidates:
                if self.total <= self.limit * 0.9:
                    break
                if prefix != keep and self._remove(prefix):
                    removed.append(prefix)
        finally:
            self._trimming.release()
        return removed

    def _remove(self, prefix: str) -> bool:
        lock = self._lock_for(prefix)
        if not lock.acquire(blocking=False):
            return False  # being copied here (or sharing a lock with one that is): not now
        path = self.root / prefix
        try:
            with self._lock:
                if self._pins.get(prefix) or time.monotonic() - self._used.get(prefix, -math.inf) < self.hold:
                    return False
            try:
                if path.is_symlink() or not path.is_dir():
                    raise FileNotFoundError(path)
                fd = os.open(path / COPY_MARKER, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                self.forget(prefix)  # gone, or made again by someone else as no copy of ours
                return False
            except OSError as exc:
                log.warning("could not remove the local copy of %s: %s", prefix, exc)
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no process is copying it
                if time.time() - path.stat().st_mtime < self.hold:
                    return False  # used by another process on the same cache
                aside = path.with_name(f".{path.name}{_REMOVING}{os.getpid()}-{threading.get_ident()}")
                os.rename(path, aside)  # out of view at once; a copy asked for again is made afresh
            except BlockingIOError:
                return False
            except FileNotFoundError:
                self.forget(prefix)
                return False
            except OSError as exc:
                log.warning("could not remove the local copy of %s: %s", prefix, exc)
                return False
            finally:
                os.close(fd)
            self.forget(prefix)
        finally:
            lock.release()
        shutil.rmtree(aside, ignore_errors=True)
        log.info("removed the local copy of %s (the copies passed STORE_CACHE_MAX)", prefix)
        return True

    def _scans(self, every: float) -> None:
        while True:
            try:
                self.scan()
                self.scanned.set()
                self.trim()
            except Exception:  # noqa: BLE001 - a background thread: logged, tried again next time
                log.exception("scanning the local copies under %s failed", self.root)
            time.sleep(every)

    def scan(self) -> None:
        """Find the copies under ``root`` (``storage.SNAPSHOT_DIR_GLOB`` with ``COPY_MARKER``):
        count the ones not known here (the oldest first in line), forget known ones that are gone,
        and delete what a removal cut short left."""
        with self._lock:
            known = set(self._sizes)
        found = []
        for path in self.root.glob(SNAPSHOT_DIR_GLOB):
            if path.name.startswith(".") and _REMOVING in path.name:
                shutil.rmtree(path, ignore_errors=True)  # set aside by a removal that did not finish
                continue
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink() and (path / COPY_MARKER).is_file():
                    found.append((path.stat().st_mtime, path.relative_to(self.root).as_posix()))
        seen = {prefix for _, prefix in found}
        measured = [(mtime, prefix, _tree_bytes(self.root / prefix)) for mtime, prefix in found if prefix not in known]
        with self._lock:
            for prefix in [p for p in self._sizes if p not in seen and not (self.root / p).is_dir()]:
                self.total -= self._sizes.pop(prefix)  # removed by someone else
                self._used.pop(prefix, None)
            for _, prefix, size in sorted(measured, reverse=True):  # the oldest end up first
                if prefix in self._sizes or not (self.root / prefix / COPY_MARKER).is_file():
                    continue  # used here since, or removed since
                self._sizes[prefix] = size
                self._sizes.move_to_end(prefix, last=False)
                self.total += size


class StoreUnavailable(OSError):
    """The store did not answer (refused, timed out, 5xx after its retries); ``str()`` says which
    store and what failed. Worth retrying later; nothing was lost."""


@dataclass(frozen=True, order=True)
class StoredFile:
    """One object: ``key`` (relative to the store's root, ``/``-separated) and ``size`` in bytes."""

    key: str
    size: int


def check_key(key: str) -> str:
    """``key`` if it is a relative ``/``-separated path with no empty, ``.`` or ``..`` segment and
    no NUL or backslash; else ValueError (what a hostile file name would need to leave the tree)."""
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or "\0" in key or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not an archive key: {key!r}")
    return key


class ArchiveStore:
    """The archive's files (see the module docstring).

    Args:
        store: an obstore store rooted at the archive's root.
        name: how messages name it (``DATA_DIR /data`` or ``s3://bucket/prefix``), never credentials.
        local_root: the directory, when the store is the local disk: there executors write in
            place and nothing moves (``upload_tree`` from inside it is a no-op).
        cache_limit: bytes of ``local_copy``'s copies of a bucket kept under each cache root
            (``STORE_CACHE_MAX``; 0: no limit; ``LocalCopies``); nothing for the local store.
        cache_hold: seconds a copy stays after its last use whatever the limit (``CACHE_HOLD``).
        cache_rescan: seconds between scans for other processes' copies (None: no scanning thread;
            ``LocalCopies.scan`` when called).
    """

    def __init__(
        self,
        store: Any,
        name: str,
        local_root: Path | None = None,
        cache_limit: int = 0,
        cache_hold: float = CACHE_HOLD,
        cache_rescan: float | None = CACHE_RESCAN,
    ) -> None:
        self.store = store
        self.name = name
        self.local_root = local_root
        self.cache_limit = cache_limit
        self.cache_hold = cache_hold
        self.cache_rescan = cache_rescan
        self._locks = [threading.Lock() for _ in range(64)]  # one prefix is copied by one thread
        self._fresh: dict[str, float] = {}
        self._copies: dict[Path, LocalCopies] = {}

    @property
    def is_remote(self) -> bool:
        """True for a bucket: files must be moved to and from it; False for the data dir itself."""
        return self.local_root is None

    @classmethod
    def from_settings(cls, settings: Any) -> ArchiveStore:
        """The store ``STORE_URL`` names (``from_url``), for a ``Settings``: one instance per
        process for the same URL, data dir and credentials (the UI's two apps and the services in
        one process share its local copies and their locks).

        Raises:
            ValueError: as ``from_url``.
        """
        limit = settings.store_cache_max
        key = (settings.store_url, str(settings.data_dir), str(limit), *(os.environ.get(k, "") for k in CREDENTIAL_ENV))
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = cls.from_url(settings.store_url, settings.data_dir, cache_limit=limit)
            return _SHARED[key]

    @classmethod
    def local(cls, data_dir: Path) -> ArchiveStore:
        """The data dir itself (the default)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        root = data_dir.resolve()
        return cls(LocalStore(str(root)), f"DATA_DIR {root}", root)

    @classmethod
    def from_url(cls, url: str, data_dir: Path, cache_limit: int = 0) -> ArchiveStore:
        """``""`` or ``file:`` → ``local(data_dir)``; ``s3://bucket[/prefix][?endpoint=http://host:port&region=r]``
        → that bucket. Credentials come from the environment as AWS tools read them
        (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), never from the URL;
        an ``http://`` endpoint (a store on the LAN) is allowed because it is named explicitly.
        ``cache_limit``: as the constructor's, for a bucket.

        Raises:
            ValueError: another scheme, no bucket, or credentials in the URL.
        """
        parts = urlsplit(url)
        if parts.scheme in ("", "file"):
            if parts.path.strip("/") and Path(parts.path).resolve() != data_dir.resolve():
                raise ValueError(f"STORE_URL={url!r}: the local store is DATA_DIR itself; set DATA_DIR to that path")
            return cls.local(data_dir)
        if parts.scheme != "s3" or not parts.hostname:
            raise ValueError(f"STORE_URL must be file: or s3://bucket[/prefix], not {url!r}")
        if parts.username or parts.password:
            raise ValueError("STORE_URL must not hold credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        prefix = parts.path.strip("/") or None
        config: S3Config = {"region": query.get("region", os.environ.get("AWS_REGION", "us-east-1"))}
        endpoint = store_endpoint(url)
        if endpoint:
            config["endpoint"] = endpoint
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            config["access_key_id"] = os.environ["AWS_ACCESS_KEY_ID"]
        if os.environ.get("AWS_SECRET_ACCESS_KEY"):
            config["secret_access_key"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        if os.environ.get("AWS_SESSION_TOKEN"):
            config["session_token"] = os.environ["AWS_SESSION_TOKEN"]
        store = S3Store(
            parts.hostname,
            prefix=prefix,
            config=config,
            client_options={"allow_http": endpoint.startswith("http://"), "connect_timeout": timedelta(seconds=5)},
            retry_config={"max_retries": 10, "retry_timeout": RETRY_TIMEOUT},
        )
        return cls(store, f"s3://{parts.hostname}/{prefix or ''}", cache_limit=cache_limit)

    # --- one object

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` (whole or not at all) to ``key``, replacing what was there. On the local
        store: ``storage.write_atomic`` (a private temp file, fsync, rename), as Boxcar has always
        written its own files there."""
        check_key(key)
        if self.local_root is not None:
            try:
                write_atomic(self.local_root / key, data)
            except OSError as exc:
                raise StoreUnavailable(f"{self.name}: put {key} failed: {exc}") from exc
            return
        self._call("put", key, lambda: obstore.put(self.store, key, data))

    def put_file(self, key: str, path: Path) -> None:
        """Write the file at ``path`` to ``key`` (streamed; multipart above 5 MiB on S3)."""
        self._call("put", key, lambda: obstore.put(self.store, check_key(key), path))

    def get_bytes(self, key: str) -> bytes:
        """The whole object. Raises FileNotFoundError when there is none."""
        return bytes(self._call("get", key, lambda: obstore.get(self.store, check_key(key)).bytes()))

    def iter_bytes(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The object in chunks of up to ``chunk`` bytes (a large WARC or video is never held
        whole). Raises FileNotFoundError when there is none."""
        result = self._call("get", key, lambda: obstore.get(self.store, check_key(key)))
        for buffer in self._iterate(result.stream(min_chunk_size=chunk), key, "get"):
            yield bytes(buffer)

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None when there is none."""
        try:
            return int(self._call("head", key, lambda: obstore.head(self.store, check_key(key)))["size"])
        except FileNotFoundError:
            return None

    # --- many objects

    def list(self, prefix: str) -> list[StoredFile]:
        """Every object under the directory ``prefix`` (``a/b`` lists ``a/b/…``, not ``a/bc``),
        sorted by key."""
        check_key(prefix)
        found = []
        stream = self._call("list", prefix, lambda: obstore.list(self.store, prefix + "/", chunk_size=1000))
        for batch in self._iterate(stream, prefix):
            found += [StoredFile(meta["path"], int(meta["size"])) for meta in batch]
        return sorted(f for f in found if f.key.startswith(prefix + "/"))

    def delete_tree(self, prefix: str) -> int:
        """Delete every object under the directory ``prefix``; returns how many."""
        keys = [f.key for f in self.list(prefix)]
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            self._call("delete", prefix, lambda batch=batch: obstore.delete(self.store, batch))
        return len(keys)

    def upload_tree(self, local_dir: Path, prefix: str, only: Iterable[str] | None = None) -> tuple[int, int]:
        """Put every file under ``local_dir`` (or under its subdirectories ``only``, e.g. the
        plugin dirs of one task) at ``prefix/<relative path>``; returns ``(files, bytes)``.

        A symlink (to a file, or a linked directory on the way) is stored as a copy of its target
        when the target is inside ``local_dir`` and left out otherwise (a hook's link must not carry
        a host file into the archive). A file whose name cannot be a key (a backslash, bytes that
        are not UTF-8) is left out and logged, not allowed to fail the rest. Safe to repeat; from
        inside the local store's own root it writes nothing (the files are there).
        """
        check_key(prefix)
        local_dir = local_dir.resolve()
        if self.local_root is not None and local_dir == (self.local_root / prefix).resolve():
            return 0, 0
        roots = [local_dir / name for name in only] if only is not None else [local_dir]
        files = size = 0
        for root in roots:
            for path in _files_under(root, local_dir):
                if path.parent == local_dir and path.name == COPY_MARKER:
                    continue  # the mark of a local copy, not a file of the archive
                key = f"{prefix}/{path.relative_to(local_dir).as_posix()}"
                try:
                    key.encode("utf-8")
                    check_key(key)
                except (ValueError, UnicodeError):
                    log.warning("%s: not stored, its name cannot be a key: %r", self.name, key)
                    continue
                self.put_file(key, path)
                files += 1
                size += path.stat().st_size
        return files, size

    def download_tree(self, prefix: str, local_dir: Path) -> int:
        """Make ``local_dir`` hold every object under ``prefix`` (at ``local_dir/<relative path>``,
        directories made as needed): objects whose local copy has their size and modification time
        are skipped, others written whole (a staged file renamed into place) and given the object's
        time. Returns how many files were written. Keys that would leave ``local_dir`` are refused
        (ValueError). From the local store into its own root it writes nothing."""
        return self._download(prefix, local_dir)[0]

    def _download(self, prefix: str, local_dir: Path) -> tuple[int, int]:
        """``download_tree``'s work: (files written, bytes of every object listed under ``prefix``;
        0, 0 from the local store into its own root)."""
        check_key(prefix)
        if self.local_root is not None and local_dir.resolve() == (self.local_root / prefix).resolve():
            return 0, 0
        count = listed = 0
        for key, size, stamp in self._entries(prefix):
            relative = PurePosixPath(key[len(prefix) + 1 :])
            check_key(str(relative))
            if str(relative) == COPY_MARKER:
                continue  # never a file of the archive: it would make an archive's own dir a copy
            listed += size
            target = local_dir.joinpath(*relative.parts)
            try:
                known = target.stat()
                if known.st_size == size and int(known.st_mtime) == int(stamp):
                    continue
            except FileNotFoundError:
                pass
            target.parent.mkdir(parents=True, exist_ok=True)
            # a temp file of its own: two readers of one snapshot (two apps, two processes on one
            # cache) each write a whole file and the last rename wins
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    for chunk in self.iter_bytes(key):
                        out.write(chunk)
                os.utime(tmp, (stamp, stamp))
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            count += 1
        return count, listed

    def local_copy(self, prefix: str, cache_root: Path, max_age: float = 2.0) -> Path:
        """A local directory holding the directory ``prefix`` (a snapshot's files), for code that
        works on paths (serving with byte ranges, WACZ exports): on the local store the directory
        itself; on a bucket ``cache_root/prefix``, brought up to date with ``download_tree`` unless
        that was done less than ``max_age`` seconds ago (a page and its many files cost one listing).
        Files deleted from the bucket stay in the copy. Copies past ``cache_limit`` bytes are
        removed, least recently used first (``LocalCopies``); code that needs several copies for
        longer than ``cache_hold`` takes them inside ``pinned``.

        Raises:
            StoreUnavailable: the store did not answer, or (rarely) the copy kept being removed
                while it was made: either way, try again later.
        """
        check_key(prefix)
        if self.local_root is not None:
            return self.local_root / prefix
        target = cache_root / prefix
        copies = self.local_copies(cache_root)
        with self._locks[hash(prefix) % len(self._locks)]:
            held = self._hold_copy(target)  # None: the data dir's own archive, never a copy
            try:
                size = None  # unchanged: refreshed less than max_age ago
                if time.monotonic() - self._fresh.get(prefix, -math.inf) >= max_age:
                    # the copy's size from the listing (files the bucket no longer has, which stay
                    # in the copy, are not counted)
                    size = self._download(prefix, target)[1]
                    if len(self._fresh) > 4096:
                        self._fresh.clear()
                    self._fresh[prefix] = time.monotonic()
            finally:
                if held is not None:
                    os.close(held)
            copies.use(prefix, size)
            pinned = _PINNED.get()
            if pinned is not None:
                copies.pin(prefix)
                pinned.append((copies, prefix))
        if pinned is None:
            self._trim(copies, keep=prefix)
        return target

    @staticmethod
    def _hold_copy(target: Path) -> int | None:
        """Make ``target`` a copy if it is not there yet (the directory and its ``COPY_MARKER``
        first, so one cut short by a crash is still a copy), set its mtime (in use) and return a
        file descriptor holding a shared ``flock`` on its marker, which keeps any process's removal
        away until it is closed; None for a directory that was there without a marker (never a
        copy: left as it is). A removal that renamed the copy away while we waited for the lock
        makes us start again with a new one (``StoreUnavailable`` after three, a try-again-later
        answer: only removals in a loop, of a copy touched a moment ago, could do that)."""
        for _ in range(3):
            if not os.path.lexists(target):
                target.mkdir(parents=True, exist_ok=True)
                (target / COPY_MARKER).touch()
            marker = target / COPY_MARKER
            try:
                fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                if target.is_dir() and not target.is_symlink():
                    return None  # the data dir's own archive
                continue  # removed meanwhile: make it again
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a removal renames it
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(marker))
            except FileNotFoundError:
                same = False
            if same:
                with contextlib.suppress(OSError):
                    os.utime(target)
                return fd
            os.close(fd)  # renamed away by a removal: a new copy
        raise StoreUnavailable(f"the local copy {target} kept being removed while it was made; try again")

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Inside, the copies ``local_copy`` hands out (in this thread or task) are not removed,
        however long the block takes or large they are in all: a WACZ export of many snapshots
        collects them all before it packs them. Their mtimes are kept fresh meanwhile, so other
        processes' trims leave them alone too. On the way out the caches are trimmed."""
        if _PINNED.get() is not None:  # inside another: that one holds them
            yield
            return
        taken: list[tuple[LocalCopies, str]] = []
        token = _PINNED.set(taken)
        done = threading.Event()

        def keep_fresh() -> None:
            while not done.wait(max(self.cache_hold / 3, 1.0)):
                for copies, prefix in list(taken):
                    with contextlib.suppress(OSError):
                        os.utime(copies.root / prefix)

        keeper = threading.Thread(target=keep_fresh, name="store-cache-pins", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()
            _PINNED.reset(token)
            for copies, prefix in taken:
                copies.unpin(prefix)
            for copies in {id(c): c for c, _ in taken}.values():
                self._trim(copies, keep=None)

    def forget_copy(self, prefix: str) -> None:
        """The local copies of ``prefix`` are gone (a snapshot deleted): stop counting them and
        copy afresh when asked for again."""
        with _SHARED_LOCK:
            every = list(self._copies.values())
        for copies in every:
            copies.forget(prefix)
        self._fresh.pop(prefix, None)

    def local_copies(self, cache_root: Path) -> LocalCopies:
        """The bookkeeping of ``local_copy``'s copies under ``cache_root`` (one per root, made on
        first use; with a limit, its scans of what is there start then)."""
        with _SHARED_LOCK:
            copies = self._copies.get(cache_root)
            if copies is None:
                copies = LocalCopies(
                    cache_root,
                    self.cache_limit,
                    self.cache_hold,
                    lambda p: self._locks[hash(p) % len(self._locks)],
                    self.cache_rescan,
                )
                self._copies[cache_root] = copies
            return copies

    def _trim(self, copies: LocalCopies, keep: str | None) -> None:
        for prefix in copies.trim(keep):
            self._fresh.pop(prefix, None)

    def read_inside(self, key: str, root: str, limit: int | None = None) -> bytes:
        """Up to ``limit`` bytes (all when None) of the object ``key``, which must lie under the
        directory ``root`` (e.g. a snapshot's plugin dir). On the local store the file is resolved
        first, so a symlink a hook planted that leads out of ``root`` reads as missing.

        Raises:
            FileNotFoundError: no such file, or one outside ``root``.
            StoreUnavailable: the store did not answer.
        """
        check_key(key), check_key(root)
        if not key.startswith(root + "/"):
            raise FileNotFoundError(f"{self.name}: {key} is not under {root}")
        if self.local_root is not None:
            path = (self.local_root / key).resolve()
            if not path.is_relative_to((self.local_root / root).resolve()) or not path.is_file():
                raise FileNotFoundError(f"{self.name}: no {key}")
            with open(path, "rb") as fh:
                return fh.read(-1 if limit is None else limit)
        data = self.get_bytes(key)
        return data if limit is None else data[:limit]

    def _entries(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        """``(key, size, modification time in epoch seconds)`` of each object under ``prefix``."""
        stream = self._call("list", prefix, lambda: obstore.list(self.store, prefix + "/", chunk_size=1000))
        for batch in self._iterate(stream, prefix):
            for meta in batch:
                if meta["path"].startswith(prefix + "/"):
                    yield meta["path"], int(meta["size"]), meta["last_modified"].timestamp()

    # --- errors

    def _call(self, verb: str, key: str, call: Any) -> Any:
        try:
            return call()
        except (FileNotFoundError, NotFoundError) as exc:
            raise FileNotFoundError(f"{self.name}: no {key}") from exc
        except BaseError as exc:
            raise StoreUnavailable(f"{self.name}: {verb} {key} failed: {_first_line(exc)}") from exc

    def _iterate(self, stream: Any, key: str, verb: str = "list") -> Iterator[Any]:
        """``stream``'s items, a failure part-way raised as ``StoreUnavailable``."""
        while True:
            try:
                batch = next(stream)
            except StopIteration:
                return
            except BaseError as exc:
                raise StoreUnavailable(f"{self.name}: {verb} {key} failed: {_first_line(exc)}") from exc
            yield batch


def _files_under(root: Path, top: Path) -> Iterator[Path]:
    """Regular files under ``root`` (itself one) whose real path is inside ``top`` (``top``
    resolved), sorted; nothing when ``root`` does not exist. A symlink to a file inside ``top``
    counts; anything reached through a link out of ``top`` (a file, or a linked directory) does not."""
    if root.is_file():
        candidates = [root]
    elif root.is_dir():
        candidates = sorted(p for p in root.rglob("*") if p.is_file())
    else:
        candidates = []
    for path in candidates:
        if not path.resolve().is_relative_to(top):
            continue
        yield path


def _tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (links not followed); 0 when it is gone."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(directory, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"
