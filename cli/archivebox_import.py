"""Import an ArchiveBox collection (``boxcar import-archivebox PATH``) without capturing anything again.

Reads ArchiveBox 0.7.x data dirs (``index.sqlite3`` with ``core_snapshot``/``core_archiveresult``
and ``archive/<timestamp>/``) and 0.8/0.9 ones (``plugin``/``hook_name``/``output_files`` columns,
``archive/users/<user>/snapshots/<YYYYMMDD>/<domain>/<id>/<plugin>/…``), and writes what it finds
as Boxcar rows and files:

- one sealed Crawl per ArchiveBox crawl (0.8/0.9) or one for the whole collection (0.7, named
  by its first snapshot), owned by ``user``; every Snapshot sealed, with its URL, title, tags,
  bookmark date and depth;
- every ArchiveResult with its status, output and notes; 0.7's extractor names mapped to the
  abx-plugins names Boxcar runs (``archive_org`` → ``archivedotorg``, ``media`` → ``ytdlp``), its
  files moved from the flat 0.7 snapshot dir into ``<plugin>/`` dirs as Boxcar lays them out;
- the files copied (or hard-linked with ``link=True``; a copy where a link can't cross file systems)
  into ``snapshot_dir(user, …)``, then each snapshot's ``index.jsonl`` and search document written.

The source is only read: its database is copied (with its WAL) to a temporary dir and opened
there, its files are opened for reading or hard-linked. Ids are derived from the ArchiveBox ids
(uuid5), so a second run finds what it imported before and adds only what is new. What can't be
mapped (an unknown extractor, an unfinished result, a file that is missing or points outside the
collection) is left out and listed, with the reason, in ``ImportReport.problems``.
"""

from __future__ import annotations

import json
import mimetypes
import os
import re
import shutil
import sqlite3
import tempfile
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database, attach_tags
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot, Status, dedup_key, url_hash
from boxcar.shared.storage import crawl_dir, snapshot_dir
from boxcar.shared.urls import url_domain

#: namespace of the ids derived from ArchiveBox ids (stable across runs)
NAMESPACE = uuid.UUID("6c0b7a52-4f1e-5b1c-9a57-0b0c4a2c1d29")

#: ArchiveBox 0.7 extractor → Boxcar (abx-plugins) plugin
EXTRACTORS_07 = {
    "title": "title",
    "favicon": "favicon",
    "headers": "headers",
    "wget": "wget",
    "singlefile": "singlefile",
    "pdf": "pdf",
    "screenshot": "screenshot",
    "dom": "dom",
    "readability": "readability",
    "mercury": "mercury",
    "htmltotext": "htmltotext",
    "git": "git",
    "media": "ytdlp",
    "archive_org": "archivedotorg",
}
#: where a 0.7 extractor left its files in the flat snapshot dir: names (a file, or a dir whose
#: contents move into the plugin dir); wget's are "everything else" (``_wget_files_07``)
FILES_07: dict[str, tuple[str, ...]] = {
    "favicon": ("favicon.ico",),
    "headers": ("headers.json",),
    "singlefile": ("singlefile.html",),
    "pdf": ("output.pdf",),
    "screenshot": ("screenshot.png",),
    "dom": ("output.html",),
    "readability": ("readability/",),
    "mercury": ("mercury/",),
    "htmltotext": ("htmltotext.txt",),
    "git": ("git/",),
    "media": ("media/",),
    "archive_org": ("archive.org.txt",),
}
#: files of a 0.7 snapshot dir that are ArchiveBox's own index, not any extractor's output
INDEX_FILES_07 = frozenset({"index.json", "index.html"})
PLUGIN_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
FINAL_STATUSES = ("succeeded", "failed", "skipped", "noresults")
STATUS_ALIASES = {"success": "succeeded", "succeded": "succeeded", "noresult": "noresults"}


def derived_id(*parts: str) -> str:
    """A 32-hex id derived from ``parts`` (the same parts give the same id on every run)."""
    return uuid.uuid5(NAMESPACE, "\n".join(parts)).hex


# ----------------------------------------------------------------------------- reading the source


@dataclass
class SourceResult:
    plugin: str  # Boxcar's name
    extractor: str  # ArchiveBox's name
    hook_name: str
    status: str
    output_str: str
    notes: str
    start_ts: datetime | None
    end_ts: datetime | None
    #: path relative to the plugin dir in Boxcar → absolute source path
    files: dict[str, Path] = field(default_factory=dict)
    output_json: Any = None
    recovered: bool = False


