/**
 * Boxcar's SingleFile hook: the snapshot's own Chrome tab saved as one self-contained HTML file.
 *
 * abx-plugins 1.13.572's singlefile hook drives the SingleFile *extension*, which comes only from
 * the Chrome Web Store (unreachable here). The npm package ``single-file-cli`` ships the same
 * page script (``lib/single-file-bundle.js``, SingleFile's core); this hook injects it into the tab
 * the chrome plugin navigated (as the extension does: no second page load) and writes
 * ``singlefile/singlefile.html``, the file ArchiveBox's singlefile plugin writes.
 *
 * The script runs in an isolated world of the tab (as the extension's content script does), out of
 * the page's reach; every resource it inlines is fetched by the browser, through the browser's
 * proxy (Boxcar's egress proxy), only over http(s) — never by Node, never ``file:``.
 *
 * Protocol as every hook: ``--url=U``, cwd ``$SNAP_DIR/singlefile``, one ``ArchiveResult`` line.
 * Env: ``BOXCAR_ABX_PLUGINS_DIR`` (abx-plugins' plugins dir, for the chrome session helpers),
 * ``SINGLEFILE_TIMEOUT``/``TIMEOUT``, ``single-file`` on ``PATH`` (the npm package's bin).
 */

const fs = require("fs");
const path = require("path");
const { pathToFileURL } = require("url");

const PLUGINS_DIR = process.env.BOXCAR_ABX_PLUGINS_DIR;
const utils = require(path.join(PLUGINS_DIR, "base", "utils.js"));
utils.ensureNodeModuleResolution(module);
const { connectToPage } = require(path.join(PLUGINS_DIR, "chrome", "chrome_utils.js"));

const OUTPUT_FILE = "singlefile.html";
const WORLD_NAME = "boxcar-singlefile";
const FETCH_BINDING = "__boxcarSingleFileFetch";
const MAX_RESOURCE_BYTES = 10 * 1024 * 1024;

// SingleFile CLI's defaults, with ArchiveBox's capture profile: keep hidden elements, unused
// styles and fonts, alternative media and images (an archived page is viewed at other sizes).
const PAGE_OPTIONS = {
  removeHiddenElements: false,
  removeUnusedStyles: false,
  removeUnusedFonts: false,
  removeAlternativeFonts: true,
  removeAlternativeMedias: false,
  removeAlternativeImages: false,
  removeNoScriptTags: true,
  removeFrames: false,
  blockScripts: true,
  blockVideos: true,
  blockAudios: true,
  blockAlternativeImages: false,
  loadDeferredImages: true,
  loadDeferredImagesMaxIdleTime: 1500,
  compressHTML: true,
  compressCSS: false,
  groupDuplicateImages: true,
  maxSizeDuplicateImages: 512 * 1024,
  maxResourceSizeEnabled: true,
  maxResourceSize: 10,
  insertMetaCSP: true,
  insertSingleFileComment: true,
  insertCanonicalLink: true,
  resolveLinks: true,
  saveOriginalURLs: false,
  compressContent: false,
  selfExtractingArchive: false,
  backgroundSave: false,
  infobarTemplate: "",
  filenameTemplate: "singlefile.html",
};

function singleFileBundle() {
  for (const dir of (process.env.PATH || "").split(path.delimiter)) {
    const bin = path.join(dir, "single-file");
    if (fs.existsSync(bin)) {
      return path.join(path.dirname(fs.realpathSync(bin)), "lib", "single-file-bundle.js");
    }
  }
  throw new Error("single-file (npm single-file-cli) is not on PATH");
}

/** Load an http(s) resource with the browser's network stack (its proxy; no CORS). */
async function browserFetch(cdp, frameId, url) {
  const scheme = new URL(url).protocol;
  if (scheme !== "http:" && scheme !== "https:") throw new Error(`refused ${scheme} resource`);
  const { resource } = await cdp.send("Network.loadNetworkResource", {
    frameId,
    url,
    options: { disableCache: false, includeCredentials: false },
  });
  if (!resource.success) throw new Error(resource.netErrorName || `HTTP ${resource.httpStatusCode}`);
  const chunks = [];
  let size = 0;
  try {
    for (;;) {
      const part = await cdp.send("IO.read", { handle: resource.stream, size: 1 << 20 });
      const bytes = Buffer.from(part.data, part.base64Encoded ? "base64" : "utf8");
      size += bytes.length;
      if (size > MAX_RESOURCE_BYTES) throw new Error(`over ${MAX_RESOURCE_BYTES} bytes`);
      chunks.push(bytes);
      if (part.eof) break;
    }
  } finally {
    await cdp.send("IO.close", { handle: resource.stream }).catch(() => {});
  }
  return { status: resource.httpStatusCode || 200, headers: resource.headers || {}, data: Buffer.concat(chunks).toString("base64") };
}

