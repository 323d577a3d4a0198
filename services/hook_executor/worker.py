"""The hook-executor pool loop: pull tasks of one family, run them, publish, then ack.

It is ``bus.consume`` on the family's durable pull consumer with ``EXECUTOR_CONCURRENCY``
tasks at once and ``in_progress()`` heartbeats while they run; a task is acked after its
completion event is in the stream; one that fails on its last delivery is reported failed (the
runner gives its unreported hooks ``failed`` results) so the snapshot still seals.

Each executor registers itself (``reaper``) with the reply subjects of the tasks it holds. One
starting on the same machine after a crash hands those tasks back to JetStream at once (``-NAK``)
and kills the dead worker's leftover processes, instead of waiting for the ack deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

from boxcar.hook_executor import reaper
from boxcar.hook_executor.binaries import BinaryClient
from boxcar.hook_executor.cancellations import Cancellations
from boxcar.hook_executor.egress import EgressProxy
from boxcar.hook_executor.environment import HOOK_SUBSTITUTES
from boxcar.hook_executor.task import TaskExecutor
from boxcar.hook_executor.warm import WarmInterpreters
from boxcar.hook_executor.warm.nodebundle import PuppeteerBundles
from boxcar.shared import bus, metrics, telemetry
from boxcar.shared.egress import EgressPolicy
from boxcar.shared.families import load_families
from boxcar.shared.ids import new_id
from boxcar.shared.messages import HookTask, TaskCompleted, decode
from boxcar.shared.plugins import PluginCatalog, get_catalog
from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.hook_executor")
tracer = telemetry.tracer("boxcar.hook_executor")


class HookExecutor:
    """One executor process of a family's pool.

    Args:
        settings: ``Settings.family_concurrency`` tasks run at once (``EXECUTOR_CONCURRENCY``;
            ``BROWSER_CONCURRENCY`` / ``MEDIA_CONCURRENCY`` for the heavy families); ``TASK_ACK_WAIT`` and
            ``TASK_MAX_DELIVER`` configure the family's consumer.
        family: the family whose ``tasks.hooks.<family>`` this process pulls.
    """

    def __init__(
        self,
        settings: Settings,
        family: str,
        catalog: PluginCatalog | None = None,
        concurrency: int | None = None,
        *,
        shared: SharedResources | None = None,
    ) -> None:
        self.settings = settings
        self.family = family
        self.catalog = catalog or get_catalog()
        self.concurrency = concurrency or settings.family_concurrency(family)
        self.shared = shared
        self._stop = asyncio.Event()
        self.worker_id = f"{family}-{os.getpid()}-{new_id()[-8:]}"

    def stop(self) -> None:
        """Stop pulling; tasks in flight get ``shutdown_grace`` seconds, then their hooks are killed
        and the tasks nak'ed for another executor."""
        self._stop.set()

    async def run(self, shutdown_grace: float = 20.0) -> None:
        nc, js = await bus.open_jetstream(self.settings, f"hook-executor {self.family}")
        durable = bus.family_consumer(self.family)
        await bus.ensure_consumer(
            js,
            bus.TASKS_STREAM,
            durable,
            bus.task_subject(self.family),
            ack_wait=self.settings.task_ack_wait,
            max_deliver=self.settings.task_max_deliver,
            max_ack_pending=max(64, self.concurrency * 4),
        )
        sub = await bus.pull(js, bus.TASKS_STREAM, durable)
        registry = self.settings.data_dir / "tmp" / self.settings.machine_name / "workers"
        handed_back = await asyncio.to_thread(reaper.sweep_dead_workers, registry)
        for reply in handed_back:  # tasks a dead worker held: redeliver now, not at the ack deadline
            await nc.publish(reply, b"-NAK")
        self.registration = reaper.Registration(registry, self.worker_id)
        self.cancellations = Cancellations(nc, await bus.cancelled_bucket(js, self.settings.nats_replicas))
        await self.cancellations.start()
        binaries = BinaryClient(
            nc, self.settings.machine_name, self.settings.binary_resolve_timeout, self.settings.binaries_site
        )
        if self.shared is not None:  # executors of several families in one process share these
            self.egress, self.warm = self.shared.egress, self.shared.warm
        else:
            self.egress = egress_proxy(self.settings, registry.parent / "egress" / self.worker_id)
            self.warm = None
            if self.settings.warm_hooks:
                plugins = list(load_families().families[self.family].plugins)
                self.warm = WarmInterpreters(
                    registry.parent / "warm" / self.worker_id,
                    self.catalog,
                    plugins,
                    idle_exit=self.settings.warm_idle_timeout,
                    bundles=puppeteer_bundles(self.settings, self.catalog),
                    node_hosts=self.settings.warm_node_hosts,
                )
        self.executor = TaskExecutor(
            self.settings,
            js,
            self.catalog,
            binaries,
            self.worker_id,
            self.cancellations,
            await bus.discovered_store(js, self.settings.nats_replicas),
            self.egress,
            self.warm,
        )
        self.js = js
        if self.executor.store.is_remote and not self.settings.secret_key:
            log.warning(
                "the archive is in %s but SECRET_KEY is not set: this executor uses a key file of its own "
                "data dir, so crawls with credentials fail here; set the stack's SECRET_KEY",
                self.executor.store.name,
            )
        log.info("hook-executor %s ready (worker %s, concurrency %d)", self.family, self.worker_id, self.concurrency)
        sweeper = asyncio.create_task(self._sweep(nc, registry))
        prestart = asyncio.create_task(self.warm.prestart()) if self.warm else None
        try:
            await bus.consume(
                js,
                sub,
                self._handle,
                consumer=durable,
                stop=self._stop,
                max_deliver=self.settings.task_max_deliver,
                batch=1,
                concurrency=self.concurrency,
                heartbeat=max(1.0, self.settings.task_ack_wait / 3),
                on_dead=self._on_dead,
                grace=shutdown_grace,
            )
        finally:
            sweeper.cancel()
            if prestart is not None:  # its start runs in a thread: let it end, so stop() finds what it started
                with contextlib.suppress(Exception):
                    await prestart
            if self.shared is None:
                if self.egress:
                    self.egress.stop()
                if self.warm:
                    self.warm.stop()
            await self.cancellations.close()
            await self.executor.close()
            self.registration.remove()
            await nc.close()

    async def _sweep(self, nc, registry, interval: float = 30.0) -> None:
        """Now and then, do for any executor on this machine that died what a restart would: kill
        what it left running (a detached Chromium) and hand its tasks back; and collect warm
        interpreters that exited idle."""
        while True:
            await asyncio.sleep(interval)
            if self.warm is not None:
                self.warm.reap()
            try:
                for reply in await asyncio.to_thread(reaper.sweep_dead_workers, registry):
                    await nc.publish(reply, b"-NAK")
            except Exception as exc:
                log.warning("sweeping dead workers failed: %s", exc)

    async def _handle(self, msg) -> None:
        task = decode(msg.data, HookTask)
        self.registration.hold(msg.reply)
        try:
            with tracer.start_as_current_span(
                f"task {task.family}", context=telemetry.context_from(bus.headers_of(msg))
            ) as span:
                span.set_attribute("boxcar.task_id", task.task_id)
                span.set_attribute("url.full", task.url)
                started = time.monotonic()
                completed = await self.executor.execute(task)
                if completed is not None:
                    metrics.TASK_SECONDS.labels(task.family).observe(time.monotonic() - started)
                    await self._publish(task, completed)
        finally:
            self.registration.release(msg.reply)

    async def _on_dead(self, msg, exc: BaseException) -> None:
        """The task failed on its last delivery: report it failed so its snapshot still seals."""
        task = decode(msg.data, HookTask)
        log.error("task %s failed on its last delivery: %s", task.task_id, exc)
        await self._publish(task, TaskCompleted.of(task, status="failed", error=f"{type(exc).__name__}: {exc}"[:2000]))

    async def _publish(self, task: HookTask, completed: TaskCompleted) -> None:
        await bus.publish(
            self.js, bus.task_completed_subject(task.family), completed, msg_id=f"{task.task_id}.completed"
        )


