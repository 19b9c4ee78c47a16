// e2e-pages.js: the dashboard's pages of end-to-end teams (docs/e2e.md). The pages stay
// server-rendered and every form goes through the server's form kit; this script only does the
// cryptography (with e2e.js) and fills hidden fields before a form is sent. A field that holds
// a plaintext value has no `name`, so a form never sends it; the buttons that would need the
// cryptography are rendered disabled and enabled here only when it is ready.
//
// The member's private key is kept in IndexedDB as a non-extractable CryptoKey from the
// unlock (or the set-up) until sign-out or "Kunci"; a token's private key and a new recovery
// key live in sessionStorage only across one post/redirect, and are deleted when shown.
(function () {
  "use strict";

  var E = window.CvsmE2E;
  var DB_NAME = "cvsm-e2e";
  var STORE = "keys";
  var MEMBER = "member";
  var STASH = "cvsm-e2e-once";  // sessionStorage: what a page shows once after the redirect
  var MIN_PASSPHRASE = 12;

  // The texts this script writes, in the page's language (`<html lang>`, set by the server).
  var TEXTS = {
    id: {
      insecure: "Halaman ini tidak dibuka lewat HTTPS, jadi peramban tidak menyediakan kriptografi " +
        "(WebCrypto) untuk tim end-to-end. Nama secret tetap tampil; untuk melihat atau mengubah " +
        "nilai, buka dashboard lewat HTTPS.",
      noKeys: "Anda belum punya kunci end-to-end. Siapkan di halaman Akun.",
      locked: "Kunci end-to-end Anda terkunci. Buka kuncinya di halaman Akun dengan passphrase Anda.",
      noAccess: "Anda belum diberi akses ke kunci tim ini. Minta Admin tim memberi akses dari " +
        "halaman Anggota.",
      stale: "Kunci tim tidak dapat dibuka dengan kunci Anda. Buka kunci lagi di halaman Akun.",
      integrity: "Kunci tim yang dikirim server tidak tersambung ke kunci tim yang sudah " +
        "diverifikasi peramban ini (jangkar), jadi tidak ada nilai yang dibuka atau disegel. Jangan lanjutkan; " +
        "hubungi Admin tim dan admin server.",
      rekeyStale: "Versi kunci tim berubah sejak rencana dibuat. Muat ulang halaman lalu coba lagi.",
      unauthenticated: "Ganti kunci dibatalkan: penerima berikut tidak ditambahkan oleh " +
        "pemegang kunci tim (tanpa autentikasi penerima yang sah; mungkin disisipkan server, atau diberi akses " +
        "sebelum format 2). Beri akses ulang anggota itu setelah membandingkan sidik jarinya, atau " +
        "cabut token itu, lalu coba lagi: ",
      notOpened: "Nilai ini tidak dapat dibuka dengan kunci tim (rusak atau bukan untuk secret ini).",
      short: "Passphrase minimal " + MIN_PASSPHRASE + " karakter.",
      differ: "Kedua passphrase tidak sama.",
      isPassword: "Passphrase tidak boleh sama dengan kata sandi masuk: server menerima kata sandi " +
        "itu setiap kali Anda masuk.",
      wrongPassphrase: "Passphrase salah.",
      wrongRecovery: "Kunci pemulihan salah atau bukan milik akun ini.",
      badRecovery: "Kunci pemulihan berbentuk cvsm-recovery1. diikuti 43 karakter.",
      keyMismatch: "Kunci publik yang disimpan server untuk akun ini tidak cocok dengan kunci " +
        "privat Anda, jadi kunci tidak dibuka. Jangan beri akses atau buat tim end-to-end; " +
        "hubungi admin server.",
      unlocked: "Kunci end-to-end terbuka di peramban ini sampai Anda keluar atau menekan Kunci.",
      lockedNow: "Kunci end-to-end dikunci di peramban ini.",
      working: "Sedang mengenkripsi…",
      empty: "Nilai wajib diisi.",
      failed: "Kriptografi gagal: ",
      notOpenable: "Kriptografi gagal: kunci atau nilai terenkripsi tidak dapat dibuka di peramban " +
        "ini. Muat ulang halaman; bila tetap gagal, buka kunci lagi di halaman Akun.",
      ownFingerprint: "(buka kunci untuk melihatnya)",
      stateOpen: "Status: terbuka di peramban ini.",
      stateLocked: "Status: terkunci.",
      shareKeyGone: "Kunci tautan ini tidak ada lagi di peramban ini; cabut tautan ini dan buat yang baru.",
      notUtf8: "Berkas .env harus UTF-8",
    },
    en: {
      insecure: "This page was not opened over HTTPS, so the browser offers no cryptography " +
        "(WebCrypto) for end-to-end teams. The secrets' names still show; to see or change a " +
        "value, open the dashboard over HTTPS.",
      noKeys: "You have no end-to-end keys yet. Set them up on the Account page.",
      locked: "Your end-to-end key is locked. Unlock it on the Account page with your passphrase.",
      noAccess: "You have not been given access to this team's key yet. Ask a team Admin to give " +
        "you access from the Members page.",
      stale: "The team key cannot be opened with your key. Unlock again on the Account page.",
      integrity: "The team key the server sent does not chain to the team key this browser has " +
        "already verified (its anchor), so no value was opened or sealed. Do not go on; " +
        "contact the team's Admin and the server's admin.",
      rekeyStale: "The team key's version changed since the plan was made. Reload the page and try again.",
      unauthenticated: "Key change cancelled: the following recipients were not added by a " +
        "holder of the team key (no valid recipient authentication; perhaps inserted by the server, or " +
        "given access before format 2). Give that member access again after comparing their " +
        "fingerprint, or revoke that token, then try again: ",
      notOpened: "This value cannot be opened with the team key (damaged, or not for this secret).",
      short: "The passphrase must be at least " + MIN_PASSPHRASE + " characters.",
      differ: "The two passphrases differ.",
      isPassword: "The passphrase must not be your sign-in password: the server receives that " +
        "password each time you sign in.",
      wrongPassphrase: "Wrong passphrase.",
      wrongRecovery: "The recovery key is wrong or not this account's.",
      badRecovery: "A recovery key is cvsm-recovery1. followed by 43 characters.",
      keyMismatch: "The public key the server keeps for this account does not match your " +
        "private key, so the key was not unlocked. Do not give access or create end-to-end " +
        "teams; contact the server's admin.",
      unlocked: "The end-to-end key is unlocked in this browser until you sign out or press Lock.",
      lockedNow: "The end-to-end key is locked in this browser.",
      working: "Encrypting…",
      empty: "The value is required.",
      failed: "Cryptography failed: ",
      notOpenable: "Cryptography failed: the key or the encrypted value cannot be opened in this " +
        "browser. Reload the page; if it still fails, unlock again on the Account page.",
      ownFingerprint: "(unlock to see it)",
      stateOpen: "Status: unlocked in this browser.",
      stateLocked: "Status: locked.",
      shareKeyGone: "This link's key is no longer in this browser; revoke this link and make a new one.",
      notUtf8: "The .env file must be UTF-8",
    },
  };
  var TEXT = TEXTS[document.documentElement.lang] || TEXTS.id;

  // --- the member's key in IndexedDB ---------------------------------------------------------

  function database() {
    return new Promise(function (resolve, reject) {
      var request = indexedDB.open(DB_NAME, 1);
      request.onupgradeneeded = function () { request.result.createObjectStore(STORE); };
      request.onsuccess = function () { resolve(request.result); };
      request.onerror = function () { reject(request.error); };
    });
  }

  async function store(mode, work) {
    var db = await database();
    try {
      return await new Promise(function (resolve, reject) {
        var tx = db.transaction(STORE, mode);
        var request = work(tx.objectStore(STORE));
        tx.oncomplete = function () { resolve(request && request.result); };
        tx.onerror = function () { reject(tx.error); };
        tx.onabort = function () { reject(tx.error); };
      });
    } finally {
      db.close();
    }
  }

  // { userId, publicKey (b64u), privateKey (a non-extractable CryptoKey) } or undefined.
  function memberKey() {
    return store("readonly", function (s) { return s.get(MEMBER); });
  }

  // The public key kept beside it is derived from the private key itself.
  async function keepMemberKey(userId, privateRaw) {
    var publicKey = E.b64u(await E.publicKey(privateRaw));
    var privateKey = await E.importPrivateKey(privateRaw, false);
    // format 2: the key that seals this member's anchors, non-extractable too
    var anchorKey = await E.anchorKey(privateRaw);
    privateRaw.fill(0);
    await store("readwrite", function (s) {
      return s.put({ userId: userId, publicKey: publicKey, privateKey: privateKey,
                     anchorKey: anchorKey }, MEMBER);
    });
  }

  // The browser's own copy of the member's anchor for a team: { keyVersion, commitment (b64u) }.
  function localAnchor(userId, teamId) {
    return store("readonly", function (s) { return s.get("anchor:" + userId + ":" + teamId); });
  }

  function keepLocalAnchor(userId, teamId, keyVersion, commitment) {
    return store("readwrite", function (s) {
      return s.put({ keyVersion: keyVersion, commitment: E.b64u(commitment) },
                   "anchor:" + userId + ":" + teamId);
    });
  }

  // The sealed anchor stored on the server for the member (`PUT .../e2e/anchor`, through the
  // page route that takes the session's form).
  async function storeServerAnchor(teamRef, anchor) {
    var csrf = document.querySelector("input[name=csrf]");
    if (!csrf || !teamRef) return false;
    var body = new URLSearchParams({ csrf: csrf.value, anchor: anchor });
    var response = await fetch("/app/teams/" + encodeURIComponent(teamRef) + "/e2e/anchor",
                               { method: "POST", body: body, credentials: "same-origin",
                                 redirect: "manual" });
    return response.status === 204;
  }

  function forgetMemberKey() {
    return store("readwrite", function (s) { return s.delete(MEMBER); });
  }

  // --- what a page shows once after its post/redirect (sessionStorage) -----------------------

  function stash(kind, data) {
    sessionStorage.setItem(STASH + ":" + kind, JSON.stringify(data));
  }

  function unstash(kind) {
    var raw = sessionStorage.getItem(STASH + ":" + kind);
    sessionStorage.removeItem(STASH + ":" + kind);
    return raw ? JSON.parse(raw) : null;
  }

  // --- the page's context ----------------------------------------------------------------------

  function context() {
    var el = document.getElementById("e2e-context");
    return el ? el.dataset : null;
  }

  function say(where, text, isError) {
    if (!where) return;
    where.textContent = text;
    where.hidden = !text;
    if (isError !== undefined) where.classList.toggle("error", Boolean(isError));
  }

  function notice(text) {
    say(document.getElementById("e2e-notice"), text);
  }

  function messageOf(form) {
    return form.querySelector("[data-e2e-message]");
  }

  function enable(root) {
    for (var el of (root || document).querySelectorAll("[data-e2e-needs]")) el.disabled = false;
  }

  // The team key of this page's team for the member whose key is unlocked here:
  // { teamId, keyVersion, key, keys (by version, the verified chain), commitment } or a reason
  // (a notice's text). Format 2: the key must chain (links) to the member's anchor, the newer
  // of the one stored on the server and the browser's own copy; with neither, the first open
  // trusts it (TOFU). The anchor then moves forward to the current version.
  async function teamKey(ctx) {
    var member = await memberKey();
    if (!member || member.userId !== ctx.userId || !member.anchorKey) {
      return { reason: ctx.publicKey ? TEXT.locked : TEXT.noKeys };
    }
    if (ctx.publicKey && member.publicKey !== ctx.publicKey) return { reason: TEXT.stale };
    if (!ctx.wrappedKey) return { reason: TEXT.noAccess };
    var current = Number(ctx.keyVersion);
    var raw;
    try {
      raw = await E.unwrapTeamKey(ctx.wrappedKey, ctx.teamId, current, member.privateKey,
                                  E.unb64u(member.publicKey, 32));
    } catch (e) {
      return { reason: TEXT.stale };
    }
    var links = typeof ctx.links === "string" ? JSON.parse(ctx.links || "{}") : (ctx.links || {});
    var anchor = null, serverVersion = 0;
    try {
      if (ctx.anchor) {
        anchor = await E.openAnchor(ctx.anchor, member.anchorKey, ctx.userId, ctx.teamId);
        serverVersion = anchor.keyVersion;
      }
      var local = await localAnchor(ctx.userId, ctx.teamId);
      if (local && (!anchor || local.keyVersion > anchor.keyVersion)) {
        anchor = { keyVersion: local.keyVersion, commitment: E.unb64u(local.commitment, 32) };
      }
    } catch (e) {
      return { reason: TEXT.integrity, integrity: true };
    }
    var keys;
    try {
      keys = anchor ? await E.verifyChain(raw, current, ctx.teamId, links, anchor.keyVersion,
                                          anchor.commitment)
        : {};
    } catch (e) {
      return { reason: TEXT.integrity, integrity: true };
    }
    keys[current] = raw;
    var commitment = await E.commitment(raw, ctx.teamId, current);
    if (!anchor || current > anchor.keyVersion) {
      await keepLocalAnchor(ctx.userId, ctx.teamId, current, commitment);
    }
    if (current > serverVersion) {
      try {
        await storeServerAnchor(ctx.teamRef,
          await E.sealAnchor(member.anchorKey, ctx.userId, ctx.teamId, current, commitment));
      } catch (e) { /* the browser's copy holds it; the next open tries again */ }
    }
    return { teamId: ctx.teamId, keyVersion: current, key: raw, keys: keys,
             commitment: commitment };
  }

  // Sends `form` once `fill(form)` has filled its hidden fields; the button says it is working,
  // and a failure is said in the form (nothing is sent then).
  function sealing(form, fill) {
    form.addEventListener("submit", function (event) {
      if (event.defaultPrevented) return;  // a confirmation (app.js) said no
      event.preventDefault();
      var message = messageOf(form);
      var button = form.querySelector("[type=submit]");
      if (button) button.disabled = true;
      say(message, TEXT.working, false);
      Promise.resolve().then(function () { return fill(form); }).then(function (send) {
        if (send === false) {
          if (button) button.disabled = false;
          return;
        }
        say(message, "");
        HTMLFormElement.prototype.submit.call(form);
      }).catch(function (err) {
        if (button) button.disabled = false;
        say(message, err.user ? err.message
          : err instanceof E.E2EError ? TEXT.notOpenable : TEXT.failed + err.message, true);
      });
    });
  }

  function refuse(text) {
    var err = new Error(text);
    err.user = true;
    throw err;
  }

  function plainOf(form) {
    var field = form.querySelector("[data-e2e-plain]");
    return field ? field.value : "";
  }

  function clearPlain(form) {
    for (var field of form.querySelectorAll("[data-e2e-plain]")) field.value = "";
  }

  // --- the account page: set-up, unlock, recovery, lock --------------------------------------

  function checkPassphrase(form) {
    var one = form.querySelector("[data-e2e-passphrase]").value;
    var two = form.querySelector("[data-e2e-passphrase-again]").value;
    var password = form.querySelector("[data-e2e-password]");
    if (one.length < MIN_PASSPHRASE) refuse(TEXT.short);
    if (one !== two) refuse(TEXT.differ);
    if (password && password.value && password.value === one) refuse(TEXT.isPassword);
    return one;
  }

  // The public key of an opened private key, refused when it is not the one the server holds
  // for the account (what others wrap team keys to).
  async function checkPublicKey(ctx, privateRaw) {
    if (E.b64u(await E.publicKey(privateRaw)) !== ctx.publicKey) {
      privateRaw.fill(0);
      refuse(TEXT.keyMismatch);
    }
  }

  function accountPage(ctx) {
    var setup = document.querySelector("form[data-e2e-setup]");
    if (setup) {
      sealing(setup, async function (form) {
        var passphrase = checkPassphrase(form);
        var pair = await E.generateKeyPair();
        var recovery = E.newRecoveryKey();
        var publicKey = E.b64u(pair.publicKey);
        form.elements.public_key.value = publicKey;
        form.elements.wrapped_private_key.value =
          await E.wrapPrivateKeyWithPassphrase(pair.privateKey, passphrase, ctx.userId);
        form.elements.recovery_wrapped_private_key.value =
          await E.wrapPrivateKeyWithRecovery(pair.privateKey, recovery.raw, ctx.userId);
        clearPlain(form);
        stash("recovery", { publicKey: publicKey, recovery: recovery.text });
        await keepMemberKey(ctx.userId, pair.privateKey);
      });
    }
    // The recovery key made by the set-up, shown once (the page holds the new public key).
    var shown = document.querySelector("[data-e2e-recovery-shown]");
    var kept = unstash("recovery");
    if (shown && kept && kept.publicKey === ctx.publicKey) {
      shown.querySelector("[data-secret-value]").textContent = kept.recovery;
      shown.hidden = false;
    }
    var unlock = document.querySelector("form[data-e2e-unlock]");
    if (unlock) {
      unlock.addEventListener("submit", function (event) {
        event.preventDefault();
        var message = messageOf(unlock);
        var field = unlock.querySelector("[data-e2e-passphrase]");
        say(message, TEXT.working, false);
        E.openPassphraseWrap(ctx.passWrap, field.value, ctx.userId).then(async function (raw) {
          await checkPublicKey(ctx, raw);
          return keepMemberKey(ctx.userId, raw);
        }).then(function () {
          field.value = "";
          say(message, TEXT.unlocked, false);
          showLockState(ctx);
        }).catch(function (err) {
          say(message, err.user ? err.message : TEXT.wrongPassphrase, true);
        });
      });
    }
    var recover = document.querySelector("form[data-e2e-recover]");
    if (recover) {
      sealing(recover, async function (form) {
        var passphrase = checkPassphrase(form);
        var recoveryRaw;
        try {
          recoveryRaw = E.parseRecoveryKey(form.querySelector("[data-e2e-recovery]").value);
        } catch (e) {
          refuse(TEXT.badRecovery);
        }
        var raw;
        try {
          raw = await E.openRecoveryWrap(ctx.recWrap, recoveryRaw, ctx.userId);
        } catch (e) {
          refuse(TEXT.wrongRecovery);
        }
        await checkPublicKey(ctx, raw);
        form.elements.wrapped_private_key.value =
          await E.wrapPrivateKeyWithPassphrase(raw, passphrase, ctx.userId);
        clearPlain(form);
        await keepMemberKey(ctx.userId, raw);
      });
    }
    var lock = document.querySelector("[data-e2e-lock]");
    if (lock) {
      lock.addEventListener("click", function () {
        forgetMemberKey().then(function () {
          say(messageOf(unlock) || document.getElementById("e2e-lock-state"), TEXT.lockedNow,
              false);
          showLockState(ctx);
        });
      });
    }
    showLockState(ctx);
    enable(document);
  }

  function showLockState(ctx) {
    var state = document.getElementById("e2e-lock-state");
    if (!state || !ctx.publicKey) return;
    memberKey().then(async function (member) {
      // a key kept before format 2 has no anchor key: it is unlocked again once
      var open = Boolean(member && member.userId === ctx.userId &&
                         member.publicKey === ctx.publicKey && member.anchorKey);
      // the member's own fingerprint, from the public key derived from the private key opened
      // here (never the stored row): compared out of band with what a granting Admin sees
      var own = document.querySelector("[data-e2e-own-fingerprint]");
      if (own) {
        own.textContent = member && member.userId === ctx.userId
          ? await E.fingerprint(E.unb64u(member.publicKey, 32)) : TEXT.ownFingerprint;
      }
      state.textContent = open ? TEXT.stateOpen : TEXT.stateLocked;
      var lock = document.querySelector("[data-e2e-lock]");
      if (lock) lock.hidden = !open;
      var unlock = document.querySelector("form[data-e2e-unlock]");
      if (unlock) unlock.hidden = open;
    });
  }

  // --- a team's pages --------------------------------------------------------------------------

  async function teamPages(ctx) {
    // A share link just made: its key, kept across the redirect, becomes the #fragment.
    var link = document.querySelector("[data-e2e-share-url]");
    if (link) {
      var made = unstash("share");
      link.textContent = made ? link.textContent.trim() + "#" + made.key
        : TEXT.shareKeyGone;
    }
    var found = await teamKey(ctx);
    if (!found.key) {
      notice(found.reason);
      return;
    }
    notice("");
    var where = { teamId: found.teamId };
    // The team key of the version an envelope names: the current one, or (a value sealed before
    // a re-key) the member's wrap of that version from the page's context, opened once.
    var wraps = ctx.wraps ? JSON.parse(ctx.wraps) : {};
    var keys = {};
    for (var v of Object.keys(found.keys)) keys[v] = Promise.resolve(found.keys[v]);
    function keyFor(envelope) {
      var version = E.parseEnvelope(envelope).keyVersion;
      if (!keys[version]) {
        keys[version] = memberKey().then(function (member) {
          if (!wraps[version]) throw new E.E2EError("no wrap of key version " + version);
          return E.unwrapTeamKey(wraps[version], found.teamId, version, member.privateKey,
                                 E.unb64u(member.publicKey, 32));
        });
      }
      return keys[version];
    }
    // An envelope opened with the key of the version it names.
    async function openAny(envelope, at) {
      return E.openValue(envelope, await keyFor(envelope), at);
    }

    // Revealed values: the page holds the envelope; the value is opened here, as text.
    for (var shown of document.querySelectorAll("[data-e2e-envelope]")) {
      try {
        shown.textContent = await openAny(shown.dataset.e2eEnvelope,
          { teamId: found.teamId, environment: shown.dataset.e2eEnvironment,
            name: shown.dataset.e2eName });
        shown.dataset.e2eOpened = "";
      } catch (e) {
        shown.textContent = TEXT.notOpened;
      }
    }

    // Create: a new id, version 1, the environment and name chosen in the form.
    for (var create of document.querySelectorAll("form[data-e2e-create]")) {
      sealing(create, async function (form) {
        var value = plainOf(form);
        if (!value) refuse(TEXT.empty);
        var id = E.newSecretId();
        form.elements.id.value = id;
        form.elements.value.value = await E.sealValue(value, found.key, found.keyVersion,
          Object.assign({ secretId: id, version: 1, environment: form.elements.environment.value,
                          name: form.elements.name.value.trim() }, where));
        clearPlain(form);
      });
    }
    // Where a form's value goes: the next version of the secret the form names.
    function nextVersion(form) {
      return { teamId: found.teamId, secretId: form.dataset.secretId,
               version: Number(form.dataset.version) + 1, environment: form.dataset.environment,
               name: form.dataset.name };
    }
    // Edit: the next version of this secret (an empty value keeps the current one).
    for (var edit of document.querySelectorAll("form[data-e2e-update]")) {
      sealing(edit, async function (form) {
        var value = plainOf(form);
        form.elements.value.value = value
          ? await E.sealValue(value, found.key, found.keyVersion, nextVersion(form)) : "";
        clearPlain(form);
      });
    }
    // Rollback: the version revealed on the page, opened and sealed again as the next version.
    for (var back of document.querySelectorAll("form[data-e2e-rollback]")) {
      sealing(back, async function (form) {
        var old = await openAny(form.dataset.envelope,
          { teamId: found.teamId, environment: form.dataset.environment, name: form.dataset.name });
        form.elements.value.value = await E.sealValue(old, found.key, found.keyVersion,
                                                      nextVersion(form));
      });
    }
    // Share link: the value revealed on the page sealed under a new key that only the link's
    // #fragment carries (kept in sessionStorage across the redirect, deleted when shown).
    for (var share of document.querySelectorAll("form[data-e2e-share]")) {
      sealing(share, async function (form) {
        var source = document.querySelector("[data-e2e-envelope][data-e2e-current]");
        var value = await openAny(source.dataset.e2eEnvelope,
          { teamId: found.teamId, environment: source.dataset.e2eEnvironment,
            name: source.dataset.e2eName });
        var shareKey = E.random(32);
        form.elements.value.value = await E.sealShare(value, shareKey);
        stash("share", { key: E.b64u(shareKey) });
      });
    }
    // Import: the .env parsed here, each value sealed for a new id; the server gets envelopes.
    for (var imp of document.querySelectorAll("form[data-e2e-import]")) {
      sealing(imp, async function (form) {
        var content = plainOf(form);
        var file = form.querySelector("[data-e2e-file]");
        if (file && file.files.length) {
          try {
            content = new TextDecoder("utf-8", { fatal: true })
              .decode(await file.files[0].arrayBuffer());
          } catch (e) {
            refuse(TEXT.notUtf8);
          }
        }
        var environment = form.elements.environment.value;
        var items = [];
        for (var entry of window.CvsmDotenv.parse(content)) {
          if (entry.error) {
            items.push({ line: entry.line, name: entry.name, error: entry.error });
            continue;
          }
          var id = E.newSecretId();
          items.push({ line: entry.line, name: entry.name, id: id,
                       value: await E.sealValue(entry.value, found.key, found.keyVersion,
                         Object.assign({ secretId: id, version: 1, environment: environment,
                                         name: entry.name }, where)) });
        }
        form.elements.items.value = JSON.stringify(items);
        clearPlain(form);
        if (file) file.value = "";
      });
    }
    // Export: the envelopes the page holds (after "Unduh"), opened and written as .env here.
    var exported = document.querySelector("[data-e2e-export]");
    if (exported) {
      var values = {};
      var envelopes = JSON.parse(exported.dataset.e2eExport);
      var environment = exported.dataset.e2eEnvironment;
      try {
        for (var name of Object.keys(envelopes)) {
          values[name] = await openAny(envelopes[name],
            { teamId: found.teamId, environment: environment, name: name });
        }
        var download = exported.querySelector("a");
        download.href = URL.createObjectURL(new Blob([window.CvsmDotenv.render(values)],
                                                     { type: "text/plain" }));
        download.hidden = false;
        download.click();
      } catch (e) {
        say(exported.querySelector("[data-e2e-message]"), TEXT.notOpened, true);
      }
    }
    // Members: the team key wrapped to a member's public key (its fingerprint is on the page).
    for (var grant of document.querySelectorAll("form[data-e2e-grant]")) {
      sealing(grant, async function (form) {
        var to = E.unb64u(form.dataset.publicKey, 32);
        form.elements.wrapped_key.value = await E.wrapTeamKey(found.key, found.teamId,
          found.keyVersion, to);
        form.elements.public_key.value = form.dataset.publicKey;  // the key wrapped to
        form.elements.auth.value = await E.recipientAuth(found.key, found.teamId, found.keyVersion,
                                                         "user", form.dataset.userId, to);
      });
    }
    // Rekey: a new team key (version + 1) wrapped to every recipient the page lists, and every
    // live secret's current value sealed again under it as its next version.
    var rekey = document.querySelector("form[data-e2e-rekey]");
    if (rekey) {
      sealing(rekey, async function (form) {
        var plan = JSON.parse(form.dataset.plan);
        if (plan.key_version !== found.keyVersion) refuse(TEXT.rekeyStale);
        var next = plan.key_version + 1;
        var member = await memberKey();
        // Format 2: every recipient's auth of its wrap of the current version is checked with
        // the verified current key before anything is wrapped; the re-keyer's own public key is
        // the one derived from its private key.
        var refused = [];
        for (var c of plan.recipients) {
          var own = c.user_id === ctx.userId;
          if (own && c.public_key !== member.publicKey) {
            refused.push(c.name);
            continue;
          }
          try {
            await E.checkRecipientAuth(c.auth, found.key, found.teamId, found.keyVersion,
                                       c.user_id ? "user" : "token", c.user_id || null,
                                       E.unb64u(c.public_key, 32));
          } catch (e) {
            refused.push((c.user_id ? "anggota " : "token ") + c.name + " (" + c.fingerprint + ")");
          }
        }
        if (refused.length) refuse(TEXT.unauthenticated + refused.join(", "));
        var fresh = E.newTeamKey();
        var wraps = [];
        for (var r of plan.recipients) {
          var to = E.unb64u(r.public_key, 32);
          var wrapped = await E.wrapTeamKey(fresh, found.teamId, next, to);
          var auth = await E.recipientAuth(fresh, found.teamId, next, r.user_id ? "user" : "token",
                                           r.user_id || null, to);
          wraps.push(r.user_id ? { user_id: r.user_id, public_key: r.public_key,
                                   wrapped_key: wrapped, auth: auth }
                               : { token_id: r.token_id, wrapped_key: wrapped, auth: auth });
        }
        var link = await E.makeLink(fresh, found.key, found.teamId, next);
        var secrets = [];
        for (var s of plan.secrets) {
          var value = await E.openValue(s.value, found.key,
            { teamId: found.teamId, environment: s.environment, name: s.name });
          secrets.push({ id: s.id, value: await E.sealValue(value, fresh, next,
            { teamId: found.teamId, secretId: s.id, version: s.version + 1,
              environment: s.environment, name: s.name }) });
        }
        form.elements.payload.value = JSON.stringify({ key_version: next, wraps: wraps,
                                                       secrets: secrets, link: link });
      });
    }
    enable(document);
  }

  // --- the tokens page: a token of an end-to-end team gets its own key pair --------------------

  async function tokensPage() {
    var form = document.querySelector("form[data-e2e-token]");
    var teamsEl = document.getElementById("e2e-teams");
    // A new token: its private key appended from sessionStorage, then deleted there.
    var shown = document.querySelector("[data-e2e-token-public-key]");
    var kept = unstash("token");
    if (shown && kept && kept.publicKey === shown.dataset.e2eTokenPublicKey) {
      var value = shown.querySelector("[data-secret-value]");
      value.textContent = E.joinToken(value.textContent.trim(), E.unb64u(kept.privateKey, 32),
                                      kept.keyVersion, E.unb64u(kept.commitment, 32));
    }
    if (!form || !teamsEl) return;
    var e2eTeams = JSON.parse(teamsEl.dataset.teams);
    var ctx = context();
    sealing(form, async function (f) {
      f.elements.e2e_public_key.value = "";
      f.elements.e2e_wrapped_key.value = "";
      f.elements.e2e_auth.value = "";
      f.elements.e2e_key_version.value = "";
      var team = e2eTeams[f.elements.team.value];
      if (!team) return true;  // not an end-to-end team: nothing to add
      var found = await teamKey(Object.assign({}, ctx, team));
      if (!found.key) refuse(found.reason);
      var pair = await E.generateKeyPair();
      var publicKey = E.b64u(pair.publicKey);
      f.elements.e2e_public_key.value = publicKey;
      f.elements.e2e_wrapped_key.value = await E.wrapTeamKey(found.key, found.teamId,
                                                              found.keyVersion, pair.publicKey);
      // format 2: the wrap's auth, and the pin (the verified current version) in the string
      f.elements.e2e_auth.value = await E.recipientAuth(found.key, found.teamId, found.keyVersion,
                                                        "token", null, pair.publicKey);
      f.elements.e2e_key_version.value = String(found.keyVersion);
      stash("token", { publicKey: publicKey, privateKey: E.b64u(pair.privateKey),
                       keyVersion: found.keyVersion, commitment: E.b64u(found.commitment) });
    });
  }

  // --- team creation: the team key made here, wrapped to the creator's own key -----------------

  function teamsPage(ctx) {
    var form = document.querySelector("form[data-e2e-team]");
    if (!form) return;
    sealing(form, async function (f) {
      f.elements.wrapped_key.value = "";
      f.elements.auth.value = "";
      f.elements.id.value = "";
      if (!f.elements.e2e.checked) return true;
      if (!E.available()) refuse(TEXT.insecure);
      var member = await memberKey();
      if (!ctx.publicKey) refuse(TEXT.noKeys);
      if (!member || member.userId !== ctx.userId || member.publicKey !== ctx.publicKey ||
          !member.anchorKey) {
        refuse(TEXT.locked);
      }
      var id = E.newSecretId();  // the team's id, chosen here: the wrap names it
      f.elements.id.value = id;
      // to the public key derived from the opened private key (equal to the server's, above)
      var own = E.unb64u(member.publicKey, 32);
      var fresh = E.newTeamKey();
      f.elements.wrapped_key.value = await E.wrapTeamKey(fresh, id, 1, own);
      f.elements.auth.value = await E.recipientAuth(fresh, id, 1, "user", ctx.userId, own);
      // the creator's anchor for version 1, kept here at once (the server's copy is stored at
      // the team's first page, which finds this one)
      await keepLocalAnchor(ctx.userId, id, 1, await E.commitment(fresh, id, 1));
    });
  }

  // --- sign-out forgets the key ----------------------------------------------------------------

  function signOut() {
    for (var form of document.querySelectorAll("form[action='/signout']")) {
      form.addEventListener("submit", function (event) {
        var f = event.currentTarget;
        if (f.dataset.e2eForgotten) return;
        event.preventDefault();
        var done = function () {
          f.dataset.e2eForgotten = "1";
          HTMLFormElement.prototype.submit.call(f);
        };
        (E.available() ? forgetMemberKey() : Promise.resolve()).then(done, done);
      });
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!E) return;
    var ctx = context();
    if (E.available()) {
      signOut();
      // A signed-out page (the sign-in form): no key is kept here any more.
      if (document.querySelector("form[action='/signin']")) forgetMemberKey();
    }
    if (!ctx) return;
    if (!E.available()) {
      notice(TEXT.insecure);
      return;
    }
    var run = ctx.page === "account" ? Promise.resolve(accountPage(ctx))
      : ctx.page === "tokens" ? tokensPage()
      : ctx.page === "teams" ? Promise.resolve(teamsPage(ctx))
      : teamPages(ctx);
    run.catch(function (err) { notice(TEXT.failed + err.message); });
  });
})();
