"""The bundled puppeteer-core of the browser hooks (``hook_executor/nodebundle.py``): built with the
real esbuild from the chrome plugin's real install, reached through abx-plugins' own
``resolvePuppeteerModule`` in Node, able to drive a real Chromium to a local page exactly as the
unbundled package does; put in front of a Node hook's ``NODE_PATH`` only once it is built, and
never when it cannot be."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from boxcar.binary_resolver.resolver import resolve_binary
from boxcar.hook_executor.binaries import BinaryEnv, BinaryUnavailable
from boxcar.hook_executor.warm import WarmInterpreters
from boxcar.hook_executor.warm.nodebundle import PuppeteerBundles, entry_points
from boxcar.shared.binaries import ESBUILD
from boxcar.shared.messages import BinaryRequest
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
    values: dict[str, str] = {}
    node_path: list[str] = []

    def resolve(record: dict) -> str:
        reply = resolve_binary(
            BinaryRequest.from_record(record, plugin="chrome", machine="test"), lib_dir, providers, "test"
        )
        assert reply.ok and reply.binary, reply.error
        node_path.extend(p for p in reply.binary.env_paths.get("NODE_PATH", []) if p not in node_path)
        return reply.binary.abspath

    for key, record in catalog.required_binaries("chrome", section, str(lib_dir)):
        path = resolve(record)
        if key:
            values[key] = path
    return BinaryEnv(values, {"NODE_PATH": node_path}), resolve(ESBUILD)


def test_entry_points_are_what_the_hooks_require(tmp_path):
    plugins = get_catalog().plugins_dir
    found = entry_points([plugins])
    assert found[:2] == [".", "internal/node-env-setup.js"]  # the package (modalcloser), then what loads first
    assert {"internal/common/Puppeteer.js", "internal/environment.js", "internal/node/ScreenRecorder.js"} <= set(found)
    extra = tmp_path / "hook.js"
    extra.write_text('require("puppeteer-core/internal/cdp/Page.js");\n')
    assert "internal/cdp/Page.js" in entry_points([plugins, extra])


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

    shadow = asyncio.run(bundles.build(node_path, node, esbuild_path))
    assert shadow is not None and shadow.name == "node_modules"
    assert asyncio.run(bundles.build(node_path, node, esbuild_path)) == shadow  # built once
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
        assert warm.node_path(python_hook, binaries, esbuild_path) is binaries  # not a Node hook
        assert warm.node_path(node_hook, binaries, esbuild_path) is binaries  # not built yet: started
        await bundles.wait()
        after = warm.node_path(node_hook, binaries, esbuild_path)
        shadow = after.paths["NODE_PATH"][0]
        assert after.paths["NODE_PATH"] == [shadow, *node_path] and after.values == binaries.values
        assert (Path(shadow) / "puppeteer-core" / "bundle.js").is_file()
        assert str(tmp_path / "node-bundles") in shadow

        failing = WarmInterpreters(
            tmp_path / "warm2", catalog, ["title"], bundles=PuppeteerBundles(tmp_path / "other", [plugins_dir])
        )
        assert failing.node_path(node_hook, binaries, no_esbuild) is binaries
        await failing.bundles.wait()
        assert failing.node_path(node_hook, binaries, no_esbuild) is binaries  # unbundled, and no retry loop
        assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())

        elsewhere = BinaryEnv(binaries.values, {"NODE_PATH": [str(tmp_path)]})  # no puppeteer on it
        assert warm.node_path(node_hook, elsewhere, esbuild_path) is elsewhere
        await bundles.wait()
        assert warm.node_path(node_hook, elsewhere, esbuild_path) is elsewhere

    with caplog.at_level(logging.WARNING, logger="boxcar.hook_executor.warm.nodebundle"):
        asyncio.run(scenario())
    assert "puppeteer-core unbundled: esbuild unavailable: binary 'esbuild' unavailable" in caplog.text
