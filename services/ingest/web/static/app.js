// Installs the app-shell service worker (/sw.js) so the UI can be installed as an app and be a
// share target on phones. Nothing else runs here.
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => {});
}
