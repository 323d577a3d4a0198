// Boxcar's API as the extension uses it: settings, one request function that turns every failure
// into a sentence a person can act on, archive, follow a crawl to its snapshot. Shared by the
// popup, the options page and the background worker (no remote code: everything is in the package).
"use strict";

const ext = globalThis.browser ?? globalThis.chrome;

class BoxcarError extends Error {
  /** kind: "setup" | "unreachable" | "token" | "readonly" | "input" | "server" | "page" */
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

const Boxcar = {
  DEFAULTS: { server: "", token: "", depth: 0, tags: "", bookmarks: false },

  async settings() {
    const stored = await ext.storage.local.get(Object.keys(Boxcar.DEFAULTS));
    return { ...Boxcar.DEFAULTS, ...stored };
  },

  /** The server's origin from what a person typed: scheme added, path and query dropped. */
  normalizeServer(value) {
    let text = (value || "").trim();
    if (!text) throw new BoxcarError("setup", "Give the address of your Boxcar server, e.g. http://boxcar.lan:8000");
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) text = "http://" + text;
    let url;
    try {
      url = new URL(text);
    } catch {
      throw new BoxcarError("setup", `"${value}" is not a server address`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new BoxcarError("setup", "The server address must start with http:// or https://");
    }
    return url.origin;
  },

  /** Whether a tab's URL is a web page Boxcar can fetch; browser pages, local files and built-in viewers are not. */
  archivable(url) {
    try {
      const { protocol } = new URL(url);
      return protocol === "http:" || protocol === "https:";
    } catch {
      return false;
    }
  },

  notArchivable(url) {
    const scheme = String(url || "").split(":")[0] || "this";
    return new BoxcarError(
      "page",
      `This page can't be archived: ${scheme}: pages (browser pages, local files, built-in viewers) are not on the web. ` +
        "Open the http(s) address of what you want to save and archive that.",
    );
  },

  /** fetch() a path of the server with the token; resolves to the parsed JSON, or throws BoxcarError. */
  async request(path, { method = "GET", body, server, token } = {}) {
    const conf = server === undefined ? await Boxcar.settings() : { server, token };
    if (!conf.server) throw new BoxcarError("setup", "Boxcar is not set up yet: open the extension's options and give your server's address and an API token.");
    let response;
    try {
      response = await fetch(conf.server + path, {
        method,
        credentials: "omit", // the token is the only credential: never the browser's cookies
        headers: {
          ...(conf.token ? { Authorization: `Bearer ${conf.token}` } : {}),
          ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
        },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
    } catch {
      throw new BoxcarError("unreachable", `Boxcar server unreachable at ${conf.server}: is it running, and is the address right?`);
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (response.ok) return data;
    const detail = (data && (data.detail || (data.errors || []).join("; "))) || response.statusText;
    if (response.status === 401) throw new BoxcarError("token", "Boxcar refused the API token (expired, revoked or mistyped): reconnect in the extension's options with a token from Boxcar's Settings.");
    if (response.status === 403) throw new BoxcarError("readonly", `This API token may only read (${detail}): create a token without "read-only" in Boxcar's Settings.`);
    if (response.status === 400 || response.status === 422) throw new BoxcarError("input", `Boxcar did not accept it: ${detail}`);
    throw new BoxcarError("server", `Boxcar answered ${response.status}: ${detail}`);
  },

  /** Check a server address and token: resolves to {scope}, throws BoxcarError. */
  async check(server, token) {
    if (!token) throw new BoxcarError("setup", "Paste an API token (Boxcar → Settings → New token).");
    const answer = await Boxcar.request("/api/v1/auth/check_api_token", { method: "POST", body: { token }, server, token });
    if (!answer || !answer.success) throw new BoxcarError("token", "Boxcar does not know this token (expired, revoked or mistyped): create one in Boxcar's Settings.");
    if (answer.scope !== "write") throw new BoxcarError("readonly", 'This token may only read: create a token without "read-only" in Boxcar\'s Settings.');
    return answer;
  },

  snapshotLink(server, id) {
    return `${server}/snapshots/${id}`;
  },

  /**
   * Archive one URL. Resolves to {state: "queued", crawlId} or, when the URL was archived before
   * and `again` is false, {state: "archived-before", link}. Throws BoxcarError.
   */
  async archive(url, { title = "", tags = [], depth = 0, again = false } = {}) {
    if (!Boxcar.archivable(url)) throw Boxcar.notArchivable(url);
    const conf = await Boxcar.settings();
    const seed = title ? { url, title: title.slice(0, 500) } : url;
    const created = await Boxcar.request("/api/v1/crawls", {
      method: "POST",
      body: { urls: [seed], tags, max_depth: depth, only_new: !again },
    });
    if (created.urls === 0 && created.skipped_existing > 0) {
      const found = await Boxcar.request(`/api/v1/snapshots?url=${encodeURIComponent(url)}&limit=1000`);
      const items = (found && found.items) || [];
      const last = items[items.length - 1];
      return { state: "archived-before", link: last ? Boxcar.snapshotLink(conf.server, last.id) : conf.server + "/" };
    }
    return { state: "queued", crawlId: created.id };
  },

  /**
   * Follow a crawl until its snapshot is sealed: calls onUpdate({state, text}) on each change and
   * resolves to {state: "archived", link, failed}. Polls once a second (a crawl of one page).
   */
  async follow(crawlId, onUpdate = () => {}, { timeoutMs = 15 * 60 * 1000 } = {}) {
    const conf = await Boxcar.settings();
    const started = Date.now();
    let last = "";
    while (Date.now() - started < timeoutMs) {
      const crawl = await Boxcar.request(`/api/v1/crawls/${crawlId}`);
      const snaps = crawl.snapshots || {};
      const text = crawl.status === "sealed" ? "sealed" : `${snaps.sealed || 0} of ${snaps.total || 0} pages archived, ${crawl.status}`;
      if (text !== last) onUpdate({ state: "archiving", text });
      last = text;
      if (crawl.status === "sealed" && crawl.refused > 0) {
        throw new BoxcarError("input", `Boxcar refused to fetch it: ${crawl.refusal}`);
      }
      if (crawl.status === "sealed") {
        const page = await Boxcar.request(`/api/v1/snapshots?crawl_id=${crawlId}&limit=1`);
        const snap = page.items && page.items[0];
        if (!snap) return { state: "archived", link: `${conf.server}/crawls/${crawlId}`, failed: [] };
        const failed = (snap.results || []).filter((r) => r.status === "failed").map((r) => r.plugin);
        return { state: "archived", link: Boxcar.snapshotLink(conf.server, snap.id), failed };
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    return { state: "archiving", link: `${conf.server}/crawls/${crawlId}`, failed: [] };
  },

  splitTags(text) {
    return String(text || "").split(",").map((t) => t.trim()).filter(Boolean);
  },
};

globalThis.Boxcar = Boxcar;
globalThis.BoxcarError = BoxcarError;
