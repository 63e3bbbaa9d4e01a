// Refreshes the overview's counts from GET /api/overview every 10 seconds (the console reads it anew at most that often), without a reload.
"use strict";
(function () {
  var live = document.getElementById("live");
  if (!live) { return; }
  var src = live.getAttribute("data-src");
  function refresh() {
    fetch(src, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        var counts = data.counts || {};
        if (data.replicas_wanted !== undefined) { counts.replicas_wanted = data.replicas_wanted; }
        live.querySelectorAll("[data-count]").forEach(function (el) {
          var k = el.getAttribute("data-count");
          if (counts[k] !== undefined) { el.textContent = String(counts[k]); }
        });
        var at = document.querySelector("[data-at]");
        if (at && data.at) { at.textContent = String(data.at).replace(/\.\d+Z$/, "Z"); }
      })
      .catch(function () {});
  }
  setInterval(refresh, 10000);
})();
