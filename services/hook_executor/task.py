"""Executing one ``HookTask``: a family's hooks on one snapshot, or the snapshot's finalize step.

Inside a task the family's hooks run in ``(NN, name)`` order. A foreground hook runs to
completion before the next starts; a background (``.bg``) hook is started and waited for only
until its first stdout line, then runs alongside the later hooks. Before a plugin marked
``wait_for_background_cleanup`` runs, and at the end of the task, background hooks are stopped
(SIGTERM to the group, then SIGKILL at their deadline), dependents before the plugins they need
(a recorder before the tab it listens to). After each hook its Process and ArchiveResult events
are published; the caller publishes the returned ``TaskCompleted`` and only then acks the task.

Hooks are started with their interpreter (``python3 hook.py`` / ``node hook.js``), never through
their ``abxpkg run --script`` shebang: binaries come from the binary-resolver, ahead of time.
Tasks whose plugins need ``chrome`` run in this worker's long-lived browser (``browser.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import msgspec
from nats.js import JetStreamContext

from boxcar.hook_executor.binaries import BinaryClient, BinaryUnavailable
from boxcar.hook_executor.browser import BrowserSession, BrowserUnavailable
from boxcar.hook_executor.hooks import HookProcess
from boxcar.hook_executor.reaper import WORKER_ENV
from boxcar.shared import bus, telemetry
from boxcar.shared.db.models import utcnow
from boxcar.shared.ids import new_id
from boxcar.shared.messages import ArchiveResultRecord, HookTask, ResultSummary, TaskCompleted
from boxcar.shared.plugins import PRIVATE_ENV_KEYS, Hook, PluginCatalog
from boxcar.shared.settings import Settings
from boxcar.shared.storage import write_atomic

log = logging.getLogger(__name__)
tracer = telemetry.tracer("boxcar.hook_executor")


class TaskExecutor:
    """Runs tasks for one executor process.

    Args:
        settings: process settings (``DATA_DIR``, grace periods, machine name, browser limits).
        js: JetStream context used to publish Process/ArchiveResult events.
        catalog: the plugin catalogue.
        binaries: resolver client for ``required_binaries``.
        worker_id: this process's id; every hook (and the browser) carries it as ``BOXCAR_WORKER_ID``.
    """

    def __init__(
        self, settings: Settings, js: JetStreamContext, catalog: PluginCatalog, binaries: BinaryClient, worker_id: str
    ) -> None:
        self.settings = settings
        self.js = js
        self.catalog = catalog
        self.binaries = binaries
        self.worker_id = worker_id
        self.running: set[HookProcess] = set()
        self.tmp_root = settings.data_dir / "tmp" / settings.machine_name
        self.browser = (
            BrowserSession(
                self.tmp_root / "browsers" / worker_id,
                worker_id,
                catalog,
                self._crawl_setup_process,
                recycle_after=settings.browser_recycle_after,
                memory_limit=settings.browser_memory_limit,
            )
            if "chrome" in catalog
            else None
        )

    async def execute(self, task: HookTask) -> TaskCompleted:
        """Run the task and return its completion (hook failures are results, not exceptions).

        Raises:
            ResolverUnreachable: no binary-resolver answered (retry the task later).
            asyncio.CancelledError: the executor is shutting down; started hooks were killed.
        """
        if task.kind == "finalize":
            return await asyncio.to_thread(self.finalize, task)
        needs_browser = self.browser is not None and "chrome" in self.catalog.with_requirements(task.plugins)
        async with contextlib.AsyncExitStack() as stack:
            crawl_dir = None
            if needs_browser:
                try:
                    crawl_dir = await stack.enter_async_context(self.browser.lease())
                except BrowserUnavailable as exc:
                    return await self._fail_all(task, f"browser unavailable: {exc}")
            return await self._run_hooks(task, crawl_dir)

    async def close(self) -> None:
        """Stop this worker's browser (executor shutdown)."""
        if self.browser is not None:
            await self.browser.close()

    async def _run_hooks(self, task: HookTask, browser_dir: Path | None) -> TaskCompleted:
        snap_dir = self.settings.data_dir / task.snap_dir
        tmp_dir = self.tmp_root / "tasks" / task.task_id
        environ = self._environ(task.config)
        resolved = self.catalog.resolve_config(task.plugins, environ)
        crawl_dir = browser_dir or (self.settings.data_dir / task.crawl_dir if task.crawl_dir else snap_dir)
        base_env = {
            **environ,
            **self.catalog.hook_env(task.plugins, resolved),
            **self._paths(snap_dir, crawl_dir, tmp_dir, browser_dir),
        }
        completed = TaskCompleted.of(task)
        background: list[HookProcess] = []
        try:
            for hook in self.catalog.snapshot_hooks(task.plugins):
                if self.catalog[hook.plugin].waits_for_background and background:
                    await self._stop_background(task, background, completed)
                try:
                    binary_env = await self._binary_env(hook.plugin, resolved)
                except BinaryUnavailable as exc:
                    await self._report_unavailable(task, hook, str(exc), completed)
                    continue
                proc = self._process(
                    hook,
                    snap_dir / hook.plugin,
                    base_env,
                    binary_env,
                    resolved,
                    [f"--url={task.url}", f"--snapshot-id={task.snapshot_id}", f"--depth={task.depth}"],
                    {"snapshot_id": task.snapshot_id, "crawl_id": task.crawl_id},
                )
                self.running.add(proc)
                with tracer.start_as_current_span(f"hook {hook.name}") as span:
                    span.set_attribute("boxcar.plugin", hook.plugin)
                    await proc.start()
                    if hook.is_background:
                        await proc.wait_ready()
                        background.append(proc)
                        continue
                    await proc.wait()
                    span.set_attribute("process.exit_code", proc.exit_code if proc.exit_code is not None else -1)
                await self._report(task, proc, completed)
            await self._stop_background(task, background, completed)
        except asyncio.CancelledError:
            await asyncio.shield(self._kill_all())
            raise
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        return completed

    # ------------------------------------------------------------------ environment

    def _environ(self, overrides: dict[str, str]) -> dict[str, str]:
        """The string settings hooks see: our environment (minus secrets), then the crawl's overrides."""
        env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV_KEYS}
        env["ABXPKG_LIB_DIR"] = str(self.settings.lib_dir)
        env.update(overrides)
        return env

    def _paths(self, snap_dir: Path, crawl_dir: Path, tmp_dir: Path, browser_dir: Path | None) -> dict[str, str]:
        data = self.settings.data_dir
        tmp_dir.mkdir(parents=True, exist_ok=True)
        lib = self.settings.lib_dir
        path = os.pathsep.join([str(Path(sys.executable).parent), str(lib / "env" / "bin"), os.environ.get("PATH", "")])
        env = {
            "SNAP_DIR": str(snap_dir),
            "CRAWL_DIR": str(crawl_dir),
            "DATA_DIR": str(data),
            "TMP_DIR": str(tmp_dir),
            "ABXPKG_LIB_DIR": str(lib),
            "PATH": path,
            "PYTHON3_BINARY": sys.executable,
            WORKER_ENV: self.worker_id,
            "PERSONAS_DIR": str((browser_dir or tmp_dir) / "personas"),
        }
        return env

    async def _binary_env(self, plugin: str, resolved: dict) -> dict[str, str]:
        """Binaries of ``plugin`` and of the plugins it requires (a chrome hook needs chrome's node)."""
        env: dict[str, str] = {}
        for name in self.catalog.with_requirements([plugin]):
            section = {**resolved.get("base", {}), **resolved.get(name, {})}
            found = await self.binaries.env_for(
                name, self.catalog.required_binaries(name, section, str(self.settings.lib_dir))
            )
            for key, value in found.items():
                env[key] = f"{value}{os.pathsep}{env[key]}" if key.endswith("_PREPEND") and key in env else value
        return env

    def _process(
        self,
        hook: Hook,
        cwd: Path,
        base_env: dict[str, str],
        binary_env: dict[str, str],
        resolved: dict,
        args: list[str],
        context: dict[str, Any],
    ) -> HookProcess:
        env = dict(base_env)
        for key, value in binary_env.items():
            if key.endswith("_PREPEND"):
                var = key.removesuffix("_PREPEND")
                env[var] = value + (os.pathsep + env[var] if env.get(var) else "")
            else:
                env[key] = value
        env["EXTRA_CONTEXT"] = json.dumps({**context, "plugin": hook.plugin, "hook_name": hook.name})
        # W3C context for hooks, as the OpenTelemetry environment-carrier convention spells it.
        env.update({k.upper(): v for k, v in telemetry.current_carrier().items()})
        section = resolved.get(hook.plugin, {})
        timeout = int(section.get(f"{hook.plugin.upper()}_TIMEOUT") or resolved.get("base", {}).get("TIMEOUT") or 60)
        interpreter = sys.executable if hook.language == "python" else env.get("NODE_BINARY", "node")
        return HookProcess(
            hook, [interpreter, hook.path, *args], cwd, env, timeout, kill_grace=self.settings.hook_kill_grace
        )

    async def _crawl_setup_process(self, hook: Hook, crawl_dir: Path, extra_env: dict[str, str]) -> HookProcess:
        """A CrawlSetup hook (the browser's launch/wait) run with this worker's environment."""
        environ = self._environ({})
        resolved = self.catalog.resolve_config([hook.plugin], environ)
        tmp_dir = crawl_dir / "tmp"
        base_env = {
            **environ,
            **self.catalog.hook_env([hook.plugin], resolved),
            **self._paths(crawl_dir, crawl_dir, tmp_dir, crawl_dir),
            **extra_env,
        }
        try:
            binary_env = await self._binary_env(hook.plugin, resolved)
        except BinaryUnavailable as exc:
            raise BrowserUnavailable(str(exc)) from None
        return self._process(
            hook,
            crawl_dir / hook.plugin,
            base_env,
            binary_env,
            resolved,
            ["--url=about:blank"],
            {"worker_id": self.worker_id},
        )

    # ------------------------------------------------------------------ stopping and reporting

    async def _stop_background(self, task: HookTask, background: list[HookProcess], completed: TaskCompleted) -> None:
        """Stop background hooks, those of plugins nothing else here requires first (recorders
        before the tab they listen to), each wave in parallel."""
        procs, background[:] = list(background), []
        running = {p.hook.plugin for p in procs}
        needed = {req for p in running for req in self.catalog[p].required_plugins if req in running}
        for wave in ([p for p in procs if p.hook.plugin not in needed], [p for p in procs if p.hook.plugin in needed]):
            await asyncio.gather(*(p.stop() for p in wave))
            for proc in wave:
                await self._report(task, proc, completed)

    async def _kill_all(self) -> None:
        await asyncio.gather(
            *(p.kill() for p in list(self.running) if p.proc and p.proc.returncode is None), return_exceptions=True
        )

    async def _report(self, task: HookTask, proc: HookProcess, completed: TaskCompleted) -> None:
        self.running.discard(proc)
        result = proc.archive_result(task.snapshot_id, task.crawl_id)
        process = proc.process_record(task.snapshot_id, task.crawl_id, self.settings.machine_name)
        await bus.publish(self.js, bus.SUBJECT_PROCESS_COMPLETED, process, msg_id=f"process.{process.id}")
        await self._publish_result(result, completed)
        completed.discovered.extend(proc.discovered())
        completed.tags.extend(t for t in proc.tags() if t not in completed.tags)
        log.info(
            "%s %s %s: %s %s",
            task.snapshot_id,
            proc.hook.name,
            result.status,
            result.output_str[:80],
            result.notes[:200],
        )

    async def _report_unavailable(self, task: HookTask, hook: Hook, reason: str, completed: TaskCompleted) -> None:
        now = utcnow()
        result = ArchiveResultRecord(
            id=new_id(),
            snapshot_id=task.snapshot_id,
            crawl_id=task.crawl_id,
            plugin=hook.plugin,
            hook_name=hook.name,
            status="failed",
            notes=reason,
            output_str=reason[:500],
            start_ts=now,
            end_ts=now,
        )
        await self._publish_result(result, completed)
        log.warning("%s %s failed: %s", task.snapshot_id, hook.name, reason)

    async def _fail_all(self, task: HookTask, reason: str) -> TaskCompleted:
        """Every hook of the task failed for one reason (e.g. no browser): record each, then complete."""
        completed = TaskCompleted.of(task)
        for hook in self.catalog.snapshot_hooks(task.plugins):
            await self._report_unavailable(task, hook, reason, completed)
        return completed

    async def _publish_result(self, result: ArchiveResultRecord, completed: TaskCompleted) -> None:
        await bus.publish(self.js, bus.SUBJECT_ARCHIVERESULT, result, msg_id=f"archiveresult.{result.id}")
        completed.results.append(
            ResultSummary(
                id=result.id,
                plugin=result.plugin,
                hook_name=result.hook_name,
                status=result.status,
                output_str=result.output_str,
                output_json=result.output_json,
                output_files=result.output_files,
                output_size=result.output_size,
                start_ts=result.start_ts,
                end_ts=result.end_ts,
                notes=result.notes,
            )
        )

    # ------------------------------------------------------------------ finalize

    def finalize(self, task: HookTask) -> TaskCompleted:
        """Write the snapshot's ``index.jsonl`` (Snapshot record, then ArchiveResult records), once,
        atomically, and drop plugin dirs that stayed empty (as abx-dl does)."""
        snap_dir = self.settings.data_dir / task.snap_dir
        snap_dir.mkdir(parents=True, exist_ok=True)
        lines = [{"type": "Snapshot", **msgspec.to_builtins(task.snapshot)}] if task.snapshot else []
        lines += [
            {"type": "ArchiveResult", "snapshot_id": task.snapshot_id, **msgspec.to_builtins(r)} for r in task.results
        ]
        write_atomic(snap_dir / "index.jsonl", "".join(json.dumps(line) + "\n" for line in lines).encode())
        for child in snap_dir.iterdir():
            if child.is_dir() and not any(child.iterdir()):
                child.rmdir()
        return TaskCompleted.of(task)
