// cvsm dashboard: the steps of a sign-in through an identity provider that need a script.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // Linking from the account page: go on to the provider (the link works without this file).
  const onward = document.querySelector("a[data-oauth-redirect]");
  if (onward) {
    window.location.assign(onward.href);
    return;
  }
  // The callback page: the fragment carries the session JWT (`#token=`) or `#error=`.
  const form = document.getElementById("oauth-session");
  if (!form) return;
  const params = new URLSearchParams(window.location.hash.slice(1));
  // The token leaves the address bar and the history at once.
  window.history.replaceState(null, "", window.location.pathname);
  const token = params.get("token");
  if (token && !params.get("error")) {
    form.elements.token.value = token;
    document.getElementById("oauth-working").hidden = false;
    form.submit();
  } else {
    document.getElementById("oauth-error").hidden = false;
  }
});
