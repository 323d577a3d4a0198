"""Executing one ``HookTask``: a family's hooks on one snapshot, or the snapshot's finalize step.

Inside a task the family's hooks run in ``(NN, name)`` order. A foreground hook runs to
completion before the next starts; a background (``.bg``) hook is started and waited for only
until its first stdout line, then runs alongside the later hooks. Before a plugin marked
``wait_for_background_cleanup`` runs, and at the end of the task, background hooks are stopped
(SIGTERM to the group, then SIGKILL at their deadline). After each hook its Process and
ArchiveResult events are published; the caller publishes the returned ``TaskCompleted`` and only
then acks the task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import msgspec
from nats.js import JetStreamContext

from boxcar.hook_executor.binaries import BinaryClient, BinaryUnavailable
from boxcar.hook_executor.hooks import HookProcess
from boxcar.shared import bus, telemetry
from boxcar.shared.db.models import utcnow
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    HookTask,
    ResultSummary,
    TaskCompleted,
)
from boxcar.shared.plugins import PRIVATE_ENV_KEYS, Hook, PluginCatalog
from boxcar.shared.settings import Settings
from boxcar.shared.storage import write_atomic

log = logging.getLogger(__name__)
tracer = telemetry.tracer("boxcar.hook_executor")


class TaskExecutor:
    """Runs tasks for one executor process.

    Args:
        settings: process settings (``DATA_DIR``, grace periods, machine name).
        js: JetStream context used to publish Process/ArchiveResult events.
        catalog: the plugin catalogue.
        binaries: resolver client for ``required_binaries``.
    """

    def __init__(
        self, settings: Settings, js: JetStreamContext, catalog: PluginCatalog, binaries: BinaryClient
    ) -> None:
        self.settings = settings
        self.js = js
        self.catalog = catalog
        self.binaries = binaries
        self.running: set[HookProcess] = set()

    async def execute(self, task: HookTask) -> TaskCompleted:
        """Run the task and return its completion (hook failures are results, not exceptions).

        Raises:
            ResolverUnreachable: no binary-resolver answered (retry the task later).
            asyncio.CancelledError: the executor is shutting down; started hooks were killed.
        """
        if task.kind == "finalize":
            return await asyncio.to_thread(self.finalize, task)
        snap_dir = self.settings.data_dir / task.snap_dir
        tmp_dir = self.settings.data_dir / "tmp" / self.settings.machine_name / task.task_id
        environ = {**_public_environ(), **task.config}
        resolved = self.catalog.resolve_config(task.plugins, environ)
        base_env = {**environ, **self.catalog.hook_env(task.plugins, resolved), **self._paths(task, snap_dir, tmp_dir)}
        completed = TaskCompleted(
            task_id=task.task_id,
            crawl_id=task.crawl_id,
            snapshot_id=task.snapshot_id,
            stage=task.stage,
            family=task.family,
        )
        background: list[HookProcess] = []
        try:
            for hook in self.catalog.snapshot_hooks(task.plugins):
                plugin = self.catalog[hook.plugin]
                if plugin.waits_for_background and background:
                    await self._stop_background(task, background, completed)
                try:
                    binary_env = await self.binaries.env_for(
                        hook.plugin,
                        self.catalog.required_binaries(
                            hook.plugin, {**resolved.get("base", {}), **resolved.get(hook.plugin, {})}
                        ),
                    )
                except BinaryUnavailable as exc:
                    await self._report_unavailable(task, hook, str(exc), completed)
                    continue
                proc = self._process(task, hook, snap_dir, base_env, binary_env, resolved)
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

    # ------------------------------------------------------------------ hooks

    def _paths(self, task: HookTask, snap_dir: Path, tmp_dir: Path) -> dict[str, str]:
        data = self.settings.data_dir
        tmp_dir.mkdir(parents=True, exist_ok=True)
        crawl_dir = data / task.crawl_dir if task.crawl_dir else snap_dir
        lib = self.settings.lib_dir
        path = os.pathsep.join([str(Path(sys.executable).parent), str(lib / "env" / "bin"), os.environ.get("PATH", "")])
        return {
            "SNAP_DIR": str(snap_dir),
            "CRAWL_DIR": str(crawl_dir),
            "DATA_DIR": str(data),
            "TMP_DIR": str(tmp_dir),
            "ABXPKG_LIB_DIR": str(lib),
            "PATH": path,
            "PYTHON3_BINARY": sys.executable,
        }

    def _process(
        self,
        task: HookTask,
        hook: Hook,
        snap_dir: Path,
        base_env: dict[str, str],
        binary_env: dict[str, str],
        resolved: dict,
    ) -> HookProcess:
        env = dict(base_env)
        prepend = binary_env.pop("PATH_PREPEND", "")
        env.update(binary_env)
        if prepend:
            env["PATH"] = prepend + os.pathsep + env["PATH"]
        env["EXTRA_CONTEXT"] = json.dumps(
            {"snapshot_id": task.snapshot_id, "crawl_id": task.crawl_id, "plugin": hook.plugin, "hook_name": hook.name}
        )
        # W3C context for hooks, as the OpenTelemetry environment-carrier convention spells it.
        env.update({k.upper(): v for k, v in telemetry.current_carrier().items()})
        section = resolved.get(hook.plugin, {})
        timeout = int(section.get(f"{hook.plugin.upper()}_TIMEOUT") or resolved.get("base", {}).get("TIMEOUT") or 60)
        interpreter = sys.executable if hook.language == "python" else env.get("NODE_BINARY", "node")
        cmd = [
            interpreter,
            hook.path,
            f"--url={task.url}",
            f"--snapshot-id={task.snapshot_id}",
            f"--depth={task.depth}",
        ]
        return HookProcess(hook, cmd, snap_dir / hook.plugin, env, timeout, kill_grace=self.settings.hook_kill_grace)

    async def _stop_background(self, task: HookTask, background: list[HookProcess], completed: TaskCompleted) -> None:
        procs, background[:] = list(background), []
        await asyncio.gather(*(p.stop() for p in procs))
        for proc in procs:
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
        return TaskCompleted(
            task_id=task.task_id,
            crawl_id=task.crawl_id,
            snapshot_id=task.snapshot_id,
            stage=task.stage,
            family=task.family,
            kind="finalize",
        )


def _public_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV_KEYS}
