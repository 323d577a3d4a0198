// The UI's behaviour that is not htmx: the app-shell service worker (installable app, share
// target), the theme toggle, keyboard shortcuts, and the list's bulk selection.
"use strict";

if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(function () {});
}

// ---------------------------------------------------------------- theme: system → light → dark
var THEMES = ["system", "light", "dark"];
function currentTheme() {
  return document.documentElement.dataset.theme || "system";
}
function applyTheme(theme) {
  if (theme === "system") {
    delete document.documentElement.dataset.theme;
    try { localStorage.removeItem("boxcar-theme"); } catch (e) {}
  } else {
    document.documentElement.dataset.theme = theme;
    try { localStorage.setItem("boxcar-theme", theme); } catch (e) {}
  }
  var button = document.getElementById("theme-toggle");
  if (button) {
    button.textContent = { system: "◐ Auto", light: "☀ Light", dark: "☾ Dark" }[theme];
    button.setAttribute("aria-label", "Colour theme: " + theme + " (change)");
  }
}

// ---------------------------------------------------------------- keyboard shortcuts
var SHORTCUTS = { "/": "#search-box", "a": "/add", "s": "/", "c": "/crawls", "f": "/feeds" };
function typing(target) {
  return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
}
document.addEventListener("keydown", function (event) {
  if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
  if (event.key === "?") {
    var help = document.getElementById("shortcuts");
    if (help && help.showModal) help.showModal();
    event.preventDefault();
    return;
  }
  var to = SHORTCUTS[event.key];
  if (!to) return;
  event.preventDefault();
  if (to.charAt(0) === "#") {
    var box = document.querySelector(to);
    if (box) box.focus();
  } else {
    window.location.assign(to);
  }
});

document.addEventListener("DOMContentLoaded", function () {
  applyTheme(currentTheme());
  var toggle = document.getElementById("theme-toggle");
  if (toggle) {
    toggle.addEventListener("click", function () {
      applyTheme(THEMES[(THEMES.indexOf(currentTheme()) + 1) % THEMES.length]);
    });
  }
  var close = document.getElementById("shortcuts-close");
  if (close) close.addEventListener("click", function () { document.getElementById("shortcuts").close(); });

  // ---------------------------------------------------------------- bulk selection
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
    });
  }
  var bulk = document.getElementById("bulk");
  if (bulk) {
    bulk.addEventListener("submit", function (event) {
      var picked = document.querySelectorAll("input.pick:checked").length;
      var action = bulk.elements.action.value;
      if (!picked) {
        event.preventDefault();
        window.alert("Tick the snapshots to act on first.");
      } else if (action === "delete" && !window.confirm("Delete " + picked + " snapshot(s), their results and their files? This cannot be undone.")) {
        event.preventDefault();
      }
    });
  }
});
