"""The hook-executor pool loop: pull tasks of one family, run them, publish, then ack.

Following nats.py's worker-pool examples: bind to the family's durable pull consumer,
``fetch`` one task per free slot, send ``in_progress()`` while it runs, ``ack()`` after its
completion event is in the stream; ``term()`` a task that can't be decoded (poison);
``nak(delay)`` on an unexpected error, except on its last delivery, where it is reported failed
so the snapshot still seals.
"""

from __future__ import annotations

import asyncio
import logging
import os

import msgspec

from boxcar.hook_executor import reaper
from boxcar.hook_executor.binaries import BinaryClient, ResolverUnreachable
from boxcar.hook_executor.task import TaskExecutor
from boxcar.shared import bus, telemetry
from boxcar.shared.ids import new_id
from boxcar.shared.messages import HookTask, TaskCompleted, decode
from boxcar.shared.plugins import PluginCatalog, get_catalog
from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.hook_executor")
tracer = telemetry.tracer("boxcar.hook_executor")


class HookExecutor:
    """One executor process of a family's pool.

    Args:
        settings: ``EXECUTOR_CONCURRENCY`` tasks run at once; ``TASK_ACK_WAIT`` and
            ``TASK_MAX_DELIVER`` configure the family's consumer.
        family: the family whose ``tasks.hooks.<family>`` this process pulls.
    """

    def __init__(
        self, settings: Settings, family: str, catalog: PluginCatalog | None = None, concurrency: int | None = None
    ) -> None:
        self.settings = settings
        self.family = family
        self.catalog = catalog or get_catalog()
        self.concurrency = concurrency or settings.executor_concurrency
        self._stop = asyncio.Event()
        self._inflight: set[asyncio.Task] = set()
        self.worker_id = f"{family}-{os.getpid()}-{new_id()[-8:]}"

    def stop(self) -> None:
        """Stop pulling; tasks in flight get ``shutdown_grace`` seconds, then their hooks are killed
        and the tasks nak'ed for another executor."""
        self._stop.set()

    async def run(self, shutdown_grace: float = 20.0) -> None:
        nc = await bus.connect(self.settings.nats_url, f"hook-executor {self.family}")
        js = nc.jetstream()
        await bus.ensure_streams(js)
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
        binaries = BinaryClient(nc, self.settings.machine_name, self.settings.binary_resolve_timeout)
        registry = self.settings.data_dir / "tmp" / self.settings.machine_name / "workers"
        await asyncio.to_thread(reaper.sweep_dead_workers, registry)  # leftovers of workers that died
        registration = reaper.register(registry, self.worker_id)
        self.executor = TaskExecutor(self.settings, js, self.catalog, binaries, self.worker_id)
        self.js = js
        slots = asyncio.Semaphore(self.concurrency)
        log.info("hook-executor %s ready (worker %s, concurrency %d)", self.family, self.worker_id, self.concurrency)
        try:
            while not self._stop.is_set():
                if not await self._acquire_unless_stopped(slots):
                    break
                try:
                    msgs = await sub.fetch(1, timeout=1)
                except TimeoutError:
                    slots.release()
                    continue
                except Exception as exc:
                    slots.release()
                    log.warning("fetch failed: %s", exc)
                    await asyncio.sleep(1)
                    continue
                job = asyncio.create_task(self._handle(msgs[0]))
                self._inflight.add(job)
                job.add_done_callback(lambda t: (self._inflight.discard(t), slots.release()))
        finally:
            if self._inflight:
                done, pending = await asyncio.wait(self._inflight, timeout=shutdown_grace)
                for job in pending:
                    job.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            await self.executor.close()
            registration.unlink(missing_ok=True)
            await nc.close()

    async def _acquire_unless_stopped(self, slots: asyncio.Semaphore) -> bool:
        """Wait for a free slot; False (holding none) when stop() comes first."""
        acquire = asyncio.create_task(slots.acquire())
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if self._stop.is_set():
            acquire.cancel()
            if acquire.done() and not acquire.cancelled():
                slots.release()
            return False
        return True

    async def _handle(self, msg) -> None:
        try:
            task = decode(msg.data, HookTask)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.error("terminating undecodable task on %s: %s", msg.subject, exc)
            await msg.term()
            return
        heartbeat = asyncio.create_task(self._heartbeat(msg))
        try:
            with tracer.start_as_current_span(
                f"task {task.family}", context=telemetry.context_from(bus.headers_of(msg))
            ) as span:
                span.set_attribute("boxcar.task_id", task.task_id)
                span.set_attribute("url.full", task.url)
                try:
                    completed = await self.executor.execute(task)
                except asyncio.CancelledError:
                    await asyncio.shield(msg.nak())
                    raise
                except ResolverUnreachable as exc:
                    log.warning("task %s: %s; retrying later", task.task_id, exc)
                    await msg.nak(delay=30)
                    return
                except Exception as exc:
                    if msg.metadata.num_delivered < self.settings.task_max_deliver:
                        log.exception(
                            "task %s failed (delivery %d); will retry", task.task_id, msg.metadata.num_delivered
                        )
                        await msg.nak(delay=5 * msg.metadata.num_delivered)
                        return
                    log.exception("task %s failed on its last delivery", task.task_id)
                    completed = TaskCompleted.of(
                        task,
                        status="failed",
                        error=f"{type(exc).__name__}: {exc}"[:2000],
                    )
                await bus.publish(
                    self.js,
                    bus.task_completed_subject(task.family),
                    completed,
                    msg_id=f"{task.task_id}.{task.attempt}.completed",
                )
                await msg.ack()
        finally:
            heartbeat.cancel()

    async def _heartbeat(self, msg) -> None:
        interval = max(1.0, self.settings.task_ack_wait / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await msg.in_progress()
            except Exception as exc:
                log.debug("in_progress failed: %s", exc)
