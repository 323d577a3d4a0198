"""The bundled puppeteer-core of the browser hooks (``hook_executor/nodebundle.py``): built with the
real esbuild from the chrome plugin's real install, reached through abx-plugins' own
``resolvePuppeteerModule`` in Node, able to drive a real Chromium to a local page exactly as the
unbundled package does; put in front of a Node hook's ``NODE_PATH`` only once it is built (or an
earlier build's record shows it built and current), and never when it cannot be."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from boxcar.binary_resolver.resolver import resolve_binary
from boxcar.hook_executor.binaries import BinaryEnv, BinaryUnavailable
from boxcar.hook_executor.warm import WarmInterpreters
from boxcar.hook_executor.warm.nodebundle import HELPER, PACKAGES, PuppeteerBundles, entry_points
from boxcar.shared.binaries import ESBUILD
from boxcar.shared.messages import BinaryRecord, BinaryRequest
from boxcar.shared.plugins import get_catalog, parse_hook
from boxcar.shared.settings import Settings
from tests.test_browser import corpus_pages


@pytest.fixture(scope="module")
def chrome_binaries(lib_dir: Path) -> tuple[BinaryEnv, str]:
    """The chrome plugin's binaries in the session's lib dir (installed on first use) as its hooks
    get them, and esbuild's path."""
    settings = Settings(data_dir=lib_dir.parent / "bundle-data", abxpkg_lib_dir=lib_dir)
    catalog = get_catalog()
    environ = {"ABXPKG_LIB_DIR": str(lib_dir)}
    resolved = catalog.resolve_config(["chrome"], environ)
    section = {**resolved.get("base", {}), **resolved.get("chrome", {})}
    providers = list(settings.binary_install_providers)

    def resolve(record: dict) -> BinaryRecord:
        reply = resolve_binary(
            BinaryRequest.from_record(record, plugin="chrome", machine="test"), lib_dir, providers, "test"
        )
        assert reply.ok and reply.binary, reply.error
        return reply.binary

    records = catalog.required_binaries("chrome", section, str(lib_dir))
    return BinaryEnv.of([(key, resolve(record)) for key, record in records]), resolve(ESBUILD).abspath


def test_entry_points_are_what_the_hooks_require(tmp_path):
    plugins = get_catalog().plugins_dir
    found = entry_points([plugins])
    assert found[:2] == [".", "internal/node-env-setup.js"]  # the package (modalcloser), then what loads first
    assert {"internal/common/Puppeteer.js", "internal/environment.js", "internal/node/ScreenRecorder.js"} <= set(found)
    extra = tmp_path / "hook.js"
    extra.write_text('require("puppeteer-core/internal/cdp/Page.js");\n')
    assert "internal/cdp/Page.js" in entry_points([plugins, extra])