/** What runs in the isolated world before SingleFile: its fetch, falling back to the binding. */
function worldFetchSetup(binding) {
  const pending = new Map();
  let next = 0;
  globalThis.__boxcarFetchDone = (id, reply) => {
    const waiter = pending.get(id);
    pending.delete(id);
    if (!waiter) return;
    if (!reply.ok) return waiter.reject(new Error(reply.error));
    const bytes = Uint8Array.from(atob(reply.data), (c) => c.charCodeAt(0));
    waiter.resolve({ status: reply.status, headers: new Headers(reply.headers), arrayBuffer: async () => bytes.buffer });
  };
  globalThis.singlefile.init({
    fetch: async (url, init) => {
      try {
        return await fetch(url, init);
      } catch {
        const id = ++next;
        return new Promise((resolve, reject) => {
          pending.set(id, { resolve, reject });
          globalThis[binding](JSON.stringify({ id, url: String(url) }));
        });
      }
    },
  });
}

/**
 * Run SingleFile in an isolated world of the tab's main frame, as the extension's content script
 * runs: the page's own scripts cannot reach it or its binding. Resources the world's fetch cannot
 * read (cross-origin without CORS) are loaded by the browser (``Network.loadNetworkResource``),
 * so through the browser's proxy; never from Node, never other than http(s).
 */
async function capture(page, timeoutMs) {
  const { script } = await import(pathToFileURL(singleFileBundle()).href);
  const cdp = await page.createCDPSession();
  try {
    const { frameTree } = await cdp.send("Page.getFrameTree");
    const frameId = frameTree.frame.id;
    const { executionContextId } = await cdp.send("Page.createIsolatedWorld", { frameId, worldName: WORLD_NAME });
    await cdp.send("Runtime.enable");
    await cdp.send("Runtime.addBinding", { name: FETCH_BINDING, executionContextId });
    cdp.on("Runtime.bindingCalled", async (event) => {
      if (event.name !== FETCH_BINDING || event.executionContextId !== executionContextId) return;
      const { id, url } = JSON.parse(event.payload);
      let reply;
      try {
        reply = { ok: true, ...(await browserFetch(cdp, frameId, url)) };
      } catch (error) {
        reply = { ok: false, error: String(error.message || error) };
      }
      await cdp
        .send("Runtime.evaluate", {
          contextId: executionContextId,
          expression: `globalThis.__boxcarFetchDone(${JSON.stringify(id)}, ${JSON.stringify(reply)})`,
        })
        .catch(() => {});
    });
    const evaluate = async (expression) => {
      const { result, exceptionDetails } = await cdp.send("Runtime.evaluate", {
        expression,
        contextId: executionContextId,
        awaitPromise: true,
        returnByValue: true,
      });
      if (exceptionDetails) {
        throw new Error(exceptionDetails.exception?.description || exceptionDetails.text || "evaluation failed");
      }
      return result.value;
    };
    await evaluate(`${script};\n(${worldFetchSetup.toString()})(${JSON.stringify(FETCH_BINDING)});\nundefined`);
    const run = `(async () => {
      const data = await globalThis.singlefile.getPageData(${JSON.stringify(PAGE_OPTIONS)});
      return { content: data.content, title: data.title || document.title || "" };
    })()`;
    let timer;
    const deadline = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`SingleFile did not finish within ${timeoutMs / 1000}s`)), timeoutMs);
    });
    try {
      return await Promise.race([evaluate(run), deadline]);
    } finally {
      clearTimeout(timer);
    }
  } finally {
    await cdp.detach().catch(() => {});
  }
}

async function main() {
  const args = utils.parseArgs();
  if (!args.url) {
    utils.emitArchiveResultRecord("failed", "missing --url");
    process.exit(1);
  }
  if (!utils.getEnvBool("SINGLEFILE_ENABLED", true)) {
    utils.emitArchiveResultRecord("skipped", "SINGLEFILE_ENABLED=False");
    process.exit(0);
  }
  if (utils.hasStaticFileOutput()) {
    utils.emitArchiveResultRecord("noresults", "staticfile already handled");
    process.exit(0);
  }
  if (utils.isNonHtmlDocument()) {
    utils.emitArchiveResultRecord("noresults", "Browser document is not HTML");
    process.exit(0);
  }
  const timeoutMs = utils.getEnvInt("SINGLEFILE_TIMEOUT", utils.getEnvInt("TIMEOUT", 60)) * 1000;
  console.log("SingleFile extraction started");
  let browser = null;
  try {
    const connection = await connectToPage({
      chromeSessionDir: "../chrome",
      timeoutMs,
      waitForNavigationComplete: true,
      postLoadDelayMs: 200,
    });
    browser = connection.browser;
    const { content } = await capture(connection.page, Math.max(5000, timeoutMs - 5000));
    if (!content || content.length < 100) {
      utils.emitArchiveResultRecord("noresults", "SingleFile produced no content");
      process.exit(0);
    }
    utils.writeFileAtomic(path.join(process.cwd(), OUTPUT_FILE), content);
    utils.emitArchiveResultRecord("succeeded", `singlefile/${OUTPUT_FILE}`);
    process.exit(0);
  } catch (error) {
    console.error(`ERROR: ${error.stack || error}`);
    utils.emitArchiveResultRecord("failed", `${error.name || "Error"}: ${error.message || error}`);
    process.exit(1);
  } finally {
    if (browser) browser.disconnect();
  }
}

main();
