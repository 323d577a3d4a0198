"""The warm interpreters of one executor (``WARM_HOOKS``): a fork server for its Python hooks, and
one for each second Python a hook starts (trafilatura runs its extraction in the managed
trafilatura venv's ``python -c``); Node hooks get a compile cache (``NODE_COMPILE_CACHE``), and the
browser hooks a bundled puppeteer-core (``nodebundle``).

A second interpreter is reached through a stand-in: the hook finds its ``python`` beside the
binary it was given (``Path(TRAFILATURA_BINARY).resolve().with_name("python")``), so the executor
gives it ``<warm dir>/trafilatura/trafilatura`` and puts there a ``python`` that forwards to the
warm trafilatura interpreter (``zygote_wire.client_main``), which has trafilatura imported already.

Downloaders the hooks start as a console script (yt-dlp, gallery-dl: ``WARM_TOOLS``) get a
stand-in *binary* that runs the tool's ``main`` in a fork of its own venv's interpreter, which has
imported the tool and run it once on local input: their first run in a process is mostly
compiling hundreds of extractor patterns (yt-dlp: 2.2 CPU-s cold, 0.1–0.4 in a warm fork;
gallery-dl: 0.7 and 0.01), and they run for every page.

Anything that cannot be warmed (a zygote that does not start, or one that just exited after
``WARM_IDLE_TIMEOUT`` seconds without a hook) falls back to a cold start: the hook runs the same
either way, only slower. Zygotes that exited idle are started again on the next hook; one that
failed to start (or a Node host) is tried again a minute later (``common.StartFailures``).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import stat
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from boxcar.hook_executor.binaries import BinaryEnv
from boxcar.hook_executor.warm import zygote_wire
from boxcar.hook_executor.warm.common import StartFailures
from boxcar.hook_executor.warm.node_hosts import NodeHosts, hostable
from boxcar.hook_executor.warm.nodebundle import PuppeteerBundles
from boxcar.hook_executor.warm.zygote_client import HOOK_PRELOAD, Zygote
from boxcar.shared.plugins import Hook, PluginCatalog

log = logging.getLogger(__name__)

#: trafilatura's first extraction in a process loads what later ones reuse, and a fork of the warm
#: interpreter would otherwise load it again for every page: the public suffix list (its metadata
#: step looks a page's host up, courlan → tld: 70–90 ms) and, on a page with little text (its
#: jusText rescue), the stop words of every jusText language (150–200 ms). So the warm-up runs the
#: worker's own calls once on a short local page, as the hook's worker does (every output format).
_TRAFILATURA_WARMUP = """
from tld import get_tld
from trafilatura.core import bare_extraction, determine_returnstring
from trafilatura.settings import Extractor
get_tld("https://example.org/", fail_silently=True)
page = "<html><head><title>Warm</title></head><body><h1>Warm</h1><p>A short page.</p></body></html>"
options = {"url": "https://example.org/", "with_metadata": True, "formatting": True}
document = bare_extraction(page, options=Extractor(output_format="python", **options))
for output_format in ("txt", "markdown", "html", "xml", "xmltei", "csv", "json"):
    determine_returnstring(document, Extractor(output_format=output_format, **options))
"""

#: ``<NAME>_BINARY`` settings whose venv Python a hook starts itself: (what that Python imports,
#: warm-up code on local input only).
SECOND_INTERPRETERS: dict[str, tuple[tuple[str, ...], str]] = {
    "TRAFILATURA_BINARY": (
        ("json", "copy", "lxml.html", "trafilatura.core", "trafilatura.settings"),
        _TRAFILATURA_WARMUP,
    ),
}

_YTDLP_WARMUP = """
import os, shutil, tempfile, yt_dlp
class Quiet:
    def debug(self, msg): pass
    info = warning = error = debug
