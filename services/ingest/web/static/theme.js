// Runs before the page is drawn (no flash of the wrong colours): the theme a person chose on this
// device ("light" or "dark"), else none (the system's, through prefers-color-scheme).
(function () {
  try {
    var chosen = localStorage.getItem("boxcar-theme");
    if (chosen === "light" || chosen === "dark") document.documentElement.dataset.theme = chosen;
  } catch (e) { /* storage blocked: the system's theme */ }
})();
