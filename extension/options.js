// Options: the server's address and an API token, checked with a call before anything is
// archived; the optional "archive every page I bookmark" (asks for the bookmarks permission).
"use strict";

const $ = (id) => document.getElementById(id);

function show(text, kind) {
  $("status").className = kind;
  $("status").textContent = text;
}

async function save(event) {
  event.preventDefault();
  $("grant").hidden = true;
  let server;
  try {
    server = Boxcar.normalizeServer($("server").value);
  } catch (error) {
    show(error.message, "error");
    return;
  }
  const token = $("token").value.trim();
  $("server").value = server;
  const wantBookmarks = $("bookmarks").checked;
  if (wantBookmarks && !(await ext.permissions.contains({ permissions: ["bookmarks"] }))) {
    const granted = await ext.permissions.request({ permissions: ["bookmarks"] }).catch(() => false);
    if (!granted) $("bookmarks").checked = false;
  }
  await ext.storage.local.set({ server, token, bookmarks: $("bookmarks").checked });
  show("Checking…", "busy");
  try {
    await Boxcar.check(server, token);
    show(`Connected to ${server}: this token can archive.`, "ok");
  } catch (error) {
    show(error.message, "error");
    // a reverse proxy that drops Boxcar's CORS answer for extensions: access to the origin instead
    if (error.kind === "unreachable") $("grant").hidden = false;
  }
}

async function grant() {
  const server = Boxcar.normalizeServer($("server").value);
  const granted = await ext.permissions.request({ origins: [new URL(server).origin + "/*"] }).catch(() => false);
  show(granted ? "Access granted: Save and check again." : "Access not granted.", granted ? "ok" : "error");
}

async function main() {
  const conf = await Boxcar.settings();
  $("server").value = conf.server;
  $("token").value = conf.token;
  $("bookmarks").checked = Boolean(conf.bookmarks);
  $("form").addEventListener("submit", save);
  $("grant").addEventListener("click", grant);
}

main();
