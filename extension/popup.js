// The toolbar popup: the current tab (granted by activeTab when the button is clicked), tags and
// depth, then queued → archived with a link to the snapshot, or the error Boxcar gave.
"use strict";

const $ = (id) => document.getElementById(id);
let target = { url: "", title: "" };

function show(text, kind = "", link = "") {
  const box = $("status");
  box.className = kind;
  box.textContent = text;
  if (link) {
    const a = document.createElement("a");
    a.href = link;
    a.target = "_blank";
    a.rel = "noopener";
    a.id = "snapshot-link";
    a.textContent = "Open the snapshot";
    box.append(" ", a);
  }
}

async function currentTab() {
  // a popup opened for a page by URL (popup.html?url=…&title=…: the options page's "try it", tests)
  const params = new URLSearchParams(location.search);
  if (params.get("url")) return { url: params.get("url"), title: params.get("title") || "" };
  const [tab] = await ext.tabs.query({ active: true, currentWindow: true });
  return { url: (tab && tab.url) || "", title: (tab && tab.title) || "" };
}

async function archive(again) {
  $("archive").disabled = true;
  $("again-box").hidden = true;
  const tags = Boxcar.splitTags($("tags").value);
  const depth = Number($("depth").value) || 0;
  await ext.storage.local.set({ tags: $("tags").value, depth });
  try {
    show("Sending to Boxcar…", "busy");
    const outcome = await Boxcar.archive(target.url, { title: target.title, tags, depth, again });
    if (outcome.state === "archived-before") {
      show("Archived before.", "ok", outcome.link);
      $("again-box").hidden = false;
      return;
    }
    show("Queued…", "busy");
    const done = await Boxcar.follow(outcome.crawlId, (update) => show(`Archiving: ${update.text}…`, "busy"));
    const failed = done.failed && done.failed.length ? ` (failed: ${done.failed.join(", ")})` : "";
    show(done.state === "archived" ? `Archived${failed}.` : "Still archiving: follow it in Boxcar.", "ok", done.link);
  } catch (error) {
    show(error.message, "error");
    if (error.kind === "token" || error.kind === "setup") $("setup").hidden = false;
  } finally {
    $("archive").disabled = false;
  }
}

async function main() {
  const conf = await Boxcar.settings();
  $("open-options").addEventListener("click", () => ext.runtime.openOptionsPage());
  if (!conf.server || !conf.token) {
    $("setup").hidden = false;
    return;
  }
  target = await currentTab();
  $("title").textContent = target.title || "(no title)";
  $("url").textContent = target.url;
  $("tags").value = conf.tags || "";
  $("depth").value = String(conf.depth || 0);
  $("form").hidden = false;
  if (!Boxcar.archivable(target.url)) {
    $("archive").disabled = true;
    show(Boxcar.notArchivable(target.url).message, "error");
    return;
  }
  $("form").addEventListener("submit", (event) => {
    event.preventDefault();
    archive(false);
  });
  $("again").addEventListener("click", () => archive(true));
}

main();
