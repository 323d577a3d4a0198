"""The on-disk layout under ``DATA_DIR``, compatible with ArchiveBox 0.9.4 (fs_version 0.9.4).

::

    DATA_DIR/
      index.sqlite3                       embedded mode only
      archive/users/<user>/snapshots/<YYYYMMDD>/<host>/<snapshot_id>/<plugin>/...
      archive/users/<user>/crawls/<YYYYMMDD>/<host>/<crawl_id>/     CRAWL_DIR (crawl-level hooks)
      sources/<timestamp>-<crawl_id>.<ext>                          imported files, verbatim
      lib/                                                          ABXPKG_LIB_DIR
      logs/

Paths are built from ids, dates and a sanitised host name, never from the raw URL, so a long or
odd URL can't produce "file name too long" or escape the archive. Stored paths are relative to
``DATA_DIR`` so a data dir can be moved or mounted elsewhere.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import urlsplit

from boxcar.shared.quirks import internal_files

_UNSAFE = re.compile(r"[^a-z0-9._-]+")
MAX_HOST_COMPONENT = 120

#: Files a plugin writes into a snapshot dir for the executor's own use while a task runs, never
#: an archived artifact (``quirks``: the chrome plugin's browser session markers, which hold the
#: DevTools address): the executor deletes them when the task ends and the archive never serves them.
EXECUTOR_INTERNAL_FILES: dict[str, frozenset[str]] = internal_files()


def remove_executor_internal(snap_dir: Path, plugins: Iterable[str]) -> None:
    """Delete the ``EXECUTOR_INTERNAL_FILES`` of ``plugins`` from a snapshot dir, once the task
    that ran them has ended (only theirs: a sibling task of the same stage may still be using its
    own, e.g. the browser task while the fetch task ends)."""
    for plugin in set(plugins):
        for pattern in EXECUTOR_INTERNAL_FILES.get(plugin, ()):
            for path in (snap_dir / plugin).glob(pattern):
                if path.is_file() or path.is_symlink():
                    path.unlink(missing_ok=True)


def is_executor_internal(relpath: str) -> bool:
    """True for ``<plugin>/<name>`` (relative to a snapshot dir) in ``EXECUTOR_INTERNAL_FILES``."""
    plugin, _, name = relpath.replace("\\", "/").strip("/").partition("/")
    return any(fnmatchcase(name, pattern) for pattern in EXECUTOR_INTERNAL_FILES.get(plugin, ()))


def host_component(url: str) -> str:
    """Return the ``<host>`` path component for a URL: ``host`` or ``host_port``, sanitised.

    Follows ArchiveBox's ``<host[_port]|localhost|scheme>`` rule: a URL without a host gives its
    scheme. Only ``[a-z0-9._-]`` survive; the result is at most 120 characters.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if not host:
        host = (parts.scheme or "unknown").lower()
    elif port:
        host = f"{host}_{port}"
    host = _UNSAFE.sub("_", host).strip("._") or "unknown"
    return host[:MAX_HOST_COMPONENT]


def snapshot_dir(user: str, bookmarked_at: datetime, url: str, snapshot_id: str) -> str:
    """Relative path of a snapshot's output dir: ``archive/users/<user>/snapshots/<YYYYMMDD>/<host>/<id>``."""
    return "/".join(
        (
            "archive",
            "users",
            _safe_user(user),
            "snapshots",
            bookmarked_at.strftime("%Y%m%d"),
            host_component(url),
            snapshot_id,
        )
    )


#: ``snapshot_dir``'s paths as a glob pattern (relative to ``DATA_DIR`` or a copy of it): a
#: snapshot's directory is the 7th level below the root.
SNAPSHOT_DIR_GLOB = "archive/users/*/snapshots/*/*/*"


def crawl_dir(user: str, created_at: datetime, first_url: str, crawl_id: str) -> str:
    """Relative path of a crawl's dir (``CRAWL_DIR`` for crawl-scoped hooks)."""
    return "/".join(
        (
            "archive",
            "users",
            _safe_user(user),
            "crawls",
            created_at.strftime("%Y%m%d"),
            host_component(first_url),
            crawl_id,
        )
    )


def source_path(created_at: datetime, crawl_id: str, ext: str) -> str:
    """Relative path under ``sources/`` for an imported file kept verbatim."""
    ext = re.sub(r"[^a-z0-9]", "", ext.lower())[:10] or "txt"
    return f"sources/{created_at.strftime('%Y%m%d%H%M%S')}-{crawl_id}.{ext}"


def _safe_user(user: str) -> str:
    return _UNSAFE.sub("_", user.lower()).strip("._") or "system"


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same dir, fsync, then rename.

    Readers see the old file or the new one, never a torn write; two writers each produce a
    whole file and the last rename wins.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def display_path(path: str) -> str:
    """A file path as text that every message, row and log can carry.

    Paths from the file system may hold bytes that are not UTF-8 (wget names a file after a
    Latin-1 query, ``?q=H%F6he``, with the raw byte 0xF6); Python gives those as lone surrogates,
    which JSON encoders refuse. They become ``\\xNN`` escapes here; valid names are unchanged.
    """
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
