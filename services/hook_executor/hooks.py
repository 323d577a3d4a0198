"""Running one abx-plugins hook as a subprocess, per the hook protocol.

Protocol (abx-plugins 1.13, ``reference/abx-plugins-hands-on.md`` §2.4, abx-dl
``ProcessService``): ``<hook> --url=U --snapshot-id=ID --depth=N`` in ``$SNAP_DIR/<plugin>/``, in
its own process group; stdout is JSONL mixed with text (``ArchiveResult``, ``Snapshot``, ``Tag``
records); a background (``.bg``) hook's first stdout line means "ready". Exit 0 = the record's
status (no record = ``noresults``), 10 = ``skipped``, anything else = ``failed``; a hook killed at
its deadline is ``failed`` ("Hook timed out after N seconds"). Output files are the files new or
changed in the plugin dir during the run (success is never inferred from files).
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
import os
import re
import signal
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from boxcar.hook_executor.warm.node_hosts import NodeHosts
from boxcar.hook_executor.warm.zygote_client import Zygote
from boxcar.shared.clock import utcnow
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    FINAL_RESULT_STATUSES,
    ArchiveResultRecord,
    OutputFile,
    ProcessRecord,
    ResultStatus,
    Seed,
)
from boxcar.shared.plugins import Hook
from boxcar.shared.procutil import detached, tree_rss
from boxcar.shared.storage import display_path, is_executor_internal
from boxcar.shared.urls import InvalidURL

log = logging.getLogger(__name__)

EXIT_SKIPPED = 10
mimetypes.add_type("application/warc", ".warc")  # so x.warc.gz is application/warc (gzip-encoded)
STREAM_LIMIT = 16 * 1024 * 1024  # longest stdout line we accept (a record with big output_json)
TAIL_BYTES = 64 * 1024  # stdout/stderr kept on the Process record
HEAD_BYTES = 16 * 1024  # the start of stderr, kept too (wget logs the page's own response first)
MAX_RECORDS = 100_000  # JSONL records kept per run (discovered links of a huge page)
SMALL_JSON = 64 * 1024  # a result's JSON file up to this size is inlined as its output_json
_STATUS_ALIASES = {
    "success": ResultStatus.SUCCEEDED,
    "succeded": ResultStatus.SUCCEEDED,
    "noresult": ResultStatus.NORESULTS,
    "no_results": ResultStatus.NORESULTS,
    "skip": ResultStatus.SKIPPED,
    "failure": ResultStatus.FAILED,
    "error": ResultStatus.FAILED,
}
#: ``noresults`` that means "this plugin does not apply to this kind of page" (a PDF for the DOM
#: plugins, an HTML page for staticfile): recorded as ``skipped``, with the hook's reason.
NOT_APPLICABLE = re.compile(r"already handled|not HTML|\(not staticfile\)", re.IGNORECASE)


def normalize_status(value: Any) -> ResultStatus:
    """ArchiveBox's ``ArchiveResult.normalize_status``: aliases to canonical, unknown → failed."""
    status = str(value or "").strip().lower()
    status = _STATUS_ALIASES.get(status, status)
    return ResultStatus(status) if status in FINAL_RESULT_STATUSES else ResultStatus.FAILED


