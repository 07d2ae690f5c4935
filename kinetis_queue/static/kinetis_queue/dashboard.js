/* The dashboard's refresh (kinetis_queue/dashboard): every few seconds, fetch the page's live part
   (?live=1) and put it in place of the one shown. Progressive enhancement only: the page as served
   holds every figure, and without this script it reads the same (reloaded by hand).
   A round is skipped while the tab is hidden or while focus is inside the live part (a button about to
   be pressed is not swapped away). Any unexpected answer (an error, a redirect to the login page, a
   page without the live part) stops the refreshing and says so: the figures shown never pretend to
   be fresh. */
(function () {
  "use strict";
  var live = document.getElementById("dashboard-live");
  var state = document.getElementById("dashboard-refresh-state");
  if (!live || !window.fetch || !window.DOMParser) {
    return;
  }
  var url = live.getAttribute("data-live-url");
  var every = 1000 * Number(live.getAttribute("data-refresh-seconds") || 5);
  if (state) {
    state.textContent = state.getAttribute("data-on");
  }

  function stop() {
    if (state) {
      state.textContent = state.getAttribute("data-stopped");
      state.className = "stopped";
    }
  }

  function busy() {
    var focused = document.activeElement;
    return document.hidden || (focused && focused !== document.body && live.contains(focused));
  }

  function refresh() {
    if (busy()) {
      window.setTimeout(refresh, every);
      return;
    }
    fetch(url, { credentials: "same-origin", redirect: "error", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("status " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("dashboard-live");
        if (!fresh) {
          throw new Error("no live part in the answer");
        }
        live.replaceWith(fresh);
        live = fresh;
        window.setTimeout(refresh, every);
      })
      .catch(stop);
  }

  window.setTimeout(refresh, every);
})();