def test_the_helper_given_too_few_arguments_prints_its_usage():
    node = shutil.which("node")
    assert node, "Node is installed with the project (make install)"
    for args in ([], ["bundle"], ["resolve"], ["resolve", ",".join(PACKAGES)], ["check", "shadow", "root"]):
        done = subprocess.run([node, str(HELPER), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("usage: node puppeteer_bundle.js resolve <package>"), (args, done.stderr)


LOAD_AND_CAPTURE = """
const path = require("path");
const { resolvePuppeteerModule } = require(process.env.CHROME_UTILS);
const puppeteer = resolvePuppeteerModule();              // how every chrome hook gets it
const direct = (() => {                                   // how modalcloser gets it
  for (const name of ["puppeteer-core", "puppeteer"]) {
    try { return require(name); } catch (error) {}
  }
})();
(async () => {
  const launched = await direct.launch({
    executablePath: process.env.CHROME_BINARY,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run"],
  });
  try {
    // as the hooks do: connect to the running browser, work in a tab, disconnect
    const browser = await puppeteer.connect({ browserWSEndpoint: launched.wsEndpoint(), defaultViewport: null });
    const page = await browser.newPage();
    await page.goto(process.env.PAGE_URL, { waitUntil: "load" });
    const title = await page.title();
    const png = await page.screenshot({ type: "png" });
    await browser.disconnect();
    const files = Object.keys(require.cache);
    console.log(JSON.stringify({
      title,
      png: png.subarray(1, 4).toString() === "PNG",
      bundle: files.filter((f) => f.endsWith(path.join("puppeteer-core", "bundle.js"))).length,
      real: files.filter((f) => f.includes("/puppeteer-core/") && !f.startsWith(process.env.SHADOW)).length,
    }));
  } finally {
    await launched.close();
  }
})().catch((error) => { console.error(error); process.exit(1); });
"""


def test_hooks_load_the_bundle_and_drive_a_real_chromium_as_before(tmp_path, chrome_binaries, corpus_server):
    binaries, esbuild = chrome_binaries
    node = binaries.values["NODE_BINARY"]
    node_path = binaries.paths["NODE_PATH"]
    bundles = PuppeteerBundles(tmp_path / "node-bundles", [get_catalog().plugins_dir])

    async def esbuild_path() -> str:
        return esbuild

    shadow = asyncio.run(bundles.build(binaries, esbuild_path))
    assert shadow is not None and shadow.name == "node_modules"
    assert asyncio.run(bundles.build(binaries, esbuild_path)) == shadow  # built once
    script = tmp_path / "capture.js"
    script.write_text(textwrap.dedent(LOAD_AND_CAPTURE))
    ((url, meta),) = corpus_pages(corpus_server, 1)

    def capture(paths: list[str]) -> dict:
        env = {
            **os.environ,
            "NODE_PATH": os.pathsep.join(paths),
            "CHROME_UTILS": str(get_catalog().plugins_dir / "chrome" / "chrome_utils.js"),
            "CHROME_BINARY": binaries.values["CHROME_BINARY"],
            "PAGE_URL": url,
            "SHADOW": str(shadow),
        }
        done = subprocess.run([node, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    bundled, unbundled = capture([str(shadow), *node_path]), capture(node_path)
    assert bundled["bundle"] == 1 and bundled["real"] == 0, bundled  # all of puppeteer-core from the bundle
    assert unbundled["bundle"] == 0 and unbundled["real"] > 0, unbundled  # the check tells them apart
    assert bundled["title"] == unbundled["title"] and bundled["title"], (bundled, unbundled)
    assert bundled["png"] and unbundled["png"]


def test_the_executor_uses_a_bundle_only_once_built_and_never_a_failed_one(tmp_path, chrome_binaries, caplog):
    binaries, esbuild = chrome_binaries
    catalog = get_catalog()
    plugins_dir = catalog.plugins_dir
    node_hook = parse_hook("title", plugins_dir / "title" / "on_Snapshot__54_title.js")
    python_hook = next(h for h in catalog["wget"].snapshot_hooks() if h.language == "python")
    node_path = binaries.paths["NODE_PATH"]

    async def esbuild_path() -> str:
        return esbuild

    async def no_esbuild() -> str:
        raise BinaryUnavailable("binary 'esbuild' unavailable: npm is not allowed here")

    async def scenario() -> None:
        bundles = PuppeteerBundles(tmp_path / "node-bundles", [plugins_dir])
        warm = WarmInterpreters(tmp_path / "warm", catalog, ["title"], bundles=bundles)
        assert await warm.node_path(python_hook, binaries, esbuild_path) is binaries  # not a Node hook
        assert await warm.node_path(node_hook, binaries, esbuild_path) is binaries  # not built yet: started
        await bundles.wait()
        after = await warm.node_path(node_hook, binaries, esbuild_path)
        shadow = after.paths["NODE_PATH"][0]
        assert after.paths["NODE_PATH"] == [shadow, *node_path] and after.values == binaries.values
        assert (Path(shadow) / "puppeteer-core" / "bundle.js").is_file()
        assert str(tmp_path / "node-bundles") in shadow

        failing = WarmInterpreters(
            tmp_path / "warm2", catalog, ["title"], bundles=PuppeteerBundles(tmp_path / "other", [plugins_dir])
        )
        assert await failing.node_path(node_hook, binaries, no_esbuild) is binaries
        await failing.bundles.wait()
        assert await failing.node_path(node_hook, binaries, no_esbuild) is binaries  # unbundled, and no retry loop
        assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())

        elsewhere = BinaryEnv(binaries.values, {"NODE_PATH": [str(tmp_path)]})  # no puppeteer on it
        assert await warm.node_path(node_hook, elsewhere, esbuild_path) is elsewhere
        await bundles.wait()
        assert await warm.node_path(node_hook, elsewhere, esbuild_path) is elsewhere

    with caplog.at_level(logging.WARNING, logger="boxcar.hook_executor.warm.nodebundle"):
        asyncio.run(scenario())
    assert "no puppeteer-core bundle built: esbuild unavailable: binary 'esbuild' unavailable" in caplog.text


def test_the_bundle_is_built_where_node_is_not_on_path(tmp_path, chrome_binaries, monkeypatch, caplog):
    """In Boxcar's image Node comes from npm (``ABXPKG_LIB_DIR``), not from PATH, and npm's esbuild
    is a ``#!/usr/bin/env node`` script: the build runs it with the hooks' binary directories
    (node's among them) in front of PATH, as the executor passes them (``make compose-test``
    logged "esbuild --version failed (exit 127): env: 'node': No such file or directory", and
    every Node host loaded puppeteer-core unbundled)."""
    binaries, esbuild = chrome_binaries
    node = binaries.values["NODE_BINARY"]
    assert os.path.isabs(node) and os.path.dirname(node) in binaries.paths["PATH"], (node, binaries.paths)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    catalog = get_catalog()
    node_hook = parse_hook("title", catalog.plugins_dir / "title" / "on_Snapshot__54_title.js")

    async def esbuild_path() -> str:
        return esbuild

    async def scenario() -> list[str]:
        bundles = PuppeteerBundles(tmp_path / "node-bundles", [catalog.plugins_dir])
        warm = WarmInterpreters(tmp_path / "warm", catalog, ["title"], bundles=bundles)
        await warm.node_path(node_hook, binaries, esbuild_path)  # starts the build, as an executor's first hook
        await bundles.wait()
        return (await warm.node_path(node_hook, binaries, esbuild_path)).paths["NODE_PATH"]

    with caplog.at_level(logging.WARNING, logger="boxcar.hook_executor.warm.nodebundle"):
        shadow = Path(asyncio.run(scenario())[0])
    assert "no puppeteer-core bundle built" not in caplog.text
    assert (shadow / "puppeteer-core" / "bundle.js").is_file() and str(tmp_path / "node-bundles") in str(shadow)


def test_a_new_executor_uses_the_bundle_an_earlier_build_recorded_from_its_first_hook(tmp_path, chrome_binaries):
    """A stack's next start (or a second executor) finds the bundle before its own build has
    resolved anything: its first Node hooks, which start the warm hosts, get the shadow at once;
    a record whose bundle is gone, whose package changed, that another puppeteer-core earlier on
    NODE_PATH shadows, or whose hooks name other entries is not used; a lib dir that takes no
    record loses only the shortcut."""
    binaries, esbuild = chrome_binaries
    plugins_dir = get_catalog().plugins_dir
    root = tmp_path / "node-bundles"

    async def esbuild_path() -> str:
        return esbuild

    async def no_esbuild() -> str:
        raise BinaryUnavailable("binary 'esbuild' unavailable: npm is not allowed here")

    made: list[PuppeteerBundles] = []

    def bundles(script_dirs: list[Path] | None = None) -> PuppeteerBundles:
        """A new executor's bundles on the shared root (its builds are waited for at the end)."""
        made.append(PuppeteerBundles(root, script_dirs or [plugins_dir]))
        return made[-1]

    async def scenario() -> None:
        root.mkdir()
        (root / "located").write_text("not a directory: no record can be written")
        first = bundles()
        assert await first.node_path(binaries, esbuild_path) == []  # nothing recorded yet
        await first.wait()
        shadow = (await first.node_path(binaries, esbuild_path))[0]  # built all the same
        (root / "located").unlink()
        finder = bundles()  # finds the bundle built, and records it
        assert await finder.node_path(binaries, esbuild_path) == []
        await finder.wait()
        assert await finder.node_path(binaries, esbuild_path) == [shadow]

        gate = asyncio.Event()  # the next build cannot get past esbuild until the gate opens

        async def gated_esbuild() -> str:
            await gate.wait()
            return esbuild

        second = bundles()
        hooks = await asyncio.gather(*(second.node_path(binaries, gated_esbuild) for _ in range(5)))
        assert hooks == [[shadow]] * 5  # five hooks starting together, before the build got anywhere
        gate.set()
        await second.wait()
        assert await second.node_path(binaries, gated_esbuild) == [shadow]  # the build agrees

        # the record names another whole bundle: used until the build answers, then the build's wins
        (record,) = (root / "located").glob("*.json")
        body = json.loads(record.read_text())
        copy = root / "puppeteer-core-copy"
        shutil.copytree(Path(shadow).parent, copy)
        record.write_text(json.dumps({**body, "bundle": copy.name}))
        gate = asyncio.Event()
        other = bundles()
        assert await other.node_path(binaries, gated_esbuild) == [str(copy / "node_modules")]
        gate.set()
        await other.wait()
        assert await other.node_path(binaries, gated_esbuild) == [shadow]
        assert json.loads(record.read_text())["bundle"] == Path(shadow).parent.name  # recorded again
        shutil.rmtree(copy)

        # esbuild gone since: the recorded bundle is still whole and current
        offline = bundles()
        assert await offline.node_path(binaries, no_esbuild) == [shadow]
        await offline.wait()
        assert await offline.node_path(binaries, no_esbuild) == [shadow]

        async def first_hook(bundles: PuppeteerBundles) -> list[str]:
            front = await bundles.node_path(binaries, no_esbuild)
            await bundles.wait()  # its build (failing without esbuild) ends inside this loop
            return front

        # the hooks now name a module the bundle has no shim for: not used
        extra = tmp_path / "hook.js"
        extra.write_text('require("puppeteer-core/internal/cdp/Page.js");\n')
        assert await first_hook(bundles([plugins_dir, extra])) == []

        # the bundle removed: not used
        moved = Path(shadow).parent.with_name("moved")
        Path(shadow).parent.rename(moved)
        try:
            assert await first_hook(bundles()) == []
        finally:
            moved.rename(Path(shadow).parent)
        assert await first_hook(bundles()) == [shadow]  # the control

        # another puppeteer-core installed since, earlier on the same NODE_PATH: not used
        early = tmp_path / "early"
        early.mkdir()
        shadowed = BinaryEnv.layered([BinaryEnv({}, {"NODE_PATH": [str(early)]}), binaries])
        before = set((root / "located").glob("*.json"))
        recorder = bundles()
        await recorder.node_path(shadowed, esbuild_path)
        await recorder.wait()
        assert await recorder.node_path(shadowed, esbuild_path) == [shadow]  # recorded for it
        (early / "puppeteer-core").mkdir()
        (early / "puppeteer-core" / "package.json").write_text('{"name": "puppeteer-core", "version": "0.0.1"}')
        late = bundles()
        assert await late.node_path(shadowed, no_esbuild) == []
        await late.wait()

        # the record names a package.json that changed since (another mtime): not used
        (record,) = before  # the record for node_path
        body = json.loads(record.read_text())
        ino, size, mtime = body["identity"]
        record.write_text(json.dumps({**body, "identity": [ino, size, mtime + 1]}))
        assert await first_hook(bundles()) == []
        record.write_text(json.dumps({**body, "bundle": "../elsewhere"}))  # only a bundle of this root
        assert await first_hook(bundles()) == []
        record.write_text("{torn")
        assert await first_hook(bundles()) == []
        assert not [f for f in (root / "located").iterdir() if f.name.startswith(".record-")]  # no leftovers

    async def waited() -> None:
        try:
            await scenario()
        finally:  # a failed assertion leaves no build running past the test
            for made_bundles in made:
                await made_bundles.wait()

    asyncio.run(waited())