def scan_files(root: Path) -> dict[str, tuple[int, int]]:
    """``{relpath: (size, mtime_ns)}`` of regular files under ``root`` (symlinks not followed).

    A name that is not valid UTF-8 (wget saves ``?q=H%F6he`` with the raw byte 0xF6) is given in
    its ``display_path`` form, so results and messages can always carry it.
    """
    out: dict[str, tuple[int, int]] = {}
    # os.scandir's entries know their type from the directory read: one lstat per file, no
    # Path objects (os.walk, Path.lstat and Path.is_symlink took three system calls and four
    # objects a file; the executor lists a hook's directory before and after it, and every
    # second while it runs when SNAPSHOT_MAX_SIZE is set)
    todo = [(os.fspath(root), "")]
    while todo:
        directory, prefix = todo.pop()
        try:
            entries = os.scandir(directory)
        except OSError:  # gone, unreadable, or not a directory: as os.walk, nothing from it
            continue
        with entries:
            try:
                for entry in entries:
                    try:
                        if entry.is_symlink():
                            continue  # not followed, not listed (a link to a directory either)
                        if entry.is_dir(follow_symlinks=False):
                            todo.append((entry.path, f"{prefix}{entry.name}/"))
                            continue
                        if not entry.is_file(follow_symlinks=False):
                            continue  # a FIFO, socket or device: no output (reading one could block)
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # removed meanwhile
                        continue
                    out[display_path(prefix + entry.name)] = (st.st_size, st.st_mtime_ns)
            except OSError:  # reading the directory failed part way (as os.walk: the rest of it skipped)
                continue
    return out


