"""Executing one ``HookTask``: a family's hooks on one snapshot.

Inside a task the family's hooks run in ``(NN, name)`` order (but for the first-look hooks, and
hooks that start together: ``order``). A foreground hook runs to completion before the
next starts; a background (``.bg``) hook is started and waited for only until its first stdout
line, then runs alongside the later hooks. Before a plugin marked
``wait_for_background_cleanup`` runs, and at the end of the task, background hooks are stopped
(SIGTERM to the group, then SIGKILL at their deadline), dependents before the plugins they need
(a recorder before the tab it listens to). Whatever ends the task (done, crash, cancel,
shutdown), every process it started is reaped.

Every hook ends with an ArchiveResult: its own, or a ``failed`` one saying why it could not be
had (binary missing, spawn error, a result that could not be recorded), or ``skipped``:
``cancelled`` when the crawl was cancelled (its running hooks are killed at once). After each
hook its Process and ArchiveResult events are published (with a bucket as the store,
``STORE_URL``: the task runs in a scratch dir, and its results are published together once its
plugin dirs are in the bucket, ``TaskRun.run``); the caller publishes the returned
``TaskCompleted`` (with the page's HTTP status, final URL and discovered URLs) and only then
acks the task.

Hooks are started with their interpreter (``python3 hook.py`` / ``node hook.js``), never through
their ``abxpkg run --script`` shebang: binaries come from the binary-resolver, ahead of time.
Tasks whose plugins need ``chrome`` run in this worker's long-lived browser (``browser.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec
from nats.js import JetStreamContext
from websockets.exceptions import WebSocketException

from boxcar.hook_executor import cdp, documents, media, reaper, responses, warc
from boxcar.hook_executor.basic_auth import BasicAuthResponder
from boxcar.hook_executor.binaries import BinaryClient, BinaryEnv, BinaryUnavailable
from boxcar.hook_executor.browser import BrowserSession, BrowserUnavailable, launch_args
from boxcar.hook_executor.cancellations import Cancellations
from boxcar.hook_executor.egress import EgressProxy, chrome_proxy_args
from boxcar.hook_executor.environment import HookEnvironment, substitute
from boxcar.hook_executor.hooks import HookProcess
from boxcar.hook_executor.order import run_order, start_batches
from boxcar.hook_executor.warm import WarmInterpreters
from boxcar.shared import bus, metrics, telemetry
from boxcar.shared.archive_store import ArchiveStore, StoreUnavailable
from boxcar.shared.binaries import ESBUILD
from boxcar.shared.clock import utcnow
from boxcar.shared.egress import EgressPolicy, RuntimePorts, url_refusal
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    HookTask,
    ProcessRecord,
    ResultStatus,
    TaskCompleted,
    TaskStarted,
    encode,
)
from boxcar.shared.plugins import Hook, PluginCatalog
from boxcar.shared.quirks import AfterRun, PageResponse, quirk
from boxcar.shared.secrets import SecretUnavailable
from boxcar.shared.settings import Settings
from boxcar.shared.storage import remove_executor_internal
from boxcar.shared.urls import strip_userinfo

log = logging.getLogger(__name__)
tracer = telemetry.tracer("boxcar.hook_executor")

#: Discovered URLs above this many encoded bytes go to the DISCOVERED object store, not the message.
INLINE_DISCOVERED_BYTES = 256 * 1024


class TaskExecutor:
    """Runs tasks for one executor process.

    Args:
        settings: process settings (``DATA_DIR``, grace periods, machine name, browser limits).
        js: JetStream context used to publish events.
        catalog: the plugin catalogue.
        binaries: resolver client for ``required_binaries``.
        worker_id: this process's id; every hook (and the browser) carries it as ``BOXCAR_WORKER_ID``.
        cancellations: the ``CANCELLED`` bucket's watcher.
        discovered_store: the ``DISCOVERED`` object store.
    """

    def __init__(
        self,
        settings: Settings,
        js: JetStreamContext,
        catalog: PluginCatalog,
        binaries: BinaryClient,
        worker_id: str,
        cancellations: Cancellations,
        discovered_store=None,
        egress: EgressProxy | None = None,
        warm: WarmInterpreters | None = None,
    ) -> None:
        self.settings = settings
        self.js = js
        self.catalog = catalog
        self.binaries = binaries
        self.worker_id = worker_id
        self.cancellations = cancellations
        self.discovered_store = discovered_store
        self.egress = egress
        self.warm = warm
        self.policy = egress.policy if egress else EgressPolicy.from_settings(settings)
        self.store = ArchiveStore.from_settings(settings)
        self.tmp_root = settings.data_dir / "tmp" / settings.machine_name
        self.browser = (
            BrowserSession(
                self.tmp_root / "browsers" / worker_id,
                worker_id,
                catalog,
                self._crawl_setup_process,
                recycle_after=settings.browser_recycle_after,
                memory_limit=settings.browser_memory_limit,
                ports=RuntimePorts(settings.runtime_ports_dir),
            )
            if "chrome" in catalog
            else None
        )

    async def execute(self, task: HookTask) -> TaskCompleted | None:
        """Run the task and return its completion (hook failures are results, not exceptions);
        None for a task of a cancelled crawl, which runs nothing.

        Raises:
            ResolverUnreachable: no binary-resolver answered (retry the task later).
            BrowserUnavailable: the task needs this worker's Chromium and it could not be started
                (retry the task later: a browser that fails to start once, as one may right after
                its executor's container restarted, does not fail the snapshot's browser results;
                on the task's last delivery the worker reports it failed, and the runner records
                each of its hooks failed with that reason).
            asyncio.CancelledError: the executor is shutting down; started hooks were killed.
        """
        if await self.cancellations.is_cancelled(task.crawl_id):
            log.info("task %s: crawl %s is cancelled; not running it", task.task_id, task.crawl_id)
            return None
        started = TaskStarted(
            task_id=task.task_id,
            crawl_id=task.crawl_id,
            snapshot_id=task.snapshot_id,
            family=task.family,
            worker=self.worker_id,
        )
        await bus.publish(self.js, bus.task_started_subject(task.family), started, msg_id=f"{task.task_id}.started")
        needs_browser = self.browser is not None and "chrome" in self.catalog.with_requirements(task.plugins)
        with self.cancellations.watching(task.crawl_id) as cancelled:
            async with contextlib.AsyncExitStack() as stack:
                browser_dir = None
                if needs_browser:  # BrowserUnavailable: the task is handed back and tried again
                    browser_dir = await stack.enter_async_context(self.browser.lease())
                completed = await TaskRun(self, task, browser_dir, cancelled).run()
        return await self._with_discovered(completed)

    async def close(self) -> None:
        """Stop this worker's browser (executor shutdown)."""
        if self.browser is not None:
            await self.browser.close()

    async def _with_discovered(self, completed: TaskCompleted) -> TaskCompleted:
        """Move a long discovered list out of the message into the object store."""
        if not completed.discovered or self.discovered_store is None:
            return completed
        lines = b"\n".join(encode(seed) for seed in completed.discovered)
        if len(lines) <= INLINE_DISCOVERED_BYTES:
            return completed
        name = completed.task_id
        await self.discovered_store.put(name, lines)
        return msgspec.structs.replace(
            completed, discovered=[], discovered_object=name, discovered_count=len(completed.discovered)
        )

    def proxy_url(self) -> str:
        """The egress proxy's URL ("" when the operator turned it off)."""
        return self.egress.ensure() if self.egress else ""

    async def _crawl_setup_process(self, hook: Hook, crawl_dir: Path, extra_env: dict[str, str]) -> HookProcess:
        """A CrawlSetup hook (the browser's launch/wait) run with this worker's environment;
        Chromium's requests go through the egress proxy."""
        env = HookEnvironment(
            settings=self.settings,
            catalog=self.catalog,
            binaries=self.binaries,
            plugins=[hook.plugin],
            config={},
            dirs={
                "SNAP_DIR": crawl_dir,
                "CRAWL_DIR": crawl_dir,
                "TMP_DIR": crawl_dir / "tmp",
                "PERSONAS_DIR": crawl_dir / "personas",
            },
            worker_id=self.worker_id,
        )
        (crawl_dir / "tmp").mkdir(parents=True, exist_ok=True)
        try:
            binary_env = await env.binary_env(hook.plugin)
        except BinaryUnavailable as exc:
            raise BrowserUnavailable(str(exc)) from None
        hook_env = {**env.hook_env(hook, binary_env, {"worker_id": self.worker_id}), **extra_env}
        proxy = await asyncio.to_thread(self.proxy_url)
        hook_env.update(launch_args(hook_env, chrome_proxy_args(proxy) if proxy else []))
        return HookProcess(
            hook,
            env.argv(hook, hook_env, ["--url=about:blank"]),
            crawl_dir / hook.plugin,
            hook_env,
            env.timeout(hook),
            kill_grace=self.settings.hook_kill_grace,
        )

    async def publish_result(
        self, task: HookTask, result: ArchiveResultRecord, process: ProcessRecord | None = None
    ) -> None:
        """Publish a hook's Process (when one ran) and ArchiveResult events, then count them:
        ``boxcar_hooks_total`` by the result's status, ``boxcar_hook_duration_seconds`` for a
        process that ran."""
        if process is not None:
            await bus.publish(self.js, bus.SUBJECT_PROCESS_COMPLETED, process, msg_id=f"process.{process.id}")
        await bus.publish(self.js, bus.SUBJECT_ARCHIVERESULT, result, msg_id=f"archiveresult.{result.id}")
        metrics.HOOKS.labels(task.family, result.plugin, str(result.status)).inc()
        if process is not None and process.started_at and process.ended_at:
            seconds = (process.ended_at - process.started_at).total_seconds()
            metrics.HOOK_SECONDS.labels(task.family, result.plugin).observe(max(0.0, seconds))


