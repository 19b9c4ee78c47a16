// e2e.js: the cryptography of end-to-end teams in the browser, exactly as docs/e2e.md defines
// it (the Python SDK's cvsm/e2e.py is the reference; conformance/vectors/e2e.json the vectors).
// WebCrypto only: X25519 deriveBits, HKDF-SHA256, PBKDF2-HMAC-SHA256, AES-256-GCM. Nothing here
// talks to the server; the pages' scripts call it and send only what it seals or wraps.
// WebCrypto exists only in a secure context (HTTPS or localhost): `CvsmE2E.available()` says.
(function () {
  "use strict";

  var KEY = 32;
  var NONCE = 12;
  var MIN_ITERATIONS = 600000;
  var MAX_ITERATIONS = 10000000;  // a stored wrap must not make the page hang
  // An X25519 private key as PKCS #8: this fixed prefix, then the 32 raw bytes (RFC 8410).
  var PKCS8_PREFIX = hex("302e020100300506032b656e04220420");
  var B64U = "[A-Za-z0-9_-]+";
  var UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  var NUMBER = "[1-9][0-9]{0,9}";
  var ENVELOPE_RE = new RegExp("^cvsm-e2e1\\.(" + NUMBER + ")\\.(" + UUID + ")\\.(" + NUMBER +
                               ")\\.(" + B64U + ")\\.(" + B64U + ")$");
  var WRAP_RE = new RegExp("^cvsm-wrap1\\.(" + B64U + ")\\.(" + B64U + ")\\.(" + B64U + ")$");
  var PASS_RE = new RegExp("^cvsm-pass1\\.(" + NUMBER + ")\\.(" + B64U + ")\\.(" + B64U +
                           ")\\.(" + B64U + ")$");
  var REC_RE = new RegExp("^cvsm-rec1\\.(" + B64U + ")\\.(" + B64U + ")$");
  var SHARE_RE = new RegExp("^cvsm-share1\\.(" + B64U + ")\\.(" + B64U + ")$");
  // format 2: the token string carries its pin (key version and that key's commitment)
  var TOKEN_RE = new RegExp("^(cvsm_[0-9a-f]{64})\\.(" + B64U + ")\\.(" + NUMBER + ")\\.(" + B64U +
                            ")$");
  var TOKEN_V1_RE = new RegExp("^cvsm_[0-9a-f]{64}\\." + B64U + "$");
  var LINK_RE = new RegExp("^cvsm-link1\\.(" + B64U + ")\\.(" + B64U + ")$");
  var ANCHOR_RE = new RegExp("^cvsm-anchor1\\.(" + B64U + ")\\.(" + B64U + ")$");
  var ANCHOR_PLAIN_RE = new RegExp("^(" + NUMBER + "):(" + B64U + ")$");
  var RECOVERY_RE = new RegExp("^cvsm-recovery1\\.(" + B64U + ")$");
  var encoder = new TextEncoder();

  // Every failure: the message names what failed, never a key or a value.
  function E2EError(message) {
    this.name = "E2EError";
    this.message = message;
  }
  E2EError.prototype = Object.create(Error.prototype);
  E2EError.prototype.constructor = E2EError;

  function hex(text) {
    var out = new Uint8Array(text.length / 2);
    for (var i = 0; i < out.length; i++) out[i] = parseInt(text.substr(i * 2, 2), 16);
    return out;
  }

  function concat() {
    var size = 0, i;
    for (i = 0; i < arguments.length; i++) size += arguments[i].length;
    var out = new Uint8Array(size), at = 0;
    for (i = 0; i < arguments.length; i++) {
      out.set(arguments[i], at);
      at += arguments[i].length;
    }
    return out;
  }

  function b64u(bytes) {
    var text = "";
    bytes = new Uint8Array(bytes);
    for (var i = 0; i < bytes.length; i++) text += String.fromCharCode(bytes[i]);
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // base64url without padding, canonical (re-encoding gives the same text), of `size` bytes.
  function unb64u(text, size, what) {
    var bytes;
    try {
      var binary = atob(text.replace(/-/g, "+").replace(/_/g, "/") +
                        "===".slice((text.length + 3) % 4));
      bytes = new Uint8Array(binary.length);
      for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    } catch (e) {
      throw new E2EError(what + " is not base64url");
    }
    if (b64u(bytes) !== text) throw new E2EError(what + " is not canonical base64url");
    if (size !== null && bytes.length !== size) throw new E2EError(what + " must be " + size + " bytes");
    return bytes;
  }

  function random(size) {
    return crypto.getRandomValues(new Uint8Array(size));
  }

  function available() {
    return Boolean(window.isSecureContext && window.crypto && crypto.subtle);
  }

  function aesKey(raw, usages) {
    return crypto.subtle.importKey("raw", raw, { name: "AES-GCM" }, false, usages);
  }

  async function seal(raw, nonce, plain, aad) {
    var key = await aesKey(raw, ["encrypt"]);
    return new Uint8Array(await crypto.subtle.encrypt(
      { name: "AES-GCM", iv: nonce, additionalData: aad, tagLength: 128 }, key, plain));
  }

  async function open(raw, nonce, ciphertext, aad, what) {
    var key = await aesKey(raw, ["decrypt"]);
    try {
      return new Uint8Array(await crypto.subtle.decrypt(
        { name: "AES-GCM", iv: nonce, additionalData: aad, tagLength: 128 }, key, ciphertext));
    } catch (e) {
      throw new E2EError(what + " does not open with this key");
    }
  }

  async function hkdf(ikm, salt, info) {
    var base = await crypto.subtle.importKey("raw", ikm, "HKDF", false, ["deriveBits"]);
    return new Uint8Array(await crypto.subtle.deriveBits(
      { name: "HKDF", hash: "SHA-256", salt: salt, info: encoder.encode(info) }, base, KEY * 8));
  }

  function utf8(bytes, what) {
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch (e) {
      throw new E2EError(what + " is not UTF-8");
    }
  }

  // --- X25519 keys ---------------------------------------------------------------------------

  // A private key (32 raw bytes) as a CryptoKey for deriveBits; `extractable` false for one kept.
  function importPrivateKey(raw, extractable) {
    if (raw.length !== KEY) throw new E2EError("an X25519 private key is 32 bytes");
    return crypto.subtle.importKey("pkcs8", concat(PKCS8_PREFIX, raw), { name: "X25519" },
                                   Boolean(extractable), ["deriveBits"]);
  }

  function importPublicKey(raw) {
    if (raw.length !== KEY) throw new E2EError("an X25519 public key is 32 bytes");
    return crypto.subtle.importKey("raw", raw, { name: "X25519" }, true, []);
  }

  // The public key of a private key given as 32 raw bytes (WebCrypto's JWK export names it).
  async function publicKey(privateRaw) {
    var jwk = await crypto.subtle.exportKey("jwk", await importPrivateKey(privateRaw, true));
    return unb64u(jwk.x, KEY, "public key");
  }

  // A new key pair: { privateKey: 32 raw bytes, publicKey: 32 raw bytes }.
  async function generateKeyPair() {
    var pair = await crypto.subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]);
    var pkcs8 = new Uint8Array(await crypto.subtle.exportKey("pkcs8", pair.privateKey));
    return { privateKey: pkcs8.slice(pkcs8.length - KEY),
             publicKey: new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey)) };
  }

  async function shared(privateKey, peerRaw) {
    var bits;
    try {
      bits = new Uint8Array(await crypto.subtle.deriveBits(
        { name: "X25519", public: await importPublicKey(peerRaw) }, privateKey, KEY * 8));
    } catch (e) {
      throw new E2EError("the public key is not usable (low order)");
    }
    if (bits.every(function (b) { return b === 0; })) {
      throw new E2EError("the public key is not usable (low order)");
    }
    return bits;
  }

  // A private key given as raw bytes or as a CryptoKey (the member's, kept non-extractable).
  async function asPrivateKey(key) {
    return key instanceof CryptoKey ? key : importPrivateKey(key, false);
  }

  function newTeamKey() {
    return random(KEY);
  }

  // --- the team key, wrapped to a recipient --------------------------------------------------

  function teamKeyAad(teamId, keyVersion) {
    return encoder.encode("cvsm-e2e:v1:team-key:" + teamId + ":" + keyVersion);
  }

  async function wrapTeamKey(teamKey, teamId, keyVersion, recipientPublic) {
    if (teamKey.length !== KEY || recipientPublic.length !== KEY) {
      throw new E2EError("a team key and a public key are 32 bytes");
    }
    var eph = await generateKeyPair();
    var wrapping = await hkdf(await shared(await importPrivateKey(eph.privateKey, false),
                                           recipientPublic),
                              concat(eph.publicKey, recipientPublic), "cvsm-e2e:v1:wrap");
    var nonce = random(NONCE);
    var ct = await seal(wrapping, nonce, teamKey, teamKeyAad(teamId, keyVersion));
    return "cvsm-wrap1." + b64u(eph.publicKey) + "." + b64u(nonce) + "." + b64u(ct);
  }

  // `privateKey`: 32 raw bytes or a CryptoKey; `ownPublic`: the recipient's public key (32 raw
  // bytes), needed with a CryptoKey (computed from raw bytes otherwise).
  async function unwrapTeamKey(wrapped, teamId, keyVersion, privateKey, ownPublic) {
    var match = WRAP_RE.exec(wrapped);
    if (match === null) {
      throw new E2EError("a wrapped team key must look like cvsm-wrap1.<eph>.<nonce>.<ct>");
    }
    var ephPublic = unb64u(match[1], KEY, "ephemeral key");
    var nonce = unb64u(match[2], NONCE, "nonce");
    var ct = unb64u(match[3], KEY + 16, "wrapped key");
    if (!ownPublic) ownPublic = await publicKey(privateKey);
    var wrapping = await hkdf(await shared(await asPrivateKey(privateKey), ephPublic),
                              concat(ephPublic, ownPublic), "cvsm-e2e:v1:wrap");
    return open(wrapping, nonce, ct, teamKeyAad(teamId, keyVersion), "the wrapped team key");
  }

  // --- sealed values -------------------------------------------------------------------------

  function valueAad(teamId, secretId, version, environment, name) {
    return encoder.encode("cvsm-e2e:v1:secret:" + teamId + ":" + secretId + ":" + version + ":" +
                          environment + ":" + name);
  }

  function newSecretId() {
    return crypto.randomUUID();
  }

  // where: { teamId, secretId, version, environment, name }
  async function sealValue(value, teamKey, keyVersion, where) {
    var secretId = String(where.secretId).toLowerCase();
    if (!new RegExp("^" + UUID + "$").test(secretId)) throw new E2EError("a secret id is a UUID");
    var nonce = random(NONCE);
    var ct = await seal(teamKey, nonce, encoder.encode(value),
                        valueAad(where.teamId, secretId, where.version, where.environment,
                                 where.name));
    return "cvsm-e2e1." + keyVersion + "." + secretId + "." + where.version + "." + b64u(nonce) +
      "." + b64u(ct);
  }

  function parseEnvelope(envelope) {
    var match = ENVELOPE_RE.exec(envelope);
    if (match === null) {
      throw new E2EError("a sealed value must look like " +
                         "cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ciphertext>");
    }
    var ciphertext = unb64u(match[5], null, "ciphertext");
    if (ciphertext.length < 16) throw new E2EError("ciphertext is shorter than its tag");
    return { keyVersion: Number(match[1]), secretId: match[2], version: Number(match[3]),
             nonce: unb64u(match[4], NONCE, "nonce"), ciphertext: ciphertext };
  }

  // where: { teamId, environment, name }: the ones the reader asked for.
  async function openValue(envelope, teamKey, where) {
    var parts = parseEnvelope(envelope);
    var plain = await open(teamKey, parts.nonce, parts.ciphertext,
                           valueAad(where.teamId, parts.secretId, parts.version,
                                    where.environment, where.name), "the sealed value");
    return utf8(plain, "the sealed value");
  }

  // --- a member's private key, wrapped by passphrase and by recovery key ---------------------

  function userKeyAad(userId) {
    return encoder.encode("cvsm-e2e:v1:user-key:" + userId);
  }

  async function passphraseKey(passphrase, salt, iterations) {
    var base = await crypto.subtle.importKey("raw", encoder.encode(passphrase.normalize("NFC")),
                                             "PBKDF2", false,
                                             ["deriveBits"]);
    return new Uint8Array(await crypto.subtle.deriveBits(
      { name: "PBKDF2", hash: "SHA-256", salt: salt, iterations: iterations }, base, KEY * 8));
  }

  async function wrapPrivateKeyWithPassphrase(privateRaw, passphrase, userId, iterations) {
    iterations = iterations || MIN_ITERATIONS;
    if (privateRaw.length !== KEY) throw new E2EError("an X25519 private key is 32 bytes");
    var salt = random(16), nonce = random(NONCE);
    var ct = await seal(await passphraseKey(passphrase, salt, iterations), nonce, privateRaw,
                        userKeyAad(userId));
    return "cvsm-pass1." + iterations + "." + b64u(salt) + "." + b64u(nonce) + "." + b64u(ct);
  }

  async function openPassphraseWrap(wrapped, passphrase, userId) {
    var match = PASS_RE.exec(wrapped);
    if (match === null) {
      throw new E2EError("a passphrase wrap must look like cvsm-pass1.<iterations>.<salt>.<nonce>.<ct>");
    }
    var iterations = Number(match[1]);
    if (iterations < MIN_ITERATIONS || iterations > MAX_ITERATIONS) {
      throw new E2EError("a passphrase wrap needs " + MIN_ITERATIONS + " to " + MAX_ITERATIONS +
                         " iterations");
    }
    var key = await passphraseKey(passphrase, unb64u(match[2], 16, "salt"), iterations);
    return open(key, unb64u(match[3], NONCE, "nonce"), unb64u(match[4], KEY + 16, "ct"),
                userKeyAad(userId), "the private key (wrong passphrase?)");
  }

  // A new recovery key: { raw: 32 bytes, text: "cvsm-recovery1.<b64u>" } (shown once).
  function newRecoveryKey() {
    var raw = random(KEY);
    return { raw: raw, text: "cvsm-recovery1." + b64u(raw) };
  }

  function parseRecoveryKey(text) {
    var match = RECOVERY_RE.exec(String(text).trim());
    if (match === null) throw new E2EError("a recovery key looks like cvsm-recovery1.<43 characters>");
    return unb64u(match[1], KEY, "the recovery key");
  }

  async function wrapPrivateKeyWithRecovery(privateRaw, recoveryRaw, userId) {
    if (recoveryRaw.length !== KEY) throw new E2EError("a recovery key is 32 bytes");
    if (privateRaw.length !== KEY) throw new E2EError("an X25519 private key is 32 bytes");
    var nonce = random(NONCE);
    var ct = await seal(await hkdf(recoveryRaw, new Uint8Array(0), "cvsm-e2e:v1:recovery"), nonce,
                        privateRaw, userKeyAad(userId));
    return "cvsm-rec1." + b64u(nonce) + "." + b64u(ct);
  }

  async function openRecoveryWrap(wrapped, recoveryRaw, userId) {
    var match = REC_RE.exec(wrapped);
    if (match === null || recoveryRaw.length !== KEY) {
      throw new E2EError("a recovery wrap must look like cvsm-rec1.<nonce>.<ct>");
    }
    return open(await hkdf(recoveryRaw, new Uint8Array(0), "cvsm-e2e:v1:recovery"),
                unb64u(match[1], NONCE, "nonce"), unb64u(match[2], KEY + 16, "ct"),
                userKeyAad(userId), "the private key (wrong recovery key?)");
  }

  // --- share links ---------------------------------------------------------------------------

  var SHARE_AAD = encoder.encode("cvsm-e2e:v1:share");

  async function sealShare(value, shareKey) {
    var nonce = random(NONCE);
    var ct = await seal(shareKey, nonce, encoder.encode(value), SHARE_AAD);
    return "cvsm-share1." + b64u(nonce) + "." + b64u(ct);
  }

  async function openShare(envelope, shareKey) {
    var match = SHARE_RE.exec(envelope);
    if (match === null || shareKey.length !== KEY) {
      throw new E2EError("a shared value must look like cvsm-share1.<nonce>.<ct>");
    }
    var plain = await open(shareKey, unb64u(match[1], NONCE, "nonce"),
                           unb64u(match[2], null, "ct"), SHARE_AAD, "the shared value");
    return utf8(plain, "the shared value");
  }

  // --- tokens with their key -----------------------------------------------------------------

  // { apiToken, privateKey (32 raw bytes or null), keyVersion, commitment (the pin) }. Only a
  // `cvsm_` token has a key part; the first format's (no pin) is refused: make a new token.
  function splitToken(token) {
    if (token.indexOf("cvsm_") !== 0 || token.indexOf(".") < 0) {
      return { apiToken: token, privateKey: null, keyVersion: null, commitment: null };
    }
    var match = TOKEN_RE.exec(token);
    if (match === null) {
      if (TOKEN_V1_RE.test(token)) {
        throw new E2EError("this token was made before end-to-end tokens carried their pin " +
                           "(cvsm_<64 hex>.<key>): make a new token for the team");
      }
      throw new E2EError("a token with a key must look like " +
                         "cvsm_<64 hex>.<private key>.<key version>.<commitment>");
    }
    return { apiToken: match[1], privateKey: unb64u(match[2], KEY, "the token's private key"),
             keyVersion: Number(match[3]),
             commitment: unb64u(match[4], KEY, "the token's key commitment") };
  }

  // The token string with its key and its pin: the key version and commitment the member's
  // client verified when it made the token.
  function joinToken(apiToken, privateRaw, keyVersion, commitmentRaw) {
    if (privateRaw.length !== KEY) throw new E2EError("an X25519 private key is 32 bytes");
    if (!commitmentRaw || commitmentRaw.length !== KEY || !(Number(keyVersion) >= 1)) {
      throw new E2EError("a pin is a key version and a 32-byte commitment");
    }
    return apiToken + "." + b64u(privateRaw) + "." + Number(keyVersion) + "." + b64u(commitmentRaw);
  }

  // --- format 2: commitments, back-links, recipient authentication, anchors ------------------

  function constantEqual(a, b) {
    if (a.length !== b.length) return false;
    var diff = 0;
    for (var i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
    return diff === 0;
  }

  // C_v: the commitment to team `teamId`'s key of version `keyVersion`.
  function commitment(teamKey, teamId, keyVersion) {
    if (teamKey.length !== KEY) throw new E2EError("a team key is 32 bytes");
    return hkdf(teamKey, new Uint8Array(0), "cvsm-e2e:v2:commit:" + teamId + ":" + keyVersion);
  }

  function linkAad(teamId, keyVersion) {
    return encoder.encode("cvsm-e2e:v2:link:" + teamId + ":" + keyVersion);
  }

  // cvsm-link1: the key of version newVersion - 1 sealed under that of newVersion.
  async function makeLink(newKey, oldKey, teamId, newVersion) {
    if (newKey.length !== KEY || oldKey.length !== KEY || !(newVersion >= 2)) {
      throw new E2EError("a link seals a 32-byte key under the 32-byte key of a version >= 2");
    }
    var nonce = random(NONCE);
    return "cvsm-link1." + b64u(nonce) + "." +
      b64u(await seal(newKey, nonce, oldKey, linkAad(teamId, newVersion)));
  }

  async function openLink(link, newKey, teamId, newVersion) {
    var match = typeof link === "string" ? LINK_RE.exec(link) : null;
    if (match === null) throw new E2EError("a link must look like cvsm-link1.<nonce>.<ct>");
    return open(newKey, unb64u(match[1], NONCE, "nonce"), unb64u(match[2], KEY + 16, "link"),
                linkAad(teamId, newVersion), "the link of key version " + newVersion);
  }

  // The keys from currentVersion down to min(pinVersion, downTo), by version, once the chain of
  // links from currentKey reaches the pinned version and its commitment is pinCommitment.
  // `links`: { version: "cvsm-link1...." }. An E2EError otherwise.
  async function verifyChain(currentKey, currentVersion, teamId, links, pinVersion, pinCommitment,
                             downTo) {
    currentVersion = Number(currentVersion);
    pinVersion = Number(pinVersion);
    if (currentVersion < pinVersion) {
      throw new E2EError("the team key is version " + currentVersion +
                         ", below the pinned version " + pinVersion);
    }
    var lowest = downTo === undefined || downTo === null ? pinVersion
      : Math.max(1, Math.min(pinVersion, Number(downTo)));
    var keys = {};
    keys[currentVersion] = currentKey;
    var key = currentKey;
    for (var version = currentVersion; version > lowest; version--) {
      var link = links[version];
      if (link === undefined || link === null) {
        throw new E2EError("the link of key version " + version + " is missing");
      }
      key = await openLink(link, key, teamId, version);
      keys[version - 1] = key;
    }
    if (!constantEqual(await commitment(keys[pinVersion], teamId, pinVersion), pinCommitment)) {
      throw new E2EError("the team key does not match the pinned commitment of key version " +
                         pinVersion);
    }
    return keys;
  }

  function recipientMessage(kind, recipientId, publicRaw) {
    if (publicRaw.length !== KEY) throw new E2EError("an X25519 public key is 32 bytes");
    if (kind === "user" && recipientId) return "user:" + recipientId + ":" + b64u(publicRaw);
    if (kind === "token" && !recipientId) return "token:" + b64u(publicRaw);
    throw new E2EError("a recipient is ('user', its user id) or ('token', null)");
  }

  // auth: HMAC-SHA256 under the key version's recipient key over user:<id>:<public key> or
  // token:<public key>, in base64url.
  async function recipientAuth(teamKey, teamId, keyVersion, kind, recipientId, publicRaw) {
    var message = encoder.encode(recipientMessage(kind, recipientId, publicRaw));
    var raw = await hkdf(teamKey, new Uint8Array(0),
                         "cvsm-e2e:v2:recipient:" + teamId + ":" + keyVersion);
    var key = await crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false,
                                            ["sign"]);
    return b64u(new Uint8Array(await crypto.subtle.sign("HMAC", key, message)));
  }

  // An E2EError unless `auth` authenticates the recipient for the key version (a missing one too).
  async function checkRecipientAuth(auth, teamKey, teamId, keyVersion, kind, recipientId,
                                    publicRaw) {
    if (typeof auth !== "string") {
      throw new E2EError("the recipient has no authentication " +
                         "(added before format 2, or by the server)");
    }
    var expected = await recipientAuth(teamKey, teamId, keyVersion, kind, recipientId, publicRaw);
    if (!constantEqual(encoder.encode(expected), encoder.encode(auth))) {
      throw new E2EError("the recipient's public key was not added by a holder of the team key");
    }
  }

  // The anchor key A of a member's private key (32 raw bytes), as a non-extractable AES-GCM
  // CryptoKey: the dashboard keeps it beside the member's non-extractable private key.
  async function anchorKey(privateRaw) {
    if (privateRaw.length !== KEY) throw new E2EError("an X25519 private key is 32 bytes");
    return aesKeyOf(await hkdf(privateRaw, new Uint8Array(0), "cvsm-e2e:v2:anchor"));
  }

  function aesKeyOf(raw) {
    return crypto.subtle.importKey("raw", raw, { name: "AES-GCM" }, false, ["encrypt", "decrypt"]);
  }

  function anchorAad(userId, teamId) {
    return encoder.encode("cvsm-e2e:v2:anchor:" + userId + ":" + teamId);
  }

  // `key`: an anchor key (anchorKey) or the private key's 32 raw bytes.
  async function asAnchorKey(key) {
    return key instanceof CryptoKey ? key : anchorKey(key);
  }

  async function sealAnchor(key, userId, teamId, keyVersion, commitmentRaw) {
    if (!commitmentRaw || commitmentRaw.length !== KEY || !(Number(keyVersion) >= 1)) {
      throw new E2EError("an anchor holds a key version and a 32-byte commitment");
    }
    var nonce = random(NONCE);
    var ct = new Uint8Array(await crypto.subtle.encrypt(
      { name: "AES-GCM", iv: nonce, additionalData: anchorAad(userId, teamId), tagLength: 128 },
      await asAnchorKey(key), encoder.encode(Number(keyVersion) + ":" + b64u(commitmentRaw))));
    return "cvsm-anchor1." + b64u(nonce) + "." + b64u(ct);
  }

  // { keyVersion, commitment } of a member's anchor for a team.
  async function openAnchor(anchor, key, userId, teamId) {
    var match = typeof anchor === "string" ? ANCHOR_RE.exec(anchor) : null;
    if (match === null) throw new E2EError("an anchor must look like cvsm-anchor1.<nonce>.<ct>");
    var plain;
    try {
      plain = new Uint8Array(await crypto.subtle.decrypt(
        { name: "AES-GCM", iv: unb64u(match[1], NONCE, "nonce"),
          additionalData: anchorAad(userId, teamId), tagLength: 128 },
        await asAnchorKey(key), unb64u(match[2], null, "anchor")));
    } catch (e) {
      if (e instanceof E2EError) throw e;
      throw new E2EError("the anchor does not open with this key");
    }
    var inner = ANCHOR_PLAIN_RE.exec(utf8(plain, "the anchor"));
    if (inner === null) throw new E2EError("the anchor does not hold <key version>:<commitment>");
    return { keyVersion: Number(inner[1]),
             commitment: unb64u(inner[2], KEY, "the anchor's commitment") };
  }

  // A public key's fingerprint as members compare it out of band: SHA-256, first 16 bytes, hex
  // in groups of four.
  async function fingerprint(publicRaw) {
    var digest = new Uint8Array(await crypto.subtle.digest("SHA-256", publicRaw)).slice(0, 16);
    var text = Array.prototype.map.call(digest, function (b) {
      return (b < 16 ? "0" : "") + b.toString(16);
    }).join("");
    return text.match(/.{4}/g).join(" ");
  }

  window.CvsmE2E = Object.freeze({
    E2EError: E2EError,
    anchorKey: anchorKey,
    checkRecipientAuth: checkRecipientAuth,
    commitment: commitment,
    makeLink: makeLink,
    openAnchor: openAnchor,
    openLink: openLink,
    recipientAuth: recipientAuth,
    sealAnchor: sealAnchor,
    verifyChain: verifyChain,
    MIN_ITERATIONS: MIN_ITERATIONS,
    available: available,
    b64u: b64u,
    unb64u: function (text, size) { return unb64u(text, size === undefined ? null : size, "field"); },
    fingerprint: fingerprint,
    generateKeyPair: generateKeyPair,
    importPrivateKey: importPrivateKey,
    joinToken: joinToken,
    newRecoveryKey: newRecoveryKey,
    newSecretId: newSecretId,
    newTeamKey: newTeamKey,
    openPassphraseWrap: openPassphraseWrap,
    openRecoveryWrap: openRecoveryWrap,
    openShare: openShare,
    openValue: openValue,
    parseEnvelope: parseEnvelope,
    parseRecoveryKey: parseRecoveryKey,
    publicKey: publicKey,
    random: random,
    sealShare: sealShare,
    sealValue: sealValue,
    splitToken: splitToken,
    unwrapTeamKey: unwrapTeamKey,
    wrapPrivateKeyWithPassphrase: wrapPrivateKeyWithPassphrase,
    wrapPrivateKeyWithRecovery: wrapPrivateKeyWithRecovery,
    wrapTeamKey: wrapTeamKey,
  });
})();
