// cvsm dashboard: the steps of a sign-in through an identity provider that need a script.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // Linking from the account page: go on to the provider (the link works without this file).
  const onward = document.querySelector("a[data-oauth-redirect]");
  if (onward) {
    window.location.assign(onward.href);
  }
});
