"""A bundled puppeteer-core for the browser hooks (part of ``WARM_HOOKS``).

Every browser hook is a fresh Node process that loads puppeteer-core through abx-plugins'
``resolvePuppeteerModule`` (``chrome/chrome_utils.js``: four ``puppeteer-core/internal/…`` files;
modalcloser requires the package itself), which pulls in some 400 ES modules of puppeteer-core,
chromium-bidi and ws. Loaded from one esbuild CommonJS bundle of the same modules, a Node process
doing that took **52.2 ms of CPU instead of 88.6** (median of 11, Node 24, compile cache on both;
puppeteer-core 25.16.0): ~0.36 CPU-s a page in the chrome selection, whose 9–10 Node hooks a page
each pay it.

The hooks are not changed. For a Node hook whose ``NODE_PATH`` leads to puppeteer-core, the
executor puts a *shadow* ``node_modules`` in front of that ``NODE_PATH``. Its one package is
``puppeteer-core``: a ``package.json`` with the real one's name and version whose ``exports`` map
``.`` and ``./internal/*`` to its own files, ``bundle.js`` (the bundle), and for the package's main
entry and for each ``puppeteer-core/internal/…`` path the installed plugins' scripts name, a
one-line module that returns that module from the bundle (each is evaluated when first required,
as before). Everything else the hooks require (abxbus, ``@puppeteer/browsers``, …) is found further
down ``NODE_PATH`` as before; the hooks' ``getNodeModulesDir()`` (``NODE_PATH``'s first entry when
``NODE_MODULES_DIR`` is unset) becomes the shadow, which only that resolution uses.

A bundle is built once per puppeteer-core install, in ``<ABXPKG_LIB_DIR>/node-bundles/`` under a
name made of the package's real path, version and ``package.json`` mtime, the entry paths, and
esbuild's version; in the background, on the first Node hook that would use it (hooks before it is
ready load puppeteer-core as they always did, unless an earlier build's record names a current one:
below). esbuild comes from npm through the binary-resolver
like any binary (``boxcar.shared.binaries.ESBUILD``). A build counts only once Node has loaded every
entry through the shadow the way the hooks do and no file of the real package came along
(``puppeteer_bundle.js check``); then the directory is renamed into place, so a half-built bundle
is never used and executors building the same one at once do no harm. A build that fails is logged
once and the hooks keep the unbundled package (or the recorded bundle, if current) for the life of
the process.

Finding a bundle that is already built still takes that build's first steps (a Node process to
resolve the package, esbuild from the binary-resolver, ``esbuild --version``): about a second at a
stack's start, while the crawl's first browser hooks start their warm Node hosts, which keep the
``NODE_PATH`` they started with. Unbundled, 20 to 27 of the 50 hosts of a 40-page run loaded
puppeteer-core the slow way, and a pool keeps hosts per ``NODE_PATH``, so a second set was
started once the bundle was found. So a build also leaves a record (``located/<key>.json``: the
bundle directory it made or found, the real ``package.json`` with its inode, size and mtime as the
build saw them, what each ``NODE_PATH`` directory held of ``puppeteer-core`` and ``puppeteer``, and
the entries), and an executor's first Node hook for a ``NODE_PATH`` waits only for that record to
be read and checked: its ``bundle.js`` is still there, the ``NODE_PATH`` directories hold the same
packages (real paths: a new install or a pnpm re-link shows), that ``package.json`` is unchanged,
and the hooks name the same entries. The build runs in the background as before and
its answer, once it has one, takes over. A record that cannot be written (a read-only lib dir)
costs only the shortcut.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from boxcar.hook_executor.binaries import BinaryEnv
from boxcar.shared.secrets import public_environ

log = logging.getLogger(__name__)

HELPER = Path(__file__).with_name("puppeteer_bundle.js")

#: ``puppeteer-core/internal/<path>.js`` as the hooks name the files they require.
_INTERNAL = re.compile(r"puppeteer-core/(internal/[A-Za-z0-9_./-]+?\.js)")

#: Seconds for each step (resolve, esbuild, self-check); a slower one fails the build.
STEP_TIMEOUT = 120.0

#: Changes whenever the shadow package's layout changes, so old bundles are not reused.
LAYOUT = "1"

#: The packages the hooks look for on ``NODE_PATH``, first found wins (abx-plugins'
#: ``resolvePuppeteerModule``, ``chrome/chrome_utils.js``); ``puppeteer_bundle.js resolve`` gets
#: them from here, and a record keeps what ``NODE_PATH`` holds of each (``_packages``).
PACKAGES = ("puppeteer-core", "puppeteer")

#: The start of every bundle directory's name under the root (``build``); a record naming
#: anything else is not used.
PREFIX = "puppeteer-core-"


class BundleError(Exception):
    """A bundle could not be built or did not pass its self-check; ``str()`` says why."""


def entry_points(script_dirs: Iterable[Path]) -> list[str]:
    """The puppeteer-core modules the hooks require: ``"."`` (the package, as modalcloser requires
    it) and every ``internal/….js`` path named in a ``.js``/``.mjs``/``.cjs`` file under
    ``script_dirs``, sorted (``node-env-setup.js`` first: the hooks load it before the rest)."""
    found: set[str] = set()
    for folder in script_dirs:
        if folder.is_file():
            files: Iterable[Path] = [folder]
        else:
            files = (
                p for p in folder.rglob("*") if p.suffix in (".js", ".mjs", ".cjs") and "node_modules" not in p.parts
            )
        for path in files:
            try:
                found.update(_INTERNAL.findall(path.read_text(errors="replace")))
            except OSError:
                continue
    first = "internal/node-env-setup.js"
    return [".", *([first] if first in found else []), *sorted(found - {first})]


def _shim(entry: str) -> tuple[str, str]:
    """(file name inside the shadow package, its source) for one entry."""
    name = "index.js" if entry == "." else entry
    depth = name.count("/")
    bundle = "./bundle.js" if depth == 0 else "../" * depth + "bundle.js"
    return name, f'"use strict";\nmodule.exports = require({json.dumps(bundle)})({json.dumps(entry)});\n'


def _bundle_entry(files: dict[str, str]) -> str:
    """The esbuild entry: a function from entry name to that module, each required on first use
    (esbuild keeps a ``require`` inside a function lazy) and then kept."""
    cases = ",\n".join(f"  {json.dumps(entry)}: () => require({json.dumps(path)})" for entry, path in files.items())
    return (
        '"use strict";\n'
        f"const modules = {{\n{cases},\n}};\n"
        "const loaded = new Map();\n"
        "module.exports = (name) => {\n"
        "  if (!loaded.has(name)) loaded.set(name, modules[name]());\n"
        "  return loaded.get(name);\n"
        "};\n"
    )


def _node_of(binaries: BinaryEnv) -> tuple[list[str], str]:
    """``(NODE_PATH directories, Node's path)`` of a Node hook's ``binaries`` (``"node"``, found
    on ``PATH``, when no ``NODE_BINARY`` is set)."""
    return binaries.paths.get("NODE_PATH", []), binaries.values.get("NODE_BINARY") or "node"


class PuppeteerBundles:
    """The bundles of one executor process: which shadow ``node_modules`` (if any) goes in front of
    a Node hook's ``NODE_PATH``.

    Args:
        root: ``<ABXPKG_LIB_DIR>/node-bundles``, shared by every executor on the machine.
        script_dirs: where the hooks' scripts are (abx-plugins' plugins, Boxcar's substitutes),
            scanned for the puppeteer-core paths they require.
    """

    def __init__(self, root: Path, script_dirs: list[Path]) -> None:
        self.root = root
        self.script_dirs = script_dirs
        self._builds: dict[tuple[str, ...], asyncio.Task[tuple[bool, Path | None]]] = {}
        self._located: dict[tuple[str, ...], asyncio.Task[Path | None]] = {}
        self._entries: asyncio.Task[list[str]] | None = None

    async def node_path(self, binaries: BinaryEnv, esbuild: Callable[[], Awaitable[str]]) -> list[str]:
        """Directories to put in front of the ``NODE_PATH`` of a Node hook that gets ``binaries``
        (its ``NODE_PATH``, run with its ``NODE_BINARY``): ``[shadow node_modules]`` once its
        bundle is built or a build's record (``located/``) shows it built and current, else
        ``[]``. The first call for a ``NODE_PATH`` and Node starts the build in the background
        (once per pair) and waits only for the record to be read (a file and a few stats, after
        the entry scan of ``script_dirs``).

        Args:
            binaries: the hook's binaries (``WarmInterpreters.node_path``); the build runs with
                their ``PATH`` directories in front, as the hooks do.
            esbuild: returns esbuild's path (resolved, installing if needed, through the
                binary-resolver); awaited only when a build starts; raises when it cannot be had.
        """
        node_path, node = _node_of(binaries)
        if not node_path:
            return []
        key = (node, *node_path)  # as the record's (the first such hook's PATH is the build's)
        if key not in self._builds:
            loop = asyncio.get_running_loop()
            self._located[key] = loop.create_task(self._locate(tuple(node_path), node))
            self._builds[key] = loop.create_task(self._build_logged(binaries, esbuild))
        # a cancelled caller must not cancel the lookup the other hooks wait for (once it is done,
        # awaiting it returns at once)
        located = await asyncio.shield(self._located[key])
        build = self._builds[key]
        if build.done() and not build.cancelled():
            answered, shadow = build.result()
            if answered:  # the build's answer takes over, "no puppeteer-core here" included
                return [str(shadow)] if shadow is not None else []
        return [str(located)] if located is not None else []

    async def wait(self) -> None:
        """Wait for every build started so far (tests use it; executors never wait for a build)."""
        if self._builds:
            await asyncio.gather(*self._located.values(), *self._builds.values(), return_exceptions=True)

    async def _entry_points(self) -> list[str]:
        """``entry_points(script_dirs)``, scanned once (in a thread) per ``PuppeteerBundles``."""
        if self._entries is None:
            self._entries = asyncio.get_running_loop().create_task(asyncio.to_thread(entry_points, self.script_dirs))
        return await asyncio.shield(self._entries)

    def _record(self, node_path: tuple[str, ...], node: str) -> Path:
        """Where the record of the bundle for ``node_path`` run with ``node`` is kept."""
        key = json.dumps([LAYOUT, node, list(node_path)])
        return self.root / "located" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"

    async def _locate(self, node_path: tuple[str, ...], node: str) -> Path | None:
        """The shadow ``node_modules`` a build recorded for ``node_path`` and ``node``, if it is
        still there and current (its ``bundle.js`` exists; ``node_path`` holds the same packages
        (``_packages``) and the real ``package.json`` has the recorded inode, size and mtime; the
        entries are the same); None otherwise (no record, stale, unreadable)."""
        try:
            entries = await self._entry_points()
            return await asyncio.to_thread(self._read_record, node_path, node, entries)
        except Exception:  # never let the shortcut fail a hook: without it the hook loads unbundled
            log.exception("the puppeteer-core bundle's record could not be read")
            return None

    def _read_record(self, node_path: tuple[str, ...], node: str, entries: list[str]) -> Path | None:
        """``_locate``'s reading and checking of the record (blocking: a file and a few stats)."""
        try:
            record = json.loads(self._record(node_path, node).read_text())
            name = record["bundle"]
            if not isinstance(name, str) or not name.startswith(PREFIX) or os.sep in name:
                return None
            shadow = self.root / name / "node_modules"
            current = (
                record["entries"] == entries
                and record["packages"] == _packages(node_path)
                and _identity(os.stat(record["manifest"])) == record["identity"]
                and (shadow / "puppeteer-core" / "bundle.js").is_file()
            )
        except (OSError, ValueError, KeyError, TypeError):  # ValueError: a torn or foreign file
            return None
        return shadow if current else None

    def _remember(self, node_path: list[str], node: str, shadow: Path, seen: dict[str, object]) -> None:
        """Write the record ``_locate`` reads (atomically: a reader sees the old record or this).
        Best effort: a lib dir that takes no record (read-only, full) only loses the shortcut."""
        record = self._record(tuple(node_path), node)
        body = {"bundle": shadow.parent.name, **seen}
        staging = None
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            fd, staging = tempfile.mkstemp(prefix=".record-", dir=record.parent)
            with os.fdopen(fd, "w") as out:
                json.dump(body, out)
            os.chmod(staging, 0o644)
            os.replace(staging, record)
        except OSError as exc:
            log.debug("no record of the puppeteer-core bundle in %s: %s", record.parent, exc)
            if staging is not None:
                with contextlib.suppress(OSError):
                    os.unlink(staging)

    async def _build_logged(
        self, binaries: BinaryEnv, esbuild: Callable[[], Awaitable[str]]
    ) -> tuple[bool, Path | None]:
        """``build``'s answer as ``(True, shadow or None)``; ``(False, None)`` when it failed
        (logged once; a current record still counts then)."""
        try:
            shadow = await self.build(binaries, esbuild)
        except (BundleError, OSError) as exc:  # OSError: the lib dir is not writable, or is full
            log.warning(
                "no puppeteer-core bundle built: %s (hooks load it unbundled, or an earlier bundle if current)", exc
            )
            return False, None
        except Exception:  # never let a build take an executor down: the hooks work without it
            log.exception(
                "the puppeteer-core bundle build crashed (hooks load it unbundled, or an earlier one if current)"
            )
            return False, None
        if shadow is not None:
            log.info("browser hooks load puppeteer-core from %s", shadow)
        return True, shadow

    async def build(self, binaries: BinaryEnv, esbuild: Callable[[], Awaitable[str]]) -> Path | None:
        """The shadow ``node_modules`` for puppeteer-core as the ``NODE_PATH`` of ``binaries``
        resolves it, built now unless it exists; None when that ``NODE_PATH`` has no
        puppeteer-core (nor puppeteer). ``binaries`` and ``esbuild`` as for ``node_path``.

        Raises:
            BundleError: esbuild unavailable, a step failed or timed out, or the self-check failed.
        """
        node_path, node = _node_of(binaries)
        entries = await self._entry_points()
        # the executor's environment without Boxcar's secrets (as for hooks) and its own NODE_PATH,
        # with the hooks' binary directories in front of PATH as theirs are: npm's esbuild is a
        # ``#!/usr/bin/env node`` script, and in Boxcar's image Node comes from npm (ABXPKG_LIB_DIR)
        clean = BinaryEnv({}, {"PATH": binaries.paths.get("PATH", [])}).apply(
            {k: v for k, v in public_environ().items() if k != "NODE_PATH"}
        )
        env = {**clean, "NODE_PATH": os.pathsep.join(node_path)}
        packages = _packages(node_path)  # as the resolution below sees them (for the record)
        out = await _run([node, str(HELPER), "resolve", ",".join(PACKAGES), *entries], env, "resolving puppeteer-core")
        found = json.loads(out)
        if found is None:
            return None
        root, version, files = Path(found["root"]), str(found["version"]), dict(found["files"])
        try:
            esbuild_path = await esbuild()
        except Exception as exc:  # BinaryUnavailable, ResolverUnreachable
            raise BundleError(f"esbuild unavailable: {exc}") from None
        esbuild_version = (await _run([esbuild_path, "--version"], clean, "esbuild --version")).strip()
        manifest = root / "package.json"
        manifest_stat = manifest.stat()  # once: the bundle's name and its record say the same
        identity = json.dumps(
            [LAYOUT, str(root), version, manifest_stat.st_mtime_ns, entries, esbuild_version], sort_keys=True
        )
        seen = {
            "manifest": str(manifest),
            "identity": _identity(manifest_stat),
            "entries": entries,
            "packages": packages,
        }
        name = f"{PREFIX}{version}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"
        final = self.root / name / "node_modules"
        if final.is_dir():
            self._remember(node_path, node, final, seen)
            return final
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.root))
        try:
            package = staging / "node_modules" / "puppeteer-core"
            package.mkdir(parents=True)
            entry = staging / "entry.js"
            entry.write_text(_bundle_entry(files))
            await _run(
                [
                    esbuild_path,
                    str(entry),
                    "--bundle",
                    "--platform=node",
                    "--format=cjs",
                    "--log-level=error",
                    f"--outfile={package / 'bundle.js'}",
                ],
                clean,
                "esbuild",
            )
            entry.unlink()
            exports = {".": "./index.js", "./internal/*": "./internal/*", "./package.json": "./package.json"}
            (package / "package.json").write_text(
                json.dumps({"name": "puppeteer-core", "version": version, "main": "index.js", "exports": exports})
            )
            for item in entries:
                file, source = _shim(item)
                (package / file).parent.mkdir(parents=True, exist_ok=True)
                (package / file).write_text(source)
            await _run(
                [node, str(HELPER), "check", str(staging / "node_modules"), str(root), *entries],
                clean,
                "checking the bundle",
            )
            for folder, _dirs, names in os.walk(staging):  # hooks may run as another user: readable by all
                os.chmod(folder, 0o755)
                for file_name in names:
                    os.chmod(os.path.join(folder, file_name), 0o644)
            try:
                os.rename(staging, final.parent)
            except OSError:
                if not final.is_dir():  # not another executor's finished bundle
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._remember(node_path, node, final, seen)
        return final


