// The background worker: the context-menu entries ("Archive this page", "Archive this link"), the
// optional "archive every page I bookmark", and the toolbar badge that shows how the last archive
// went (… archiving, ✓ archived, ! failed; the popup shows the details).
"use strict";

if (typeof importScripts === "function") importScripts("api.js"); // Chromium's service worker; Firefox lists api.js first

const MENU_PAGE = "boxcar-archive-page";
const MENU_LINK = "boxcar-archive-link";

function badge(text, colour, title) {
  ext.action.setBadgeText({ text });
  if (colour) ext.action.setBadgeBackgroundColor({ color: colour });
  if (title) ext.action.setTitle({ title: `Boxcar: ${title}` });
}

/** Archive a URL from the menu or a bookmark: the outcome goes to storage ("last") and the badge. */
async function archiveInBackground(url, title, source) {
  const conf = await Boxcar.settings();
  const record = async (last) => ext.storage.local.set({ last: { url, title, source, at: Date.now(), ...last } });
  try {
    badge("…", "#2f5bd3", `archiving ${url}`);
    await record({ state: "sending", text: "sending to Boxcar" });
    const outcome = await Boxcar.archive(url, { title, tags: Boxcar.splitTags(conf.tags), depth: Number(conf.depth) || 0 });
    if (outcome.state === "archived-before") {
      badge("✓", "#12805c", `${url} was archived before`);
      await record({ state: "archived-before", link: outcome.link, text: "archived before" });
      return outcome;
    }
    await record({ state: "queued", crawlId: outcome.crawlId, text: "queued" });
    const done = await Boxcar.follow(outcome.crawlId, (update) => record({ ...update, crawlId: outcome.crawlId }));
    badge("✓", "#12805c", `archived ${url}`);
    await record({ ...done, text: done.state === "archived" ? "archived" : "still archiving" });
    return done;
  } catch (error) {
    badge("!", "#c4320a", error.message);
    await record({ state: "error", kind: error.kind || "error", text: error.message });
    return { state: "error", kind: error.kind, text: error.message };
  }
}

/** The context menu's click: the link under the pointer, or the page itself. */
async function onMenuClick(info, tab) {
  if (info.menuItemId === MENU_LINK) return archiveInBackground(info.linkUrl, info.linkText || "", "link");
  return archiveInBackground(info.pageUrl || (tab && tab.url), (tab && tab.title) || "", "page");
}

function onBookmarkCreated(_id, node) {
  Boxcar.settings().then((conf) => {
    if (conf.bookmarks && node.url && Boxcar.archivable(node.url)) archiveInBackground(node.url, node.title || "", "bookmark");
  });
}

ext.runtime.onInstalled.addListener(() => {
  ext.contextMenus.removeAll(() => {
    ext.contextMenus.create({ id: MENU_PAGE, title: "Archive this page", contexts: ["page"] });
    ext.contextMenus.create({ id: MENU_LINK, title: "Archive this link", contexts: ["link"] });
  });
});
ext.contextMenus.onClicked.addListener(onMenuClick);
// bookmarks are an optional permission: listen once it is granted (now, or at a later start)
if (ext.bookmarks) ext.bookmarks.onCreated.addListener(onBookmarkCreated);
ext.permissions.onAdded.addListener((granted) => {
  if ((granted.permissions || []).includes("bookmarks") && ext.bookmarks && !ext.bookmarks.onCreated.hasListener(onBookmarkCreated)) {
    ext.bookmarks.onCreated.addListener(onBookmarkCreated);
  }
});

globalThis.onMenuClick = onMenuClick;
globalThis.archiveInBackground = archiveInBackground;