@dataclass
class SourceSnapshot:
    id: str  # ArchiveBox's
    url: str
    title: str | None
    timestamp: str
    bookmarked_at: datetime
    created_at: datetime
    downloaded_at: datetime | None
    depth: int
    crawl_key: str  # ArchiveBox crawl id, or "" (0.7: one crawl for the collection)
    tags: list[str]
    source_dir: Path | None
    results: list[SourceResult] = field(default_factory=list)


@dataclass
class ImportReport:
    """What an import did (or, dry, would do), and what it could not map."""

    version: str = ""
    snapshots_found: int = 0
    snapshots_new: int = 0
    snapshots_existing: int = 0
    results_new: int = 0
    files: int = 0
    bytes: int = 0
    linked: int = 0
    copied: int = 0
    link_fallback: str = ""
    crawls_new: int = 0
    results_by_plugin: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    snapshot_ids: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def as_dict(self) -> dict[str, Any]:
        return {
            "archivebox_version": self.version,
            "snapshots_found": self.snapshots_found,
            "snapshots_new": self.snapshots_new,
            "snapshots_existing": self.snapshots_existing,
            "crawls_new": self.crawls_new,
            "results_new": self.results_new,
            "results_by_plugin": dict(sorted(self.results_by_plugin.items())),
            "files": self.files,
            "bytes": self.bytes,
            "linked": self.linked,
            "copied": self.copied,
            "link_fallback": self.link_fallback,
            "not_mapped": self.problems,
        }