class TaskRun:
    """One run of one task's hooks (see the module docstring)."""

    def __init__(self, executor: TaskExecutor, task: HookTask, browser_dir: Path | None, cancelled: asyncio.Event):
        self.x = executor
        self.task = task
        self.cancelled = cancelled
        self.completed = TaskCompleted.of(task)
        #: with a bucket (``STORE_URL``) the task captures into a scratch dir of its own and its
        #: results wait there until its files are in the bucket (``run``)
        self.scratch = (
            reaper.scratch_dir(executor.tmp_root, executor.worker_id) / task.task_id
            if executor.store.is_remote
            else None
        )
        self.pending: list[tuple[ArchiveResultRecord, ProcessRecord | None]] = []
        self.snap_dir = (self.scratch or executor.settings.data_dir) / task.snap_dir
        self.tmp_dir = executor.tmp_root / "tasks" / task.task_id
        crawl_dir = browser_dir or (executor.settings.data_dir / task.crawl_dir if task.crawl_dir else self.snap_dir)
        self.dirs = {"SNAP_DIR": self.snap_dir, "CRAWL_DIR": crawl_dir, "TMP_DIR": self.tmp_dir}
        if browser_dir is not None:
            self.dirs["PERSONAS_DIR"] = browser_dir / "personas"
        self.started: list[HookProcess] = []
        self.background: list[HookProcess] = []
        self.wget_log = ""
        self.navigate_error = ""
        self.basic_auth: BasicAuthResponder | None = None
        #: why the tab's hooks are no longer started (its renderer stopped answering), or ""
        self.tab_lost = ""
        self._tab_probe = asyncio.Lock()  # one look at the tab at a time (``_check_tab``)

    async def run(self) -> TaskCompleted:
        """Run the task's hooks; with a bucket, first fetch the snapshot's earlier files into the
        scratch dir and, after the hooks, put the task's plugin dirs in the bucket before any of
        its results is published (a result never names a file the bucket does not have; a task
        whose upload fails is retried whole, by redelivery).

        Raises:
            StoreUnavailable: the bucket did not answer for ``STORE_RETRY_S`` (nothing published).
        """
        if self.scratch is None:
            return await self._run()
        try:
            await self._with_store(
                "fetch its earlier files", self.x.store.download_tree, self.task.snap_dir, self.snap_dir
            )
            completed = await self._run()
            plugins = sorted({h.plugin for h in self.x.catalog.snapshot_hooks(self.task.plugins)})
            files, size = await self._with_store(
                "upload its files", self.x.store.upload_tree, self.snap_dir, self.task.snap_dir, plugins
            )
            log.info("task %s: %d file(s), %d bytes put in %s", self.task.task_id, files, size, self.x.store.name)
            for result, process in self.pending:
                await self.x.publish_result(self.task, result, process)
            return completed
        finally:
            await asyncio.to_thread(shutil.rmtree, self.scratch, True)

    async def _publish(self, task: HookTask, result: ArchiveResultRecord, process: ProcessRecord | None = None) -> None:
        """Publish a hook's result now, or (with a bucket) once the task's files are in it."""
        if self.scratch is None:
            await self.x.publish_result(task, result, process)
        else:
            self.pending.append((result, process))

    async def _with_store[T](self, what: str, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` in a thread, retried with back-off while the store is unavailable, for
        up to ``STORE_RETRY_S`` (the task's lease is kept alive meanwhile by the worker's heartbeats).

        Raises:
            StoreUnavailable: still unavailable after that.
        """
        deadline = time.monotonic() + STORE_RETRY_S
        delay = 1.0
        while True:
            try:
                return await asyncio.to_thread(call, *args)
            except StoreUnavailable as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("task %s: could not %s (%s); retrying in %.0f s", self.task.task_id, what, exc, delay)
                await asyncio.sleep(delay)  # back-off before asking an unreachable store again
                delay = min(delay * 2, 15.0)

    async def _run(self) -> TaskCompleted:
        task = self.task
        hooks = self.x.catalog.snapshot_hooks(task.plugins)
        refusal = await asyncio.to_thread(url_refusal, self.x.policy, task.url)
        if refusal:  # the page itself may not be fetched: each hook skipped, the page marked refused
            for hook in hooks:
                await self._publish(task, _result(task, hook, ResultStatus.SKIPPED, refusal))
            log.warning("task %s: %s", task.task_id, refusal)
            self.completed.refused = refusal
            return self.completed
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        try:
            env = HookEnvironment(
                proxy=await asyncio.to_thread(self.x.proxy_url),
                settings=self.x.settings,
                catalog=self.x.catalog,
                binaries=self.x.binaries,
                plugins=task.plugins,
                config=task.config,
                dirs=self.dirs,
                worker_id=self.x.worker_id,
                url=task.url,
                credentials=task.credentials,
            )
        except SecretUnavailable as exc:
            for hook in hooks:
                await self._publish(task, _result(task, hook, ResultStatus.FAILED, str(exc)))
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            return self.completed
        self.env = env
        began = time.time_ns() - 1_000_000_000
        try:
            for batch in start_batches(run_order(hooks, self.x.catalog, env.resolved), self.x.catalog):
                await self._run_batch(batch)
            await self._stop_background()
        finally:
            if self.basic_auth is not None:
                await self.basic_auth.close()
            await asyncio.shield(self._reap())
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            # the browser's DevTools address, among others: only this task's own (a sibling
            # task of the stage may still be using its plugins' files)
            remove_executor_internal(self.snap_dir, (hook.plugin for hook in hooks))
            if env.secrets:
                await asyncio.to_thread(env.scrub, self.snap_dir, began)
        self._page_response()
        if self.cancelled.is_set():
            self.completed.status = "cancelled"
        return self.completed

    async def _run_batch(self, batch: list[Hook]) -> None:
        """Run hooks that start together (``order.start_batches``) and return when each has run.

        Raises:
            ResolverUnreachable, …: what one of them raised, as that hook would alone (the first,
            when several did; the others are logged): not wrapped in an ``ExceptionGroup``, whose
            text ("unhandled errors in a TaskGroup") would be the task's failure.
        """
        if len(batch) == 1:
            await self._run_hook(batch[0])
            return
        try:
            async with asyncio.TaskGroup() as group:
                for hook in batch:
                    group.create_task(self._run_hook(hook))
        except BaseExceptionGroup as errors:
            first, *others = errors.exceptions
            for other in others:
                log.warning("task %s: also raised in the same batch: %r", self.task.task_id, other)
            raise first from first.__cause__

    async def _run_hook(self, hook: Hook) -> None:
        task, env = self.task, self.env
        hook = substitute(hook)
        if await self._not_started(hook):
            return
        if self.x.catalog[hook.plugin].waits_for_background and self.background:
            await self._stop_background()
        try:
            binary_env = await env.binary_env(hook.plugin)
        except BinaryUnavailable as exc:
            await self._publish(task, _result(task, hook, ResultStatus.SKIPPED, str(exc)))
            log.warning("%s %s skipped: %s", task.snapshot_id, hook.name, exc)
            return
        spawner = None
        if self.x.warm is not None:
            spawner = await self.x.warm.for_hook(hook)
            stand_ins = await self.x.warm.binary_overrides(binary_env.values)
            if stand_ins:
                binary_env = BinaryEnv.layered([BinaryEnv(stand_ins), binary_env])
            binary_env = await self.x.warm.node_path(
                hook, binary_env, functools.partial(self.x.binaries.tool, ESBUILD, hook.plugin)
            )
        # asked again after every await that can take a while (binaries, warm interpreter): a
        # cancel, or a hung tab found by a hook started together with this one, that lands while
        # this hook was being prepared still stops it from starting
        if await self._not_started(hook, ask_store=True):
            return
        hook_env = env.hook_env(hook, binary_env, {"snapshot_id": task.snapshot_id, "crawl_id": task.crawl_id})
        args = [f"--url={env.url_for(hook)}", f"--snapshot-id={task.snapshot_id}", f"--depth={task.depth}"]
        proc = HookProcess(
            hook,
            env.argv(hook, hook_env, args),
            self.snap_dir / hook.plugin,
            hook_env,
            env.timeout(hook),
            kill_grace=self.x.settings.hook_kill_grace,
            memory_limit=env.memory_limit(hook),
            output_limit=env.output_limit,
            spawner=spawner,
        )
        with tracer.start_as_current_span(f"hook {hook.name}") as span:
            span.set_attribute("boxcar.plugin", hook.plugin)
            try:
                await proc.start()
            except OSError as exc:
                await self._publish(task, _result(task, hook, ResultStatus.FAILED, f"could not start the hook: {exc}"))
                return
            self.started.append(proc)
            if hook.is_background:
                await proc.wait_ready(self.cancelled)
                self.background.append(proc)
                tab_hook = quirk(hook.plugin).tab_hook
                if tab_hook and tab_hook in hook.name and env.credentials:
                    await self._answer_basic_auth()
                return
            await proc.wait(self.cancelled)
            span.set_attribute("process.exit_code", proc.exit_code if proc.exit_code is not None else -1)
        result = await self._report(proc)
        if result.status == ResultStatus.FAILED and self._needs_tab(hook) and not self.tab_lost:
            await self._check_tab(hook)

    async def _not_started(self, hook: Hook, *, ask_store: bool = False) -> bool:
        """If ``hook`` must not start now, publish its stand-in result and return True: ``skipped``
        "cancelled" once the task is cancelled (with ``ask_store``, also once its crawl is in the
        cancellations store), else ``failed`` "not run: …" once the tab it needs was found hung
        (``_check_tab``). False: start it."""
        task = self.task
        if self.cancelled.is_set() or (ask_store and await self.x.cancellations.is_cancelled(task.crawl_id)):
            result = _result(task, hook, ResultStatus.SKIPPED, "cancelled")
        elif self.tab_lost and self._needs_tab(hook):
            result = _result(task, hook, ResultStatus.FAILED, f"not run: {self.tab_lost}")
        else:
            return False
        await self._publish(task, result)
        return True

    def _needs_tab(self, hook: Hook) -> bool:
        """A hook of the chrome plugin or of one that requires it, directly or through another
        plugin (``PluginCatalog.with_requirements``): it works on the snapshot's tab."""
        return cdp.TAB_PLUGIN in self.x.catalog.with_requirements([hook.plugin])

    async def _check_tab(self, hook: Hook) -> None:
        """After ``hook`` failed: if the tab no longer answers (``cdp.tab_answers``), the task's
        later tab hooks are recorded failed instead of each waiting out its timeout, and the tab
        hooks started together with ``hook`` (a batch of page readers) are killed now, with that
        reason. Hooks of one batch that fail together probe the tab once."""
        async with self._tab_probe:
            if self.tab_lost:
                return
            if await cdp.tab_answers(self.snap_dir / cdp.TAB_PLUGIN) is not False:
                return
            self.tab_lost = (
                f"the page stopped answering after {hook.name} failed (its renderer is hung: "
                f"no reply to Runtime.evaluate within {cdp.TAB_ANSWER_S:.0f} s)"
            )
            log.warning("%s: %s", self.task.snapshot_id, self.tab_lost)
            for proc in self.started:
                if not proc.hook.is_background and self._needs_tab(proc.hook):
                    proc.abandon(self.tab_lost)

    async def _stop_background(self) -> None:
        """Stop background hooks, those of plugins nothing else here requires first (recorders
        before the tab they listen to), each wave in parallel."""
        procs, self.background = list(self.background), []
        running = {p.hook.plugin for p in procs}
        needed = {req for p in running for req in self.x.catalog[p].required_plugins if req in running}
        for wave in ([p for p in procs if p.hook.plugin not in needed], [p for p in procs if p.hook.plugin in needed]):
            await asyncio.gather(*(p.stop(self.cancelled) for p in wave))
            for proc in wave:
                await self._report(proc)

    async def _reap(self) -> None:
        """Kill whatever this task started that still runs (a crash or shutdown mid-task)."""
        alive = [p for p in self.started if p.proc is not None and p.proc.returncode is None]
        await asyncio.gather(*(p.kill() for p in alive), return_exceptions=True)

    async def _report(self, proc: HookProcess) -> ArchiveResultRecord:
        """Publish the hook's Process and ArchiveResult and return the latter; if they cannot be
        built or encoded, a ``failed`` result that says why (a hook never goes unrecorded)."""
        task, env = self.task, self.env
        special = quirk(proc.hook.plugin)
        if special.after_run is AfterRun.WARC and proc.started_at is not None:
            await asyncio.to_thread(self._finalize_warcs, proc.started_at.timestamp())
        if special.after_run is AfterRun.BROWSER_WARC and proc.started_at is not None:
            await asyncio.to_thread(self._browser_warc, proc.started_at.timestamp())
        try:
            result = proc.archive_result(task.snapshot_id, task.crawl_id)
            if special.after_run is AfterRun.DOCUMENT and result.status == ResultStatus.SUCCEEDED:
                result = await asyncio.to_thread(documents.describe_staticfile, result, proc, self.snap_dir)
            if special.after_run is AfterRun.MEDIA:
                result = media.check_download(result, proc)
            result = msgspec.structs.replace(
                result,
                output_str=env.redact(result.output_str),
                notes=env.redact(result.notes),
                output_json=env.redact_json(result.output_json),
                output_files={env.redact(k): v for k, v in result.output_files.items()},
            )
            process = proc.process_record(task.snapshot_id, task.crawl_id, self.x.settings.machine_name)
            process = msgspec.structs.replace(
                process,
                cmd=[env.redact(c) for c in process.cmd],
                stdout=env.redact(process.stdout),
                stderr=env.redact(process.stderr),
            )
            encode(result), encode(process)  # fail here, not half-way through publishing
        except Exception as exc:
            log.exception("%s %s: its result could not be recorded", task.snapshot_id, proc.hook.name)
            result = _result(
                task, proc.hook, ResultStatus.FAILED, f"the hook's result could not be recorded: {exc!r}"[:500]
            )
            process = None
        await self._publish(task, result, process)
        if special.page_response is PageResponse.WGET_LOG:
            self.wget_log = env.redact(proc.stderr_head())
        navigation = special.page_response is PageResponse.NAVIGATION and "navigate" in proc.hook.name
        if navigation and result.status == ResultStatus.FAILED:
            self.navigate_error = responses.network_error_in(f"{result.output_str} {result.notes}")
        self.completed.discovered.extend(proc.discovered())
        self.completed.tags.extend(t for t in proc.tags() if t not in self.completed.tags)
        log.info(
            "%s %s %s: %s %s",
            task.snapshot_id,
            proc.hook.name,
            result.status,
            result.output_str[:80],
            result.notes[:200],
        )
        return result

    async def _answer_basic_auth(self) -> None:
        """The tab is open: give it the page's credentials over DevTools before it navigates."""
        user, password = self.env.credentials
        responder = BasicAuthResponder(self.snap_dir / cdp.TAB_PLUGIN, self.task.url, user, password)  # the tab's files
        try:
            await responder.start()
        except (OSError, ValueError, TimeoutError, WebSocketException) as exc:  # captured without them
            log.warning("%s: could not give the tab its credentials: %s", self.task.snapshot_id, exc)
            return
        self.basic_auth = responder

    def _finalize_warcs(self, started: float) -> None:
        """wget's WARCs named with the snapshot id and given the addresses the proxy connected to
        (``boxcar.hook_executor.warc``)."""
        addresses = self.x.egress.connections.addresses(since=started - 1) if self.x.egress else {}
        warc.finalize(self.snap_dir / "wget", self.task.snapshot_id, int((started - 1) * 1e9), addresses)

    def _browser_warc(self, started: float) -> None:
        """What the browser received, as a WARC next to the ``responses`` plugin's files
        (``warc.from_responses``); a failure is logged and leaves the plugin's own output as it is.

        The shared Chromium reuses its connections through the proxy across snapshots, so a host's
        address may come from a connection an earlier page opened (``_KEEP_ALIVE_S`` back)."""
        since = started - _KEEP_ALIVE_S
        addresses = self.x.egress.connections.addresses(since=since) if self.x.egress else {}
        headers = responses.json_file(self.snap_dir / "headers" / "headers.json")
        try:
            warc.from_responses(
                self.snap_dir / "responses", self.task.snapshot_id, headers, addresses, software=_WARC_SOFTWARE
            )
        except Exception:
            log.exception("%s: could not write the browser's WARC", self.task.snapshot_id)

    def _page_response(self) -> None:
        """The page's HTTP status / final URL / network error, from what the hooks left."""
        response = responses.from_browser(self.snap_dir) if self.task.family == "browser" else None
        if response is None and self.wget_log:
            response = responses.from_wget_log(self.wget_log)
        if response is None and self.navigate_error:
            response = responses.PageResponse(network_error=self.navigate_error)
        if response is not None:
            self.completed.http_status = response.http_status
            self.completed.final_url = self.env.redact(strip_userinfo(response.final_url))
            self.completed.network_error = response.network_error
            self.completed.retry_after = response.retry_after


#: how long a task keeps retrying a store that does not answer before it is handed back (seconds)
STORE_RETRY_S = 300.0

#: how far back a connection the browser may still be reusing can have been opened (seconds)
_KEEP_ALIVE_S = 900

#: the ``software`` of the browser WARC's warcinfo record
_WARC_SOFTWARE = f"Boxcar {metadata.version('boxcar')} (abx-plugins {metadata.version('abx-plugins')} responses)"


def _result(task: HookTask, hook: Hook, status: str, reason: str) -> ArchiveResultRecord:
    """A result the executor records for a hook that did not produce one itself."""
    now = utcnow()
    return ArchiveResultRecord(
        id=new_id(),
        snapshot_id=task.snapshot_id,
        crawl_id=task.crawl_id,
        plugin=hook.plugin,
        hook_name=hook.name,
        status=status,
        output_str=reason[:500],
        notes=reason[:2000],
        start_ts=now,
        end_ts=now,
    )