folder = tempfile.mkdtemp()
try:
    page = os.path.join(folder, "warm.html")
    with open(page, "w") as out:
        out.write("<html><head><title>warm</title></head><body><p>warm</p></body></html>")
    with yt_dlp.YoutubeDL({"quiet": True, "no_warnings": True, "enable_file_urls": True, "logger": Quiet()}) as ydl:
        try:
            ydl.extract_info("file://" + page, download=False)
        except yt_dlp.utils.DownloadError:
            pass  # a page with no media is "Unsupported URL" in newer yt-dlp: the extractors are loaded all the same
finally:
    shutil.rmtree(folder, ignore_errors=True)
"""

#: ``<NAME>_BINARY`` console scripts run warm: (modules to import, warm-up code on local input
#: only, the code that runs the tool with ``sys.argv``).
WARM_TOOLS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "YTDLP_BINARY": (("yt_dlp",), _YTDLP_WARMUP, "import yt_dlp; yt_dlp.main()"),
    "GALLERYDL_BINARY": (
        ("gallery_dl", "gallery_dl.extractor", "gallery_dl.job"),
        "import gallery_dl.extractor; gallery_dl.extractor.find('https://example.invalid/')",
        "import sys, gallery_dl; sys.exit(gallery_dl.main())",
    ),
}


class WarmInterpreters:
    """Fork servers of one executor, started on first use.

    Args:
        root: a private directory for their sockets and stand-ins.
        catalog, plugins: the plugins this executor runs (their config models are pre-built).
        idle_exit: seconds without a hook after which each exits (``WARM_IDLE_TIMEOUT``; 0: never).
        bundles: the bundled puppeteer-core for Node hooks (None: they load it unbundled).
        node_hosts: run the browser's foreground hooks in warm Node hosts (``node_hosts``).
    """

    def __init__(
        self,
        root: Path,
        catalog: PluginCatalog,
        plugins: list[str],
        idle_exit: float = 0.0,
        bundles: PuppeteerBundles | None = None,
        node_hosts: bool = True,
    ) -> None:
        self.root = root
        self.idle_exit = idle_exit
        self.bundles = bundles
        wanted = [catalog[p] for p in catalog.with_requirements(plugins) if p in catalog]
        configs = tuple(str(Path(plugin.path) / "config.json") for plugin in wanted)
        self.hooks = Zygote(sys.executable, root / "hooks.sock", HOOK_PRELOAD, configs, idle_exit=idle_exit)
        self._python_hooks = any(h.language == "python" for plugin in wanted for h in plugin.hooks)
        self.node = NodeHosts(root / "node", idle_exit=idle_exit) if node_hosts else None
        self.second: dict[str, Zygote] = {}
        self._failed = StartFailures()
        self._lock = asyncio.Lock()

    async def for_hook(self, hook: Hook) -> Zygote | NodeHosts | None:
        """What starts ``hook`` warm: the fork server (Python hooks), the Node hosts (the browser's
        foreground hooks in ``node_hosts.HOSTED``), or None: start it cold."""
        if hook.language == "python":
            return await self._ready("hooks", self.hooks)
        if self.node is not None and hostable(hook):
            return self.node
        return None

    async def prestart(self) -> None:
        """Start the Python hooks' fork server now, when these plugins have Python hooks, instead of
        at the first hook: its imports take 0.2–0.3 s, which a stack's first hooks otherwise wait
        for (in a separate process, beside the stack's own start-up). A failure is logged and the
        hooks start cold for a minute, as when the first hook starts it."""
        if self._python_hooks:
            await self._ready("hooks", self.hooks)

    async def _ready(self, name: str, server: Zygote) -> Zygote | None:
        if self._failed.blocked(name):
            return None
        async with self._lock:
            if not server.running():
                try:
                    await asyncio.to_thread(server.start)
                except (OSError, RuntimeError) as exc:
                    log.warning("warm interpreter %s unavailable (%s): starting hooks cold for a minute", name, exc)
                    self._failed.record(name)
                    return None
        return server

    async def binary_overrides(self, values: dict[str, str]) -> dict[str, str]:
        """Stand-ins for the ``SECOND_INTERPRETERS`` and ``WARM_TOOLS`` binaries among ``values``
        (``{"TRAFILATURA_BINARY": path}``): ``{key: stand-in path}``, only for those whose warm
        interpreter runs (the rest start cold, unchanged).

        A second interpreter's stand-in is a directory whose sibling ``python`` forwards to the warm
        interpreter of that binary's venv (the hook runs ``<binary dir>/python``); a tool's stand-in
        is the binary itself, running the tool's ``main`` in a fork."""
        wanted = [(key, preload, warmup, None) for key, (preload, warmup) in SECOND_INTERPRETERS.items()]
        wanted += [(key, preload, warmup, main) for key, (preload, warmup, main) in WARM_TOOLS.items()]
        out = {}
        for key, preload, warmup, main in wanted:
            binary = values.get(key)
            if not binary:
                continue
            python = Path(binary).resolve().with_name("python")
            if not python.exists():
                continue
            name = key.removesuffix("_BINARY").lower()
            server = self.second.get(name)
            if server is None:
                server = self.second[name] = Zygote(
                    str(python), self.root / f"{name}.sock", preload, warmup=warmup, idle_exit=self.idle_exit
                )
            if await self._ready(name, server) is None:
                continue
            directory = self.root / name
            directory.mkdir(parents=True, exist_ok=True)
            stand_in = directory / Path(binary).name
            if main is None:
                if not stand_in.exists():
                    stand_in.write_text("#!/bin/sh\necho 'a stand-in: only its sibling python is used' >&2\nexit 1\n")
                    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
                _write_client(directory / "python", server)
            else:
                _write_client(stand_in, server, "-c", main)
            out[key] = str(stand_in)
        return out

    async def node_path(self, hook: Hook, binaries: BinaryEnv, esbuild: Callable[[], Awaitable[str]]) -> BinaryEnv:
        """``binaries`` for a Node ``hook`` with the bundled puppeteer-core's shadow
        ``node_modules`` in front of ``NODE_PATH`` once that bundle is built or recorded as built
        (``nodebundle``; the first such hook starts the build and reads the record);
        ``binaries`` unchanged for any other hook, or before.

        Args:
            esbuild: returns esbuild's path; awaited only when a build starts.
        """
        if self.bundles is None or hook.language != "node":
            return binaries
        front = await self.bundles.node_path(binaries, esbuild)
        return BinaryEnv.layered([BinaryEnv({}, {"NODE_PATH": front}), binaries]) if front else binaries

    def reap(self) -> None:
        """Collect the exit status of zygotes that exited idle (no zombie waits for the next hook)."""
        for server in [self.hooks, *self.second.values()]:
            server.running()
        if self.node is not None:
            self.node.reap()

    def stop(self) -> None:
        for server in [self.hooks, *self.second.values()]:
            server.stop()
        if self.node is not None:
            self.node.stop()


def client_command(server: Zygote, *args: str) -> list[str]:
    """The argv of a stand-in for ``server``: a small interpreter (``-I -S``: no ``site``, nothing
    of Boxcar's imported) running ``zygote_wire.py --client``, which forwards ``args`` and its own
    arguments, streams, cwd and environment to a fork of ``server``, or execs ``server.python`` cold
    when no zygote answers at its socket."""
    return [
        sys.executable,
        "-I",
        "-S",
        zygote_wire.__file__,
        "--client",
        str(server.socket_path),
        "--cold",
        server.python,
        *args,
    ]


def _write_client(path: Path, server: Zygote, *args: str) -> None:
    """Write (or leave, when unchanged) an executable ``sh`` script at ``path`` that execs
    ``client_command(server, *args)`` with its own arguments appended."""
    script = f'#!/bin/sh\nexec {shlex.join(client_command(server, *args))} "$@"\n'
    if not path.exists() or path.read_text() != script:
        path.write_text(script)
        path.chmod(0o700)


def node_compile_cache(lib_dir: Path) -> dict[str, str]:
    """Node's on-disk compile cache for the Node hooks (Node ≥ 22): their modules are compiled
    once per machine, not once per hook."""
    cache = lib_dir / "node-compile-cache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return {}
    return {"NODE_COMPILE_CACHE": str(cache)}