class HookProcess:
    """One run of one hook.

    Args:
        hook: the hook to run.
        cmd: full argv (interpreter, hook path, ``--url=…``, …).
        plugin_dir: ``$SNAP_DIR/<plugin>``, the cwd and the dir whose new files are outputs.
        env: the complete environment of the subprocess.
        timeout: the plugin's timeout in seconds; the hook is killed at ``timeout + margin``.
    """

    def __init__(
        self,
        hook: Hook,
        cmd: list[str],
        plugin_dir: Path,
        env: Mapping[str, str],
        timeout: int,
        *,
        margin: float = 10.0,
        kill_grace: float = 5.0,
        memory_limit: int = 0,
        output_limit: int = 0,
        limits_interval: float = 1.0,
        spawner: Zygote | NodeHosts | None = None,
    ) -> None:
        self.hook = hook
        self.cmd = cmd
        self.plugin_dir = plugin_dir
        self.env = dict(env)
        self.timeout = timeout
        self.margin = margin
        self.kill_grace = kill_grace
        self.memory_limit = memory_limit
        self.output_limit = output_limit
        self.limits_interval = limits_interval  # seconds between two looks at memory and output size
        self.killed_for = ""  # why the executor killed the hook (its size, its tab hung), when it did
        self.spawner = spawner
        self.process_id = new_id()
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None
        self.timed_out = False
        self.cancelled = False
        self.records: list[dict[str, Any]] = []
        self._stdout_tail: list[str] = []
        self._stdout_size = 0
        self._stderr = bytearray()
        self._stderr_head = bytearray()
        self._ready = asyncio.Event()
        self._readers: list[asyncio.Task] = []
        self._limits: asyncio.Task | None = None
        self._files_before: dict[str, tuple[int, int]] = {}
        self._deadline = 0.0

    async def start(self) -> None:
        """Spawn the hook in its own session (process group); it dies if the executor dies."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._files_before = await asyncio.to_thread(scan_files, self.plugin_dir)
        self.started_at = utcnow()
        self._deadline = asyncio.get_running_loop().time() + self.timeout + self.margin
        self.proc = None
        if self.spawner is not None:  # a fork of the warm interpreter, set up as a fresh process would be
            try:
                self.proc = await self.spawner.spawn(self.cmd, self.plugin_dir, self.env)
            except OSError as exc:  # the zygote just exited idle or died, the Node host failed: start cold
                log.info("no warm start for %s (%s): starting it cold", self.hook.name, exc)
        if self.proc is None:
            argv, detach = detached(self.cmd, signal.SIGKILL)
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self.plugin_dir,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=STREAM_LIMIT,
                **detach,
            )
        self._readers = [asyncio.create_task(self._read_stdout()), asyncio.create_task(self._read_stderr())]
        if self.memory_limit or self.output_limit:
            self._limits = asyncio.create_task(self._watch_limits(self.limits_interval))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def _read_stdout(self) -> None:
        assert self.proc and self.proc.stdout
        while True:
            try:
                raw = await self.proc.stdout.readline()
            except (asyncio.LimitOverrunError, ValueError):
                raw = await self.proc.stdout.read(STREAM_LIMIT)  # drop an over-long line
                continue
            if not raw:
                break
            self._ready.set()
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._keep_stdout(line)
            stripped = line.strip()
            if stripped.startswith("{"):
                try:
                    record = json.loads(stripped)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("type") and len(self.records) < MAX_RECORDS:
                    self.records.append(record)
        self._ready.set()

    def _keep_stdout(self, line: str) -> None:
        self._stdout_tail.append(line)
        self._stdout_size += len(line) + 1
        while self._stdout_size > TAIL_BYTES and len(self._stdout_tail) > 1:
            self._stdout_size -= len(self._stdout_tail.pop(0)) + 1

    async def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        while chunk := await self.proc.stderr.read(65536):
            if len(self._stderr_head) < HEAD_BYTES:
                self._stderr_head.extend(chunk[: HEAD_BYTES - len(self._stderr_head)])
            self._stderr.extend(chunk)
            if len(self._stderr) > TAIL_BYTES:
                del self._stderr[: len(self._stderr) - TAIL_BYTES]

    def _remaining(self) -> float:
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    async def wait_ready(self, cancelled: asyncio.Event | None = None) -> None:
        """Background hooks: wait for the first stdout line (or exit), at most until the deadline
        or until ``cancelled`` is set."""
        waiters = {asyncio.create_task(self._ready.wait()), asyncio.create_task(self.proc.wait())}
        if cancelled is not None:
            waiters.add(asyncio.create_task(cancelled.wait()))
        await asyncio.wait(waiters, timeout=self._remaining(), return_when=asyncio.FIRST_COMPLETED)
        for t in waiters:
            t.cancel()

    async def wait(self, cancelled: asyncio.Event | None = None) -> None:
        """Wait for exit; past the deadline kill the group and mark the run timed out; when
        ``cancelled`` is set first, kill it and mark the run cancelled."""
        if self.proc.returncode is None:
            exited = asyncio.create_task(self.proc.wait())
            waiters = {exited}
            if cancelled is not None:
                waiters.add(asyncio.create_task(cancelled.wait()))
            await asyncio.wait(waiters, timeout=self._remaining(), return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters - {exited}:
                waiter.cancel()
            if self.proc.returncode is None:
                if cancelled is not None and cancelled.is_set():
                    self.cancelled = True
                    await self.kill(grace=min(self.kill_grace, 1.0))  # a cancel does not wait long
                else:
                    self.timed_out = True
                    await self.kill()
            exited.cancel()
        await self._finish()

    async def stop(self, cancelled: asyncio.Event | None = None) -> None:
        """End a background hook: SIGTERM its group (daemons flush and exit; finite downloaders
        ignore it and finish), then wait until its deadline — but at least ``kill_grace``
        seconds, so a daemon stopped after its deadline still gets to report — then SIGKILL."""
        if self.proc.returncode is None:
            self._signal_group(signal.SIGTERM)
            self._deadline = max(self._deadline, asyncio.get_running_loop().time() + self.kill_grace)
        await self.wait(cancelled)

    async def kill(self, grace: float | None = None) -> None:
        """SIGTERM the process group, then SIGKILL after ``grace`` seconds (default ``kill_grace``)."""
        self._signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), self.kill_grace if grace is None else grace)
        except TimeoutError:
            pass
        self._signal_group(signal.SIGKILL)
        await self.proc.wait()

    def _signal_group(self, sig: int) -> None:
        hosted = getattr(self.proc, "signal_group", None)
        if hosted is not None:  # a hook in a warm Node host: its host is not its own group
            hosted(sig)
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def _watch_limits(self, interval: float = 1.0) -> None:
        """Kill the hook when its processes' resident memory passes ``memory_limit`` (abx-dl's
        ``MEMORY_LIMIT``, summed over its process tree) or its output passes ``output_limit`` bytes
        (``SNAPSHOT_MAX_SIZE``): a hostile page cannot fill the memory or the disk."""
        while self.proc.returncode is None:
            await asyncio.sleep(interval)
            reason = await asyncio.to_thread(self._limit_reached)
            if reason and self.proc.returncode is None:
                self.abandon(reason)
                return

    def abandon(self, reason: str) -> None:
        """SIGKILL the hook's group now, for ``reason``: its result is ``failed``, "killed:
        <reason>" (``wait`` returns once it has exited). Nothing when it has exited already, or
        was killed for another reason before (the first is kept). A hook that exited by itself
        just before the signal keeps its own result (``archive_result``)."""
        if self.proc is None or self.proc.returncode is not None or self.killed_for:
            return
        self.killed_for = reason
        log.warning("%s killed: %s", self.hook.name, reason)
        self._signal_group(signal.SIGKILL)

    def _limit_reached(self) -> str:
        if self.memory_limit:
            rss = tree_rss(self.proc.pid)
            if rss > self.memory_limit:
                return f"used {rss / 2**20:.0f} MiB of memory, over MEMORY_LIMIT ({self.memory_limit / 2**20:.0f} MiB)"
        if self.output_limit:
            size = sum(meta[0] for meta in scan_files(self.plugin_dir).values())
            if size > self.output_limit:
                return f"wrote {size / 2**20:.0f} MiB, over SNAPSHOT_MAX_SIZE ({self.output_limit / 2**20:.0f} MiB)"
        return ""

    async def _finish(self) -> None:
        # Children that outlive the hook keep the pipes open: stop them with the group.
        self._signal_group(signal.SIGKILL)
        if self._limits is not None:  # a sleeping watcher must not hold the result back (up to its interval)
            self._limits.cancel()
        try:
            await asyncio.wait_for(asyncio.gather(*self._readers), 5)
        except TimeoutError:
            for t in self._readers:
                t.cancel()
        self.ended_at = utcnow()

    # ------------------------------------------------------------------ results

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def archive_result(self, snapshot_id: str, crawl_id: str) -> ArchiveResultRecord:
        """The ArchiveResult for this run (call after ``wait``/``stop``)."""
        record = next((r for r in reversed(self.records) if r.get("type") == "ArchiveResult"), None)
        output_str = str((record or {}).get("output_str") or "")
        notes = ""
        if self.cancelled:
            status, output_str, notes = (
                ResultStatus.SKIPPED,
                "cancelled",
                "cancelled: the crawl was cancelled while the hook ran",
            )
        elif self.killed_for and (self.exit_code or 0) < 0:  # died of the signal, not by itself
            status, notes = ResultStatus.FAILED, f"killed: {self.killed_for}"
            output_str = output_str or notes
        elif self.timed_out:
            status, notes = ResultStatus.FAILED, f"Hook timed out after {self.timeout} seconds"
        elif self.exit_code == EXIT_SKIPPED:
            status = ResultStatus.SKIPPED
        elif self.exit_code != 0:
            status = "failed"
            notes = f"exit code {self.exit_code}: {self.stderr_tail(2000).strip() or output_str}"
        elif record is None:
            status = ResultStatus.NORESULTS
        else:
            status = normalize_status(record.get("status"))
            if status == ResultStatus.NORESULTS and NOT_APPLICABLE.search(output_str):
                status = ResultStatus.SKIPPED
            if status == ResultStatus.FAILED:
                notes = str(record.get("error") or output_str or self.stderr_tail(2000).strip())
        files = self.output_files()
        output_json = (record or {}).get("output_json")
        if output_json is None and status == ResultStatus.SUCCEEDED:
            output_json = self._small_json_output(output_str)
        by_type: dict[str, int] = {}
        for f in files.values():
            by_type[f.mimetype] = by_type.get(f.mimetype, 0) + f.size
        return ArchiveResultRecord(
            id=new_id(),
            snapshot_id=snapshot_id,
            crawl_id=crawl_id,
            plugin=self.hook.plugin,
            hook_name=self.hook.name,
            status=status,
            output_str=output_str[:10000],
            output_json=output_json,
            output_files=files,
            output_size=sum(f.size for f in files.values()),
            output_mimetypes=",".join(m for m, _ in sorted(by_type.items(), key=lambda kv: -kv[1]) if m)[:512],
            start_ts=self.started_at,
            end_ts=self.ended_at,
            notes=notes[:10000],
            process_id=self.process_id,
        )

    def _small_json_output(self, output_str: str) -> Any:
        """A hook's structured output when its result names a small JSON file (``seo/seo.json``):
        the parsed object, so consumers (the projector's title choice, API clients) need no file."""
        if not output_str.endswith(".json"):
            return None
        path = self.plugin_dir.parent / output_str
        try:
            if path.resolve().is_relative_to(self.plugin_dir.resolve()) and path.stat().st_size <= SMALL_JSON:
                value = json.loads(path.read_text(encoding="utf-8"))
                return value if isinstance(value, dict) else None
        except (OSError, ValueError):
            return None
        return None

    def process_record(self, snapshot_id: str, crawl_id: str, machine: str) -> ProcessRecord:
        return ProcessRecord(
            id=self.process_id,
            snapshot_id=snapshot_id,
            crawl_id=crawl_id,
            plugin=self.hook.plugin,
            hook_name=self.hook.name,
            cmd=self.cmd,
            pwd=str(self.plugin_dir),
            pid=self.pid,
            exit_code=-1 if self.timed_out else self.exit_code,
            stdout="\n".join(self._stdout_tail),
            stderr=self.stderr_tail(TAIL_BYTES),
            started_at=self.started_at,
            ended_at=self.ended_at,
            timeout=self.timeout,
            machine=machine,
            status="exited",
        )

    def stderr_tail(self, limit: int) -> str:
        return bytes(self._stderr[-limit:]).decode("utf-8", "replace")

    def stderr_head(self) -> str:
        """The first ``HEAD_BYTES`` of stderr (what a downloader says about the page itself)."""
        return bytes(self._stderr_head).decode("utf-8", "replace")

    def output_files(self) -> dict[str, OutputFile]:
        after = scan_files(self.plugin_dir)
        return {
            rel: OutputFile(size=meta[0], mimetype=mimetypes.guess_type(rel)[0] or "application/octet-stream")
            for rel, meta in sorted(after.items())
            if self._files_before.get(rel) != meta and not is_executor_internal(f"{self.hook.plugin}/{rel}")
        }

    def discovered(self) -> list[Seed]:
        """URLs the hook reported with ``{"type": "Snapshot", "url": ...}`` records, as ``Seed``s
        (canonicalized here, where they enter Boxcar; credentials in them are dropped; invalid
        ones are left out)."""
        out = []
        for r in self.records:
            if r.get("type") != "Snapshot" or not isinstance(r.get("url"), str):
                continue
            tags = r.get("tags") or []
            if isinstance(tags, str):
                tags = [t.strip() for t in tags.split(",") if t.strip()]
            bookmarked = r.get("bookmarked_at")
            try:
                bookmarked_at = datetime.fromisoformat(bookmarked) if isinstance(bookmarked, str) else None
            except ValueError:
                bookmarked_at = None
            if bookmarked_at is not None and bookmarked_at.tzinfo is None:
                bookmarked_at = None
            title = r.get("title")
            try:
                out.append(
                    Seed.parse(
                        r["url"],
                        title=title if isinstance(title, str) else None,
                        tags=[str(t) for t in tags if t] if isinstance(tags, list) else [],
                        bookmarked_at=bookmarked_at,
                        source=self.hook.plugin,
                    )
                )
            except InvalidURL:
                continue
        return out

    def tags(self) -> list[str]:
        return [str(r["name"]) for r in self.records if r.get("type") == "Tag" and r.get("name")]
