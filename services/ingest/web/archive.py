"""Serving archived files: ``/archive/{snapshot_id}/{path}``, safely.

Archived HTML is hostile content (DESIGN.md rule 7). Every file is looked up inside its
snapshot's directory only: the path may not hold ``..``, ``.``, empty or hidden segments, NUL or
backslashes, and the resolved file (after every symlink) must still be inside the directory, so
``../../index.sqlite3``, its ``%2e%2e`` spelling and a planted symlink to ``/etc/passwd`` are all a
404. Responses carry ``X-Content-Type-Options: nosniff`` and, for anything a browser could run
(HTML, SVG, XML, …), a ``Content-Security-Policy`` with ``sandbox`` chosen by
``ARCHIVE_SECURITY_MODE``:

- ``no-scripts`` (default): ``sandbox`` without ``allow-scripts``: nothing in the page runs;
- ``sandboxed-scripts``: scripts run, but in an opaque origin: no access to Boxcar's cookies,
  storage or pages, and requests they make are cross-site (SameSite cookies stay home);
- ``separate-origin``: files are served only on the archive origin (``ARCHIVE_PORT`` /
  ``ARCHIVE_ORIGIN``; the main origin redirects there), where pages get a real origin of their own
  (``allow-same-origin``) that is not Boxcar's.

PDFs are served without ``sandbox`` (Chromium refuses to show a PDF in a sandboxed document; PDF
scripts run inside the viewer, not with the page's origin).
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import select

from boxcar.ingest.access import Viewer, readable_snapshots
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.db import Database
from boxcar.shared.db.models import Snapshot
from boxcar.shared.settings import Settings
from boxcar.shared.storage import is_executor_internal

SNAPSHOT_ID = re.compile(r"^[0-9a-f]{32}$")
POLICIES = {
    "no-scripts": "sandbox allow-popups allow-popups-to-escape-sandbox; object-src 'none'",
    "sandboxed-scripts": "sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox allow-modals; "
    "object-src 'none'",
    "separate-origin": "sandbox allow-scripts allow-same-origin allow-forms allow-popups "
    "allow-popups-to-escape-sandbox allow-modals allow-downloads",
}
#: types served without a sandbox: they can't script a page (PDF: Chromium's viewer won't run sandboxed)
UNSANDBOXED = re.compile(
    r"^(image/(png|jpeg|gif|webp|avif|bmp|x-icon|vnd\.microsoft\.icon)|application/pdf|"
    r"audio/.*|video/.*|font/.*|application/(gzip|zip|octet-stream|warc|x-gzip))$"
)
TEXT_TYPES = {".txt", ".md", ".log", ".jsonl", ".csv", ".warc"}

mimetypes.add_type("application/warc", ".warc")
mimetypes.add_type("text/markdown", ".md")
mimetypes.add_type("application/x-ndjson", ".jsonl")


@dataclass(frozen=True)
class ArchivedFile:
    """A file to send: where it is, its content type and the headers that keep it harmless."""

    path: Path
    media_type: str
    headers: dict[str, str]


class ArchiveFiles:
    """Finds snapshot files for ``/archive/…`` and says how to serve them."""

    def __init__(self, db: Database, settings: Settings, store: ArchiveStore | None = None) -> None:
        """``store``: where the files are (default ``DATA_DIR`` itself); from a bucket a snapshot's
        files are served from a local copy under ``DATA_DIR`` (``ArchiveStore.local_copy``)."""
        self.db = db
        self.data_dir = settings.data_dir
        self.store = store or ArchiveStore.local(settings.data_dir)
        self.mode = settings.archive_security_mode
        self.public_reads = settings.public_reads
        self.operator_name = settings.archive_user

    def snapshot_dir(self, snapshot_id: str, viewer: Viewer) -> Path | None:
        """The snapshot's directory, resolved, when ``viewer`` may read the snapshot
        (``access.readable_snapshots``) and it exists inside ``DATA_DIR/archive``.

        Raises:
            StoreUnavailable: the files are in a bucket that does not answer (a 503).
        """
        if not SNAPSHOT_ID.match(snapshot_id):
            return None
        readable = readable_snapshots(viewer, self.public_reads, self.operator_name)
        with self.db.read() as s:
            output_dir = s.scalar(select(Snapshot.output_dir).where(Snapshot.id == snapshot_id, readable))
        if not output_dir:
            return None
        if not output_dir.startswith("archive/"):
            return None
        archive = (self.data_dir / "archive").resolve()
        try:
            path = self.store.local_copy(output_dir, self.data_dir).resolve()
        except ValueError:  # not a path inside the archive
            return None
        return path if path.is_relative_to(archive) and path != archive and path.is_dir() else None

    def find(self, snapshot_id: str, path: str, viewer: Viewer) -> ArchivedFile | None:
        """The file at ``path`` in the snapshot's directory (a directory gives its ``index.html``),
        or None: no such snapshot (that ``viewer`` may read) or file, or a path that leaves the
        directory in any way."""
        parts = path.split("/")
        if any(p in ("", ".", "..") or p.startswith(".") or "\x00" in p or "\\" in p for p in parts):
            return None
        if is_executor_internal(path):
            return None  # the browser's DevTools address and other executor state: never served
        root = self.snapshot_dir(snapshot_id, viewer)
        if root is None:
            return None
        target = root.joinpath(*parts)
        try:
            resolved = target.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if not resolved.is_relative_to(root):
            return None  # a symlink (or a resolved ..) pointing out of the snapshot
        if is_executor_internal(resolved.relative_to(root).as_posix()):
            return None  # ... or at an executor-internal file
        if resolved.is_dir():
            resolved = resolved / "index.html"
            if not resolved.is_file() or resolved.is_symlink():
                return None
        if not resolved.is_file():
            return None
        return ArchivedFile(resolved, *self.describe(resolved))

    def describe(self, path: Path) -> tuple[str, dict[str, str]]:
        """Content type and safety headers of an archived file."""
        name = path.name.lower()
        if name.endswith(".warc.gz"):
            media_type = "application/warc"  # served as is: the browser must not gunzip it
        elif path.suffix.lower() in TEXT_TYPES:
            media_type = "text/plain; charset=utf-8"
        else:
            media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        headers = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
        if not UNSANDBOXED.match(media_type.split(";")[0]):
            headers["Content-Security-Policy"] = POLICIES[self.mode]
        if name.endswith((".warc", ".warc.gz")):
            headers["Content-Disposition"] = f'attachment; filename="{path.name}"'
        return media_type, headers


def archive_origin(settings: Settings, request_url: str) -> str:
    """Where archived files and replay are served on their own origin ("" when nowhere):
    ``ARCHIVE_ORIGIN``, else this request's host name on ``ARCHIVE_PORT``."""
    if settings.archive_origin:
        return settings.archive_origin.rstrip("/")
    if not settings.archive_port:
        return ""
    parts = urlsplit(request_url)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme or 'http'}://{host}:{settings.archive_port}"