def _identity(stat: os.stat_result) -> list[int]:
    """What the record keeps of ``package.json``'s stat: inode, size, mtime (ns)."""
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns]


def _packages(node_path: Iterable[str]) -> list[list[str | None]]:
    """What ``node_path`` holds of the two packages the hooks look for, as a record keeps it: for
    each directory, the real path of its ``puppeteer-core`` and of its ``puppeteer`` (None where
    there is none). A package installed, removed or re-linked (pnpm) in any of them changes it."""
    out: list[list[str | None]] = []
    for folder in node_path:
        row: list[str | None] = []
        for name in PACKAGES:
            package = os.path.join(folder, name)
            row.append(os.path.realpath(package) if os.path.isdir(package) else None)
        out.append(row)
    return out


async def _run(argv: list[str], env: dict[str, str], what: str) -> str:
    """Run ``argv``; its stdout. Raises ``BundleError`` (with the end of stderr) on failure or
    after ``STEP_TIMEOUT`` seconds; cancelled, it kills the process.

    ``subprocess.Popen`` and ``communicate`` in threads, not ``asyncio.create_subprocess_exec``: a
    build runs in a task nobody awaits, and ``asyncio.run``'s teardown cancels such a task;
    cancelled while its process is being spawned, that coroutine never returns (the transport's
    pipe-connecting task is cancelled with it, so the transport never sees its pipes close:
    CPython 3.12.1 and 3.13.0), and the executor would hang on exit. Here a cancel kills the
    process, so the thread waiting for it returns at once (one cancelled while the process is
    being started leaves that step to end by itself).
    """
    try:
        proc = await asyncio.to_thread(
            subprocess.Popen,
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    except OSError as exc:
        raise BundleError(f"{what}: cannot start {argv[0]}: {exc}") from None
    try:
        out, err = await asyncio.to_thread(_communicate, proc, what)
    except asyncio.CancelledError:
        proc.kill()  # the thread's communicate() then returns
        raise
    if proc.returncode != 0:
        tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
        raise BundleError(f"{what} failed (exit {proc.returncode}): {tail}")
    return out.decode()


def _communicate(proc: subprocess.Popen[bytes], what: str) -> tuple[bytes, bytes]:
    """``proc``'s stdout and stderr once it has exited (blocking); killed after ``STEP_TIMEOUT``."""
    try:
        return proc.communicate(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BundleError(f"{what}: no answer within {STEP_TIMEOUT:.0f}s") from None
