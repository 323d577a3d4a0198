"""One long-lived Chromium per browser-family executor process, shared by its tasks (one tab each).

The browser is started the way ArchiveBox starts a crawl's browser, by the chrome plugin's own
CrawlSetup hooks (``on_CrawlSetup__90_chrome_launch`` as a background daemon, then
``on_CrawlSetup__91_chrome_wait``), in a session dir that plays ``CRAWL_DIR`` for every task of
this worker; each task's ``chrome_tab`` hook then opens its tab in that browser.

It is *recycled* (stopped and started afresh, once no task is using it) after
``BROWSER_RECYCLE_AFTER`` snapshots or when its process tree's resident memory passes
``BROWSER_MEMORY_LIMIT`` bytes, and *restarted* when it has crashed. Stopping sends SIGTERM to
the launch hook, which closes Chromium; anything still carrying this browser's
``BOXCAR_BROWSER_ID`` afterwards is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from boxcar.hook_executor.hooks import HookProcess
from boxcar.hook_executor.reaper import BROWSER_ENV, kill_all, processes_with
from boxcar.shared.egress import RuntimePorts
from boxcar.shared.plugins import Hook, PluginCatalog
from boxcar.shared.procutil import tree_rss

log = logging.getLogger(__name__)


#: Chromium flags Boxcar never passes, whoever set them, and why: abx-plugins' default
#: ``CHROME_ARGS`` holds ``--remote-allow-origins=*``, which lets a WebSocket from *any* web page
#: drive the browser over DevTools (read files, open tabs on the stack's own services). Pages'
#: WebSockets always send an ``Origin`` header; puppeteer's connection sends none, so the hooks
#: need no allowed origin at all.
REFUSED_CHROME_FLAGS = ("--remote-allow-origins",)


def launch_args(hook_env: dict[str, str], extra: list[str]) -> dict[str, str]:
    """``CHROME_ARGS`` and ``CHROME_ARGS_EXTRA`` (JSON lists, as the launch hook reads them) from
    ``hook_env`` without ``REFUSED_CHROME_FLAGS``, with ``extra`` appended to the latter.

    Raises:
        ValueError: one of them is not a JSON list of strings.
    """
    out = {}
    for key, more in (("CHROME_ARGS", []), ("CHROME_ARGS_EXTRA", extra)):
        args = json.loads(hook_env.get(key) or "[]")
        if not isinstance(args, list):
            raise ValueError(f"{key} must be a JSON list of flags")
        kept = [str(a) for a in args if str(a).split("=", 1)[0] not in REFUSED_CHROME_FLAGS]
        out[key] = json.dumps([*kept, *more])
    return out


class BrowserUnavailable(Exception):
    """Chromium could not be started; the message says why (the launch hook's own words)."""


class BrowserSession:
    """The Chromium of one executor process.

    Args:
        root: directory for this worker's browser generations (``<root>/gen-<n>`` is ``CRAWL_DIR``).
        worker_id: this executor's id (part of each generation's ``BOXCAR_BROWSER_ID``).
        make_process: builds a ``HookProcess`` for a CrawlSetup hook: ``(hook, crawl_dir,
            extra_env) -> HookProcess`` (the executor's environment, binaries and timeouts).
        recycle_after: snapshots per browser before it is replaced (0 = never).
        memory_limit: bytes of RSS (browser + children) past which it is replaced (0 = no limit).
        ports: where the browser's DevTools port is registered, so that the egress policy refuses
            it to every page (``boxcar.shared.egress.RuntimePorts``; None: not registered).
    """

    def __init__(
        self,
        root: Path,
        worker_id: str,
        catalog: PluginCatalog,
        make_process: Callable[[Hook, Path, dict[str, str]], asyncio.Future],
        *,
        recycle_after: int = 50,
        memory_limit: int = 0,
        ports: RuntimePorts | None = None,
    ) -> None:
        self.root = root
        self.worker_id = worker_id
        self.make_process = make_process
        self.recycle_after = recycle_after
        self.memory_limit = memory_limit
        chrome = catalog["chrome"]
        self.launch_hook = next(h for h in chrome.hooks if h.event == "CrawlSetup" and "chrome_launch" in h.name)
        self.wait_hook = next(h for h in chrome.hooks if h.event == "CrawlSetup" and "chrome_wait" in h.name)
        self.generation = 0
        self.launcher: HookProcess | None = None
        self.crawl_dir: Path | None = None
        self.uses = 0
        self.in_use = 0
        self.ports = ports
        self._registered: Path | None = None
        self._draining = False
        self._cond = asyncio.Condition()

    @property
    def browser_id(self) -> str:
        return f"{self.worker_id}-{self.generation}"

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Path]:
        """Use the browser for one task; yields the ``CRAWL_DIR`` its hooks must run with.

        Raises:
            BrowserUnavailable: Chromium could not be (re)started.
        """
        async with self._cond:
            await self._cond.wait_for(lambda: not self._draining)
            if not self._healthy():
                await self._restart()
            self.in_use += 1
            crawl_dir = self.crawl_dir
        try:
            yield crawl_dir
        finally:
            async with self._cond:
                self.in_use -= 1
                self.uses += 1
                if not self._draining and self._should_recycle():
                    self._draining = True
                if self._draining and self.in_use == 0:
                    log.info("recycling browser %s after %d snapshot(s)", self.browser_id, self.uses)
                    await self._stop()
                    self._draining = False
                self._cond.notify_all()

    async def close(self) -> None:
        """Stop the browser (executor shutdown)."""
        async with self._cond:
            await self._stop()

    # ------------------------------------------------------------------ internals

    def _chrome_pid(self) -> int | None:
        try:
            return int((self.crawl_dir / "chrome" / "chrome.pid").read_text().strip())
        except (OSError, ValueError, TypeError):
            return None

    def _healthy(self) -> bool:
        if self.launcher is None or self.launcher.proc is None or self.launcher.proc.returncode is not None:
            return False
        pid = self._chrome_pid()
        try:
            return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            log.warning("browser %s (pid %s) died; restarting it", self.browser_id, pid)
            return False

    def memory(self) -> int:
        """Resident bytes of the browser process and all its children (0 if not running)."""
        pid = self._chrome_pid()
        return tree_rss(pid) if pid else 0

    def _should_recycle(self) -> bool:
        if self.recycle_after and self.uses >= self.recycle_after:
            return True
        return bool(self.memory_limit) and self.memory() > self.memory_limit

    async def _restart(self) -> None:
        await self._stop()
        self.generation += 1
        self.uses = 0
        self.crawl_dir = self.root / f"gen-{self.generation}"
        shutil.rmtree(self.crawl_dir, ignore_errors=True)
        (self.crawl_dir / "chrome").mkdir(parents=True)
        marker = {BROWSER_ENV: self.browser_id}
        launcher = await self.make_process(self.launch_hook, self.crawl_dir, marker)
        await launcher.start()
        await launcher.wait_ready()
        if launcher.proc.returncode is not None or not self._chrome_pid():
            await launcher.wait()
            raise BrowserUnavailable(f"chromium did not start: {launcher.stderr_tail(1500).strip()}")
        self.launcher = launcher
        waiter = await self.make_process(self.wait_hook, self.crawl_dir, marker)
        await waiter.start()
        await waiter.wait()
        if waiter.exit_code != 0:
            await self._stop()
            raise BrowserUnavailable(f"chromium started but did not answer: {waiter.stderr_tail(1500).strip()}")
        port = self.devtools_port()
        if self.ports is not None and port:
            self._registered = self.ports.register(f"devtools-{port}", port, self._chrome_pid())
        log.info(
            "browser %s up (pid %s, DevTools port %s, %s)", self.browser_id, self._chrome_pid(), port, self.crawl_dir
        )

    def devtools_port(self) -> int:
        """The port the browser's DevTools listens on (from the launch hook's ``cdp_url.txt``), 0
        when unknown."""
        try:
            url = (self.crawl_dir / "chrome" / "cdp_url.txt").read_text().strip()
            return urlsplit(url).port or 0
        except (OSError, ValueError, TypeError):
            return 0

    async def _stop(self) -> None:
        if self._registered is not None:
            RuntimePorts.unregister(self._registered)
            self._registered = None
        if self.launcher is not None:
            await self.launcher.stop()  # SIGTERM: the launch hook closes Chromium, then exits
            self.launcher = None
        if self.generation:
            leftovers = await asyncio.to_thread(processes_with, BROWSER_ENV, {self.browser_id})
            if leftovers:
                log.warning("browser %s left %d process(es); killing them", self.browser_id, len(leftovers))
                await asyncio.to_thread(kill_all, leftovers)
        if self.crawl_dir is not None:
            shutil.rmtree(self.crawl_dir, ignore_errors=True)
            self.crawl_dir = None
