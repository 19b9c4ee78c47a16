// share.js reveals a shared secret on request. The token stays in the page's URL and is sent
// only to this origin's public API; the value is written as text, never parsed as HTML. On
// load a HEAD request (which consumes no view) tells whether the link still works, so a link
// already used up, expired or revoked shows that instead of a button that can only fail.
// A share of an end-to-end team holds an envelope (`cvsm-share1.`): its key is the link's
// #fragment, which browsers never send; e2e.js opens it here, and a missing or wrong key says so.
// The HEAD answer says whether the share is end-to-end (`Cvsm-Share-E2E`), and the button asks
// again before the GET: a link without its key, or a page without WebCrypto (not HTTPS), is
// refused before a view is spent.
(function () {
  "use strict";

  // The texts this script writes, in the page's language (`<html lang>`, set by the server).
  var TEXTS = {
    id: {
      404: "Tautan berbagi tidak ditemukan.",
      410: "Tautan berbagi sudah kedaluwarsa, habis dilihat, atau dicabut.",
      429: "Terlalu banyak permintaan. Coba lagi sebentar lagi.",
      failed: "Terjadi kesalahan ({status}).",
      incomplete: "Tautan ini tidak lengkap: kunci setelah tanda # hilang atau terpotong. " +
        "Salin seluruh tautan dari pengirimnya.",
      https: "Secret ini terenkripsi end-to-end dan hanya dapat dibuka " +
        "lewat HTTPS: buka tautan ini dengan alamat https://.",
      wrongKey: "Kunci setelah tanda # tidak membuka secret ini. Salin seluruh tautan " +
        "dari pengirimnya.",
      left: "Sisa kesempatan melihat: {left} dari {max}. Kedaluwarsa: {expires}.",
      last: "Ini tampilan terakhir: tautan ini sudah habis dipakai. Simpan secret sekarang; " +
        "memuat ulang halaman tidak akan menampilkannya lagi.",
      copied: "Tersalin",
      locale: "id-ID",
    },
    en: {
      404: "Share link not found.",
      410: "The share link has expired, been viewed its last time, or been revoked.",
      429: "Too many requests. Try again in a moment.",
      failed: "Something went wrong ({status}).",
      incomplete: "This link is incomplete: the key after the # sign is missing or cut off. " +
        "Copy the whole link from its sender.",
      https: "This secret is end-to-end encrypted and opens only " +
        "over HTTPS: open this link with its https:// address.",
      wrongKey: "The key after the # sign does not open this secret. Copy the whole link " +
        "from its sender.",
      left: "Views left: {left} of {max}. Expires: {expires}.",
      last: "This is the last view: this link is used up. Save the secret now; " +
        "reloading the page will not show it again.",
      copied: "Copied",
      locale: "en-GB",
    },
  };
  var T = TEXTS[document.documentElement.lang] || TEXTS.id;
  function text(key, values) {
    return String(T[key]).replace(/\{(\w+)\}/g, function (all, name) {
      return values && name in values ? String(values[name]) : all;
    });
  }
  var MESSAGES = { 404: T[404], 410: T[410], 429: T[429] };

  function $(id) {
    return document.getElementById(id);
  }

  function showError(text) {
    var el = $("error");
    el.textContent = text;
    el.hidden = false;
  }

  // The link cannot be used (again): no button, the reason instead.
  function showGone(text) {
    $("ask").hidden = true;
    $("gone-reason").textContent = text;
    $("gone").hidden = false;
  }

  var token = decodeURIComponent(window.location.pathname.split("/").pop() || "");
  if (!/^shr_[A-Za-z0-9_-]{20,200}$/.test(token)) {
    showGone(MESSAGES[404]);
    return;
  }
  var address = "/api/v1/public/share/" + encodeURIComponent(token);
  var fragment = window.location.hash.replace(/^#/, "");

  var INCOMPLETE = T.incomplete;

  // The fragment's key of an end-to-end share, or why it cannot be opened here (before a view
  // is spent).
  function shareKey() {
    var E = window.CvsmE2E;
    if (!window.isSecureContext || !E || !E.available()) {
      throw new Error(T.https);
    }
    if (!/^[A-Za-z0-9_-]{43}$/.test(fragment)) throw new Error(INCOMPLETE);
    try {
      return E.unb64u(fragment, 32);
    } catch (e) {
      throw new Error(INCOMPLETE);
    }
  }

  // The value as shown: an end-to-end share's envelope opened with the fragment's key.
  function opened(share) {
    if (!share.e2e) return Promise.resolve(share.value);
    var key;
    try {
      key = shareKey();
    } catch (e) {
      return Promise.reject(e);
    }
    return window.CvsmE2E.openShare(share.value, key).catch(function () {
      throw new Error(T.wrongKey);
    });
  }

  // HEAD: whether the link still works (404, 410 shown as gone; null then) and whether the
  // share is end-to-end; consumes no view.
  function peek() {
    return fetch(address, { method: "HEAD", cache: "no-store", credentials: "omit",
                            referrerPolicy: "no-referrer" })
      .then(function (response) {
        if (response.status === 404 || response.status === 410) {
          showGone(MESSAGES[response.status]);
          return null;
        }
        if (!response.ok) {
          throw new Error(MESSAGES[response.status] ||
                          text("failed", { status: response.status }));
        }
        return { e2e: response.headers.get("Cvsm-Share-E2E") === "1" };
      });
  }

  peek().catch(function () { /* the button still works, and says what went wrong */ });

  $("reveal").addEventListener("click", function () {
    $("reveal").disabled = true;
    $("error").hidden = true;
    peek().then(function (found) {
      if (found === null) return null;
      if (found.e2e) shareKey();  // refused here: no view spent
      return fetch(address, { headers: { Accept: "application/json" }, cache: "no-store",
                              credentials: "omit", referrerPolicy: "no-referrer" });
    })
      .then(function (response) {
        if (response === null) return null;
        if (response.status === 404 || response.status === 410) {
          showGone(MESSAGES[response.status]);
          return null;
        }
        if (!response.ok) {
          throw new Error(MESSAGES[response.status] ||
                          text("failed", { status: response.status }));
        }
        return response.json();
      })
      .then(function (share) {
        if (share === null) return null;
        return opened(share).then(function (value) { return [share, value]; });
      })
      .then(function (found) {
        if (found === null) return;
        var share = found[0], value = found[1];
        $("secret-name").textContent = share.secret_name;
        $("secret-value").textContent = value;
        var left = share.max_views - share.view_count;
        $("meta").textContent = left > 0
          ? text("left", { left: left, max: share.max_views,
                           expires: new Date(share.expires_at).toLocaleString(T.locale) })
          : T.last;
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
      $("copy").textContent = T.copied;
    });
  });
})();
