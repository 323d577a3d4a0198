// Boxcar's service worker: the app shell only (stylesheet, script, icons, an offline page).
// It never answers for archived content, replay, the API or any page's data: those always go to
// the network, so a snapshot is never served stale or from another user's cache, and nothing an
// archived page loads passes through here.
const SHELL = "boxcar-shell-v1";
const FILES = ["/static/boxcar.css", "/static/htmx.min.js", "/static/app.js", "/static/icons/icon-192.png", "/static/offline.html"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(SHELL).then((cache) => cache.addAll(FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches.keys()
      .then((keys) => Promise.all(keys.filter((k) => k !== SHELL).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin) return;
  if (url.pathname.startsWith("/static/")) {
    // the shell: network first (a new release's files), the cached copy when offline
    event.respondWith(fetch(request).catch(() => caches.match(request)));
  } else if (request.mode === "navigate" && !url.pathname.startsWith("/archive/") && !url.pathname.startsWith("/replay")) {
    // a UI page: always the network; offline, a page that says so
    event.respondWith(fetch(request).catch(() => caches.match("/static/offline.html")));
  }
});