def egress_proxy(settings: Settings, workdir) -> EgressProxy | None:
    """The egress proxy hooks fetch through (``EGRESS_PROXY``), started; None where the operator
    turned it off or already routes through a proxy of their own (``HTTP(S)_PROXY``: their
    egress control)."""
    if not settings.egress_proxy:
        return None
    if any(os.environ.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")):
        log.warning("HTTP(S)_PROXY is set: hooks use that proxy, and Boxcar's egress policy is not applied")
        return None
    proxy = EgressProxy(EgressPolicy.from_settings(settings), workdir)
    proxy.start()
    log.info("egress proxy on %s (URL_ALLOW_PRIVATE=%s)", proxy.url, settings.url_allow_private)
    return proxy


def puppeteer_bundles(settings: Settings, catalog: PluginCatalog) -> PuppeteerBundles:
    """The machine's bundled puppeteer-core for the browser hooks (``<ABXPKG_LIB_DIR>/node-bundles``),
    covering what ``catalog``'s hooks and Boxcar's substitutes require of it."""
    return PuppeteerBundles(settings.lib_dir / "node-bundles", [catalog.plugins_dir, *HOOK_SUBSTITUTES.values()])


class SharedResources:
    """What executors of several families in one process share: one egress proxy, one warm
    interpreter with every family's plugins preloaded (the one-process embedded stack)."""

    def __init__(self, settings: Settings, families: list[str], catalog: PluginCatalog | None = None) -> None:
        catalog = catalog or get_catalog()
        root = settings.data_dir / "tmp" / settings.machine_name
        name = f"shared-{os.getpid()}"
        self.egress = egress_proxy(settings, root / "egress" / name)
        table = load_families().families
        plugins = [p for f in families for p in table[f].plugins]
        self.warm = (
            WarmInterpreters(
                root / "warm" / name,
                catalog,
                plugins,
                idle_exit=settings.warm_idle_timeout,
                bundles=puppeteer_bundles(settings, catalog),
                node_hosts=settings.warm_node_hosts,
            )
            if settings.warm_hooks
            else None
        )

    def stop(self) -> None:
        if self.egress:
            self.egress.stop()
        if self.warm:
            self.warm.stop()
