// share.js reveals a shared secret on request. The token stays in the page's URL and is sent
// only to this origin's public API; the value is written as text, never parsed as HTML.
(function () {
  "use strict";

  var MESSAGES = {
    404: "Tautan berbagi tidak ditemukan.",
    410: "Tautan berbagi sudah kedaluwarsa, habis dilihat, atau dicabut.",
    429: "Terlalu banyak permintaan. Coba lagi sebentar lagi.",
  };

  function $(id) {
    return document.getElementById(id);
  }

  function showError(text) {
    var el = $("error");
    el.textContent = text;
    el.hidden = false;
  }

  var token = decodeURIComponent(window.location.pathname.split("/").pop() || "");
  if (!/^shr_[A-Za-z0-9_-]{20,200}$/.test(token)) {
    $("reveal").disabled = true;
    showError(MESSAGES[404]);
    return;
  }

  $("reveal").addEventListener("click", function () {
    $("reveal").disabled = true;
    fetch("/api/v1/public/share/" + encodeURIComponent(token), {
      headers: { Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(MESSAGES[response.status] || "Terjadi kesalahan (" + response.status + ").");
        }
        return response.json();
      })
      .then(function (share) {
        $("secret-name").textContent = share.secret_name;
        $("secret-value").textContent = share.value;
        var left = share.max_views - share.view_count;
        $("meta").textContent =
          "Sisa kesempatan melihat: " + left + " dari " + share.max_views +
          ". Kedaluwarsa: " + new Date(share.expires_at).toLocaleString("id-ID") + ".";
        $("ask").hidden = true;
        $("shown").hidden = false;
      })
      .catch(function (err) {
        showError(err.message);
        $("reveal").disabled = false;
      });
  });

  $("copy").addEventListener("click", function () {
    navigator.clipboard.writeText($("secret-value").textContent).then(function () {
      $("copy").textContent = "Tersalin";
    });
  });
})();