def _dt(value: Any) -> datetime | None:
    """An ArchiveBox (Django, USE_TZ) datetime column: UTC, stored naive or with an offset."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(float(value), UTC)
    text = str(value).replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _hex(value: Any) -> str:
    return str(value).replace("-", "").lower()


class SourceCollection:
    """An ArchiveBox data dir, read only: its database is copied (with WAL) to a temp dir first."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.db_path = self.root / "index.sqlite3"
        if not self.db_path.is_file():
            raise FileNotFoundError(f"{root} is not an ArchiveBox data dir (no index.sqlite3)")
        self._tmp = tempfile.TemporaryDirectory(prefix="boxcar-abx-")
        copy = Path(self._tmp.name) / "index.sqlite3"
        for suffix in ("", "-wal"):
            src = Path(f"{self.db_path}{suffix}")
            if src.exists():
                shutil.copyfile(src, f"{copy}{suffix}")
        self.conn = sqlite3.connect(copy)
        self.conn.row_factory = sqlite3.Row
        self.columns = {
            table: {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            for table in ("core_snapshot", "core_archiveresult", "crawls_crawl", "core_tag")
        }
        if not self.columns["core_snapshot"]:
            raise ValueError(f"{self.db_path} has no core_snapshot table: not an ArchiveBox index")
        self.modern = "plugin" in self.columns["core_archiveresult"]
        self.version = self._version()

    def close(self) -> None:
        self.conn.close()
        self._tmp.cleanup()

    def _version(self) -> str:
        """The layout's ArchiveBox version, from the schema (0.9 has ``fs_version`` rows)."""
        if "fs_version" in self.columns["core_snapshot"]:
            row = self.conn.execute("SELECT max(fs_version) FROM core_snapshot").fetchone()
            return str(row[0] or "0.9") if row else "0.9"
        return "0.8" if self.modern else "0.7"

    def _tags(self) -> dict[str, list[str]]:
        tags: dict[str, list[str]] = defaultdict(list)
        for row in self.conn.execute(
            "SELECT st.snapshot_id, t.name FROM core_snapshot_tags st"
            " JOIN core_tag t ON t.id = st.tag_id ORDER BY t.name"
        ):
            tags[_hex(row[0])].append(row[1])
        return tags

    def _users(self) -> dict[str, str]:
        if not self.columns["crawls_crawl"]:
            return {}
        return {
            _hex(row[0]): row[1]
            for row in self.conn.execute(
                "SELECT c.id, u.username FROM crawls_crawl c LEFT JOIN auth_user u ON u.id = c.created_by_id"
            )
        }

    def snapshot_dir_of(self, snap_id: str, timestamp: str, owner: str | None) -> Path | None:
        """The snapshot's dir in the collection: 0.9's per-user layout, else ``archive/<timestamp>``."""
        archive = self.root / "archive"
        candidates: list[Path] = []
        users = [owner] if owner else []
        users += [p.name for p in sorted((archive / "users").glob("*")) if p.name != owner]
        for user in users:
            candidates += sorted((archive / "users" / user / "snapshots").glob(f"*/*/{snap_id}"))
        if timestamp:
            candidates.append(archive / timestamp)
        for candidate in candidates:
            if candidate.is_dir():
                resolved = candidate.resolve()
                if resolved.is_relative_to(self.root):
                    return resolved
        return None

    def snapshots(self, report: ImportReport) -> Iterator[SourceSnapshot]:
        cols = self.columns["core_snapshot"]
        tags = self._tags()
        owners = self._users()

        def col(name: str, *fallbacks: str) -> str:
            for c in (name, *fallbacks):
                if c in cols:
                    return c
            return "NULL"

        query = (
            f"SELECT id, url, timestamp, title, {col('bookmarked_at', 'added')} AS bookmarked, "
            f"{col('created_at', 'added')} AS created, {col('downloaded_at', 'updated')} AS downloaded, "
            f"{col('depth')} AS depth, {col('crawl_id')} AS crawl_id FROM core_snapshot ORDER BY 5, timestamp"
        )
        results = self._results(report)
        for row in self.conn.execute(query):
            sid = _hex(row["id"])
            crawl_key = _hex(row["crawl_id"]) if row["crawl_id"] else ""
            bookmarked = _dt(row["bookmarked"]) or _dt(row["timestamp"]) or utcnow()
            snap = SourceSnapshot(
                id=sid,
                url=row["url"],
                title=row["title"] or None,
                timestamp=str(row["timestamp"] or ""),
                bookmarked_at=bookmarked,
                created_at=_dt(row["created"]) or bookmarked,
                downloaded_at=_dt(row["downloaded"]),
                depth=int(row["depth"] or 0),
                crawl_key=crawl_key,
                tags=tags.get(sid, []),
                source_dir=self.snapshot_dir_of(sid, str(row["timestamp"] or ""), owners.get(crawl_key)),
            )
            if snap.source_dir is None:
                report.problem(
                    f"snapshot {sid} ({snap.url}): no snapshot dir in the collection; imported without files"
                )
            rows = results.get(sid, [])
            snap.results = (
                self._modern_results(snap, rows, report) if self.modern else self._legacy_results(snap, rows, report)
            )
            yield snap

    def _results(self, report: ImportReport) -> dict[str, list[sqlite3.Row]]:
        out: dict[str, list[sqlite3.Row]] = defaultdict(list)
        for row in self.conn.execute("SELECT * FROM core_archiveresult ORDER BY start_ts, id"):
            out[_hex(row["snapshot_id"])].append(row)
        return out

    # ---- 0.8/0.9: rows name abx-plugins plugins, files listed per result relative to <plugin>/

    def _modern_results(
        self, snap: SourceSnapshot, rows: list[sqlite3.Row], report: ImportReport
    ) -> list[SourceResult]:
        keys = rows[0].keys() if rows else []
        out: dict[tuple[str, str], SourceResult] = {}
        for row in rows:
            plugin = row["plugin"] or ""
            if not PLUGIN_NAME.fullmatch(plugin):  # it names a dir: nothing but a plugin name
                report.problem(f"snapshot {snap.id} ({snap.url}): plugin name {plugin!r} is not one: not imported")
                continue
            status = STATUS_ALIASES.get(row["status"], row["status"])
            if status not in FINAL_STATUSES:
                report.problem(
                    f"snapshot {snap.id} ({snap.url}): {plugin} result is {status!r} (unfinished): not imported"
                )
                continue
            files: dict[str, Path] = {}
            listed = json.loads(row["output_files"] or "{}") if "output_files" in keys else {}
            if isinstance(listed, list):  # index.jsonl's shape, just in case
                listed = {f.get("path", ""): f for f in listed if isinstance(f, dict)}
            for rel in listed:
                path = self._inside(snap, plugin, rel, report)
                if path is not None:
                    files[rel] = path
            output_json = row["output_json"] if "output_json" in keys else None
            result = SourceResult(
                plugin=plugin,
                extractor=plugin,
                hook_name=row["hook_name"] if "hook_name" in keys else "",
                status=status,
                output_str=row["output_str"] or "",
                notes=(row["notes"] if "notes" in keys else "") or "",
                start_ts=_dt(row["start_ts"]),
                end_ts=_dt(row["end_ts"]),
                files=files,
                output_json=json.loads(output_json) if isinstance(output_json, str) and output_json else None,
            )
            out[(result.plugin, result.hook_name)] = result  # one row per hook in Boxcar
        return list(out.values())

    def _inside(self, snap: SourceSnapshot, plugin: str, rel: str, report: ImportReport) -> Path | None:
        if snap.source_dir is None:
            return None
        base = snap.source_dir / plugin
        path = base / rel
        try:
            resolved = path.resolve()
        except OSError:
            resolved = path
        if not resolved.is_relative_to(self.root) or ".." in Path(rel).parts or Path(rel).is_absolute():
            report.problem(f"snapshot {snap.id}: {plugin}/{rel} points outside the collection: not imported")
            return None
        if not resolved.is_file():
            report.problem(f"snapshot {snap.id}: {plugin}/{rel} is listed but missing: not imported")
            return None
        return resolved

    # ---- 0.7: rows name extractors; files lie flat in archive/<timestamp>/

    def _legacy_results(
        self, snap: SourceSnapshot, rows: list[sqlite3.Row], report: ImportReport
    ) -> list[SourceResult]:
        latest: dict[str, sqlite3.Row] = {}
        for row in rows:  # ordered by start_ts: keep the newest success, else the newest
            ext = row["extractor"]
            status = STATUS_ALIASES.get(row["status"], row["status"])
            kept = latest.get(ext)
            if kept is not None:
                report.problem(
                    f"snapshot {snap.id}: an older {ext} result ({kept['status']}) superseded by a later one;"
                    " Boxcar keeps one per plugin"
                )
            if kept is None or status == "succeeded" or kept["status"] != "succeeded":
                latest[ext] = row
        out: list[SourceResult] = []
        claimed: set[str] = set()
        for ext, row in latest.items():
            plugin = EXTRACTORS_07.get(ext)
            if plugin is None:
                report.problem(f"snapshot {snap.id}: extractor {ext!r} has no Boxcar plugin: not imported")
                continue
            status = STATUS_ALIASES.get(row["status"], row["status"])
            if status not in FINAL_STATUSES:
                report.problem(f"snapshot {snap.id}: {ext} result is {status!r} (unfinished): not imported")
                continue
            files = self._files_07(snap, ext) if status == "succeeded" else {}
            claimed.update(str(p) for p in files.values())
            output = row["output"] or ""
            if ext == "wget" and status == "succeeded" and output and not output.startswith("wget/"):
                output = f"wget/{output}"
            out.append(
                SourceResult(
                    plugin=plugin,
                    extractor=ext,
                    hook_name="",
                    status=status,
                    output_str=output,
                    notes=output if status == "failed" else "",
                    start_ts=_dt(row["start_ts"]),
                    end_ts=_dt(row["end_ts"]),
                    files=files,
                )
            )
        # files an extractor wrote whose result ArchiveBox did not record (0.7.4 writes
        # htmltotext.txt without a row): imported as that plugin's result, and said so
        for ext, plugin in EXTRACTORS_07.items():
            if ext in latest or ext == "wget" or snap.source_dir is None:
                continue
            files = self._files_07(snap, ext)
            if files:
                report.problem(
                    f"snapshot {snap.id}: {ext} output on disk without an ArchiveResult row in ArchiveBox's index:"
                    f" imported as a succeeded {plugin} result"
                )
                out.append(
                    SourceResult(
                        plugin=plugin,
                        extractor=ext,
                        hook_name="",
                        status="succeeded",
                        output_str=f"{plugin}/{sorted(files)[0]}",
                        notes="recovered by boxcar import-archivebox: ArchiveBox recorded no result for these files",
                        start_ts=None,
                        end_ts=None,
                        files=files,
                        recovered=True,
                    )
                )
        return out

    def _files_07(self, snap: SourceSnapshot, ext: str) -> dict[str, Path]:
        if snap.source_dir is None:
            return {}
        src = snap.source_dir
        if ext == "wget":
            return self._wget_files_07(src)
        files: dict[str, Path] = {}
        for name in FILES_07.get(ext, ()):
            path = src / name.rstrip("/")
            if name.endswith("/") and path.is_dir():
                files.update(self._walk(path, path))
            elif path.is_file():
                files[path.name] = path
        return files

    def _wget_files_07(self, src: Path) -> dict[str, Path]:
        """wget's tree: the host dirs (``host+port/…``) and ``warc/``, i.e. every top-level entry
        that is no other extractor's and not ArchiveBox's index."""
        others = {n.rstrip("/") for names in FILES_07.values() for n in names} | INDEX_FILES_07
        files: dict[str, Path] = {}
        for entry in sorted(src.iterdir()):
            if entry.name in others or entry.name.startswith("."):
                continue
            if entry.is_dir():
                files.update(self._walk(entry, src))
            elif entry.is_file() and entry.suffix.lower() in (".html", ".htm"):
                files[entry.name] = entry  # wget saved a page at the top (rare)
        return files

    def _walk(self, top: Path, base: Path) -> dict[str, Path]:
        files: dict[str, Path] = {}
        for dirpath, _dirs, names in os.walk(top):
            for name in names:
                path = Path(dirpath) / name
                resolved = path.resolve()
                if path.is_symlink() and not resolved.is_relative_to(self.root):
                    continue
                if resolved.is_file():
                    files[str(path.relative_to(base))] = resolved
        return files


# ----------------------------------------------------------------------------- writing Boxcar's


class FilePlacer:
    """Copies (or hard-links) files into the archive, counting what it did."""

    def __init__(self, report: ImportReport, link: bool) -> None:
        self.report = report
        self.link = link

    def place(self, src: Path, dst: Path) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            dst.unlink()
        if self.link:
            try:
                os.link(src, dst)
                self.report.linked += 1
                return
            except OSError as exc:
                if not self.report.link_fallback:
                    self.report.link_fallback = f"hard links failed ({exc.strerror}): files were copied instead"
        shutil.copyfile(src, dst)
        shutil.copystat(src, dst)
        self.report.copied += 1


def _output_files(files: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {
        rel: {"size": path.stat().st_size, "mimetype": mimetypes.guess_type(rel)[0] or "application/octet-stream"}
        for rel, path in sorted(files.items())
    }


def _mimetypes(output_files: dict[str, dict[str, Any]]) -> str:
    sizes: Counter[str] = Counter()
    for meta in output_files.values():
        sizes[meta["mimetype"]] += meta["size"]
    return ",".join(m for m, _ in sizes.most_common())[:512]


def import_collection(
    db: Database | None,
    data_dir: Path,
    source: Path,
    *,
    user: str,
    link: bool = False,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    store: ArchiveStore | None = None,
) -> ImportReport:
    """Import the ArchiveBox collection at ``source`` into ``db``/``data_dir`` for ``user``.

    ``store``: where the archive's files live (``STORE_URL``; default ``data_dir``): from a bucket,
    each imported snapshot's files are put there after they were placed in ``data_dir`` and before
    its rows are written.

    Raises:
        StoreUnavailable: the bucket did not answer (the snapshots imported so far are complete;
            run the import again for the rest).

    With ``dry_run`` nothing is written (``db`` may be None: an archive that doesn't exist yet has
    nothing in it) and the report counts what a real run would import.
    """
    report = ImportReport()
    collection = SourceCollection(source)
    report.version = collection.version
    try:
        snaps = list(collection.snapshots(report))
    finally:
        collection.close()
    report.snapshots_found = len(snaps)
    ids = {s.id: derived_id("archivebox-snapshot", user, s.id) for s in snaps}
    existing: set[str] = set()
    if db is not None:
        try:
            with db.read() as s:
                all_ids = list(ids.values())
                for i in range(0, len(all_ids), 500):
                    existing.update(s.scalars(select(Snapshot.id).where(Snapshot.id.in_(all_ids[i : i + 500]))))
        except SQLAlchemyError:
            if not dry_run:
                raise  # a dry run against a database not made yet: nothing is there
    new = [s for s in snaps if ids[s.id] not in existing]
    report.snapshots_existing = len(snaps) - len(new)
    report.snapshots_new = len(new)
    for snap in new:
        report.results_new += len(snap.results)
        for r in snap.results:
            report.results_by_plugin[f"{r.plugin}:{r.status}"] += 1
            report.files += len(r.files)
            report.bytes += sum(p.stat().st_size for p in r.files.values())
    if dry_run or not new:
        return report
    assert db is not None
    store = store or ArchiveStore.local(data_dir)
    placer = FilePlacer(report, link)
    # 0.7 has no crawls and no collection id: its first snapshot (never changed by adding more)
    # names the collection's one crawl, so a copy or a moved collection maps to the same crawl
    first = min(snaps, key=lambda x: (x.bookmarked_at, x.timestamp, x.id)).id
    collection_key = f"archivebox-0.7:{first}"
    crawls: dict[str, str] = {}
    for done, snap in enumerate(new, 1):
        crawl_key = snap.crawl_key or collection_key
        crawl_id = derived_id("archivebox-crawl", user, crawl_key)
        if crawl_key not in crawls:
            crawls[crawl_key] = crawl_id
            _ensure_crawl(db, crawl_id, user, snap.url, source, collection.version, report)
        if _import_snapshot(db, data_dir, snap, ids[snap.id], crawl_id, user, placer, report, store):
            report.snapshot_ids.append(ids[snap.id])
        if progress:
            progress(done, len(new))
    with db.write() as s:
        for crawl_id in crawls.values():
            crawl = s.get(Crawl, crawl_id)
            if crawl is not None:
                count = s.scalar(select(func.count(Snapshot.id)).where(Snapshot.crawl_id == crawl_id))
                crawl.seed_count = crawl.seeded = int(count or 0)
    from boxcar.result_projector import fulltext, index

    for sid in report.snapshot_ids:
        index.write_index(db, store, sid)
    fulltext.index_snapshots(db, store, report.snapshot_ids)
    return report


def _ensure_crawl(
    db: Database, crawl_id: str, user: str, first_url: str, source: Path, version: str, report: ImportReport
) -> None:
    now = utcnow()
    with db.write() as s:
        if s.get(Crawl, crawl_id) is not None:
            return
        s.add(
            Crawl(
                id=crawl_id,
                created_at=now,
                modified_at=now,
                created_by=user,
                status=Status.SEALED,
                retry_at=None,
                seed_count=0,
                seeded=0,
                label=f"Imported from ArchiveBox {version}"[:256],
                notes=f"boxcar import-archivebox {source}",
                output_dir=crawl_dir(user, now, first_url, crawl_id),
            )
        )
    report.crawls_new += 1


def _import_snapshot(
    db: Database,
    data_dir: Path,
    snap: SourceSnapshot,
    snapshot_id: str,
    crawl_id: str,
    user: str,
    placer: FilePlacer,
    report: ImportReport,
    store: ArchiveStore,
) -> bool:
    """One snapshot's files (put in ``store`` when it is a bucket), then its rows; False when its
    URL is already in that crawl."""
    from boxcar.shared.messages import Seed

    try:
        canonical = Seed.parse(snap.url).url
    except Exception:  # an odd URL ArchiveBox accepted: keep it, hash it as it is
        canonical = snap.url
    hashed = url_hash(canonical)
    with db.read() as s:
        twin = s.scalar(select(Snapshot.id).where(Snapshot.crawl_id == crawl_id, Snapshot.url_hash == hashed))
    if twin is not None:
        report.problem(
            f"snapshot {snap.id} ({snap.url}): the same URL (canonically) is already snapshot {twin}"
            " of the crawl it maps to: not imported"
        )
        report.snapshots_new -= 1
        return False
    out_dir = snapshot_dir(user, snap.bookmarked_at, snap.url, snapshot_id)
    rows = []
    total = 0
    for r in snap.results:
        for rel, src in r.files.items():
            placer.place(src, data_dir / out_dir / r.plugin / rel)
        files = _output_files(r.files)
        size = sum(f["size"] for f in files.values())
        total += size
        rows.append(
            ArchiveResult(
                id=derived_id("archivebox-result", snapshot_id, r.plugin, r.hook_name),
                snapshot_id=snapshot_id,
                plugin=r.plugin,
                hook_name=r.hook_name,
                status=r.status,
                output_str=r.output_str,
                output_json=r.output_json,
                output_files=files,
                output_size=size,
                output_mimetypes=_mimetypes(files),
                start_ts=r.start_ts,
                end_ts=r.end_ts,
                notes=r.notes,
            )
        )
    if store.is_remote:
        store.upload_tree(data_dir / out_dir, out_dir)
    now = utcnow()
    with db.write() as s:
        key = dedup_key(user, hashed)
        taken = s.scalar(select(Snapshot.id).where(Snapshot.dedup_key == key))
        s.add(
            Snapshot(
                id=snapshot_id,
                crawl_id=crawl_id,
                url=snap.url,
                url_hash=hashed,
                depth=snap.depth,
                title=(snap.title or None) and snap.title[:512],
                bookmarked_at=snap.bookmarked_at,
                downloaded_at=snap.downloaded_at or snap.created_at,
                created_at=snap.created_at,
                modified_at=now,
                status=Status.SEALED,
                retry_at=None,
                output_dir=out_dir,
                output_size=total,
                expected_results=len(rows),
                dedup_key=None if taken else key,
                domain=url_domain(snap.url),
            )
        )
        s.flush()
        s.add_all(rows)
        attach_tags(s, {snapshot_id: snap.tags})
    return True
