'use strict';
/**
 * e2e: the reading half of end-to-end teams, exactly as docs/e2e.md defines its formats (format
 * 2). It splits a token into its API token, private key and pin (`splitToken`), unwraps the team
 * key the server hands out (`unwrapTeamKey`), walks the key versions' back-links down to the
 * pinned version and checks its commitment (`verifyChain`), and opens sealed values
 * (`openValue`). Keys live in `KeyObject`s,
 * which never print their material; no message here ever holds a key, a token or a value.
 *
 * Primitives: X25519 (`diffieHellman`), HKDF-SHA256 (`hkdfSync`) and AES-256-GCM, all from
 * node:crypto.
 */

const crypto = require('node:crypto');
const { ConfigurationError, DecryptionError } = require('./errors');
const rules = require('./rules');

const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

const B64U = '[A-Za-z0-9_-]+';
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const NUMBER = '[1-9][0-9]{0,9}';
const ENVELOPE_RE = new RegExp(`^cvsm-e2e1\\.(${NUMBER})\\.(${UUID})\\.(${NUMBER})\\.(${B64U})\\.(${B64U})$`);
const WRAP_RE = new RegExp(`^cvsm-wrap1\\.(${B64U})\\.(${B64U})\\.(${B64U})$`);
const LINK_RE = new RegExp(`^cvsm-link1\\.(${B64U})\\.(${B64U})$`);
const TOKEN_RE = new RegExp(`^(cvsm_[0-9a-f]{64})\\.(${B64U})\\.(${NUMBER})\\.(${B64U})$`);
/** A token of the first format: its key part has no pin (made before format 2). */
const TOKEN_V1_RE = new RegExp(`^cvsm_[0-9a-f]{64}\\.${B64U}$`);

/** The DER prefixes that turn 32 raw bytes into an X25519 PKCS#8 private or SPKI public key. */
const PKCS8_X25519 = Buffer.from('302e020100300506032b656e04220420', 'hex');
const SPKI_X25519 = Buffer.from('302a300506032b656e032100', 'hex');

const WRAP_INFO = Buffer.from('cvsm-e2e:v1:wrap');

/**
 * Returns the bytes of canonical base64url text without padding, or throws DecryptionError
 * naming `what` (never the text).
 */
function fromB64u(text, size, what) {
  const bytes = Buffer.from(text, 'base64url');
  if (bytes.toString('base64url') !== text) {
    throw new DecryptionError(`${what} is not canonical base64url`);
  }
  if (size !== null && bytes.length !== size) {
    throw new DecryptionError(`${what} must be ${size} bytes`);
  }
  return bytes;
}

/** Returns the X25519 private KeyObject of 32 raw bytes. */
function privateKeyOf(raw) {
  return crypto.createPrivateKey({ key: Buffer.concat([PKCS8_X25519, raw]), format: 'der', type: 'pkcs8' });
}

/** Returns the 32 raw bytes of the public half of an X25519 private KeyObject. */
function rawPublicKey(privateKey) {
  return Buffer.from(crypto.createPublicKey(privateKey).export({ format: 'jwk' }).x, 'base64url');
}

/**
 * Opens an AES-256-GCM ciphertext (its tag at the end) and returns the plain bytes, or throws
 * DecryptionError saying that `what` does not open.
 */
function openGcm(key, nonce, sealed, aad, what) {
  if (sealed.length < TAG_BYTES) throw new DecryptionError(`${what} is shorter than its tag`);
  const decipher = crypto.createDecipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
  decipher.setAAD(aad);
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - TAG_BYTES)), decipher.final()]);
  } catch {
    throw new DecryptionError(`${what} does not open with this key`);
  }
}

/**
 * Splits the token an application was given into the API token the server knows (the part
 * before the first dot) and, for an end-to-end team's token, its X25519 private key as a KeyObject
 * and its pin: the key version current when the token was made and that key's commitment
 * (docs/e2e.md, format 2). A token without a dot, and a dotted one that does not start with
 * `cvsm_` (a JWT), are API tokens as they are; a `cvsm_` token with a dot must be
 * `cvsm_<64 hex>.<private key>.<key version>.<commitment>`.
 * @param {string} token The whole token, already trimmed.
 * @returns {{ apiToken: string, privateKey: crypto.KeyObject | null,
 *   pin: { keyVersion: number, commitment: Buffer } | null }}
 * @throws {ConfigurationError} For a token of the first format (`cvsm_<64 hex>.<key>`, no pin)
 *   and for a `cvsm_` token with any other malformed key part; the message never quotes the token.
 */
function splitToken(token) {
  if (!token.includes('.') || !token.startsWith('cvsm_')) {
    return { apiToken: token, privateKey: null, pin: null };
  }
  const match = TOKEN_RE.exec(token);
  if (match === null && TOKEN_V1_RE.test(token)) {
    throw new ConfigurationError(
      `${rules.MESSAGE_FIRST_FORMAT_TOKEN} for the team (docs/e2e.md) and revoke this one: ` +
        'token (CVSM_TOKEN) has a key part of the first format, without its pin (cvsm_<64 hex>.<key>)',
    );
  }
  const bad = new ConfigurationError(
    'token (CVSM_TOKEN) has a key part but is not ' +
      'cvsm_<64 hex>.<private key>.<key version>.<commitment>: ' +
      'give the whole token as it was shown when it was made',
  );
  if (match === null) throw bad;
  let raw;
  let commitment;
  try {
    raw = fromB64u(match[2], KEY_BYTES, "the token's key part");
    commitment = fromB64u(match[4], KEY_BYTES, "the token's key commitment");
  } catch {
    throw bad;
  }
  const privateKey = privateKeyOf(raw);
  raw.fill(0);
  return { apiToken: match[1], privateKey, pin: { keyVersion: Number(match[3]), commitment } };
}

/**
 * Returns the team key in a `cvsm-wrap1.<eph>.<nonce>.<ct>` wrap, opened with the recipient's
 * private key and bound to `teamId` and `keyVersion`, as a secret KeyObject.
 * @param {string} wrapped The wrap the server answered.
 * @param {string} teamId The team's id, as the same answer gives it.
 * @param {number} keyVersion The key's version, as the same answer gives it.
 * @param {crypto.KeyObject} privateKey The recipient's X25519 private key.
 * @returns {crypto.KeyObject}
 * @throws {DecryptionError} When the wrap is malformed or does not open with this key.
 */
function unwrapTeamKey(wrapped, teamId, keyVersion, privateKey) {
  const match = WRAP_RE.exec(wrapped);
  if (match === null) {
    throw new DecryptionError('the wrapped team key is not cvsm-wrap1.<eph>.<nonce>.<ct>');
  }
  const ephemeral = fromB64u(match[1], KEY_BYTES, 'the ephemeral key');
  const nonce = fromB64u(match[2], NONCE_BYTES, 'the nonce');
  const sealed = fromB64u(match[3], KEY_BYTES + TAG_BYTES, 'the wrapped key');
  let shared;
  try {
    const publicKey = crypto.createPublicKey({
      key: Buffer.concat([SPKI_X25519, ephemeral]),
      format: 'der',
      type: 'spki',
    });
    shared = crypto.diffieHellman({ privateKey, publicKey });
  } catch {
    // OpenSSL refuses a low-order point (an all-zero shared secret) here.
    throw new DecryptionError('the ephemeral key of the wrapped team key is not usable');
  }
  if (shared.every((byte) => byte === 0)) {
    throw new DecryptionError('the ephemeral key of the wrapped team key is not usable');
  }
  const salt = Buffer.concat([ephemeral, rawPublicKey(privateKey)]);
  const wrapping = Buffer.from(crypto.hkdfSync('sha256', shared, salt, WRAP_INFO, KEY_BYTES));
  const aad = Buffer.from(`cvsm-e2e:v1:team-key:${teamId}:${keyVersion}`);
  const teamKey = openGcm(wrapping, nonce, sealed, aad, 'the wrapped team key');
  const key = crypto.createSecretKey(teamKey);
  teamKey.fill(0);
  wrapping.fill(0);
  return key;
}

/**
 * Returns the parts of a sealed value `cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ct>`.
 * @param {string} envelope The sealed value.
 * @returns {{ keyVersion: number, secretId: string, version: number, nonce: Buffer, sealed: Buffer }}
 * @throws {DecryptionError} When it is not one.
 */
function parseEnvelope(envelope) {
  const match = ENVELOPE_RE.exec(envelope);
  if (match === null) {
    throw new DecryptionError(
      'the sealed value is not cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ciphertext>',
    );
  }
  const sealed = fromB64u(match[5], null, 'the ciphertext');
  if (sealed.length < TAG_BYTES) throw new DecryptionError('the ciphertext is shorter than its tag');
  return {
    keyVersion: Number(match[1]),
    secretId: match[2],
    version: Number(match[3]),
    nonce: fromB64u(match[4], NONCE_BYTES, 'the nonce'),
    sealed,
  };
}

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * Returns the value sealed in `envelope`, which must have been sealed for `environment` and
 * `name` in team `teamId`: so a server cannot serve one secret's value as another's, nor another
 * environment's.
 * @param {string | ReturnType<typeof parseEnvelope>} envelope The sealed value, or its parts.
 * @param {crypto.KeyObject} teamKey The team key of the envelope's key version.
 * @param {{ teamId: string, environment: string, name: string }} where The team the key came
 *   with, and the environment and name that were asked for.
 * @returns {string}
 * @throws {DecryptionError} When the envelope is malformed, does not open, or is not UTF-8.
 */
function openValue(envelope, teamKey, { teamId, environment, name }) {
  const parts = typeof envelope === 'string' ? parseEnvelope(envelope) : envelope;
  const aad = Buffer.from(
    `cvsm-e2e:v1:secret:${teamId}:${parts.secretId}:${parts.version}:${environment}:${name}`,
  );
  const plain = openGcm(teamKey, parts.nonce, parts.sealed, aad, 'the sealed value');
  try {
    return UTF8.decode(plain);
  } catch {
    throw new DecryptionError('the sealed value is not UTF-8');
  } finally {
    plain.fill(0);
  }
}

// --- format 2: commitments and back-links ------------------------------------------------------

/**
 * Returns `C_v`, the 32-byte commitment to team `teamId`'s key of version `keyVersion`:
 * HKDF-SHA256(ikm = the key, salt = "", info = "cvsm-e2e:v2:commit:<team>:<version>").
 * @param {crypto.KeyObject | Buffer} teamKey The team key of that version.
 * @param {string} teamId The team's id.
 * @param {number} keyVersion The key's version.
 * @returns {Buffer}
 */
function commitment(teamKey, teamId, keyVersion) {
  const info = Buffer.from(`cvsm-e2e:v2:commit:${teamId}:${keyVersion}`);
  return Buffer.from(crypto.hkdfSync('sha256', teamKey, Buffer.alloc(0), info, KEY_BYTES));
}

/**
 * Returns the nonce and ciphertext of the back-link `cvsm-link1.<nonce>.<ct>` stored with
 * `newVersion` (12 and 48 bytes of canonical base64url), or throws DecryptionError (never
 * showing the link).
 * @param {string} link
 * @param {number} newVersion
 * @returns {{ nonce: Buffer, sealed: Buffer }}
 */
function parseLink(link, newVersion) {
  const match = typeof link === 'string' ? LINK_RE.exec(link) : null;
  if (match === null) {
    throw new DecryptionError(`the link of key version ${newVersion} is not cvsm-link1.<nonce>.<ct>`);
  }
  const nonce = fromB64u(match[1], NONCE_BYTES, `the nonce of the link of key version ${newVersion}`);
  const sealed = fromB64u(match[2], KEY_BYTES + TAG_BYTES, `the link of key version ${newVersion}`);
  return { nonce, sealed };
}

/**
 * Returns the team key of version `newVersion - 1`, opened from the back-link
 * `cvsm-link1.<nonce>.<ct>` stored with `newVersion`, as a secret KeyObject.
 * @param {string} link The link the key answer lists for `newVersion`.
 * @param {crypto.KeyObject} newKey The (verified) team key of `newVersion`.
 * @param {string} teamId The team's id.
 * @param {number} newVersion The key version the link is stored with.
 * @returns {crypto.KeyObject}
 * @throws {DecryptionError} When the link is malformed or does not open with `newKey`.
 */
function openLink(link, newKey, teamId, newVersion) {
  const { nonce, sealed } = parseLink(link, newVersion);
  const aad = Buffer.from(`cvsm-e2e:v2:link:${teamId}:${newVersion}`);
  const older = openGcm(newKey, nonce, sealed, aad, `the link of key version ${newVersion}`);
  const key = crypto.createSecretKey(older);
  older.fill(0);
  return key;
}

/**
 * Walks the chain of back-links from the current team key down to the pinned version and checks
 * the pinned key's commitment in constant time (docs/e2e.md, "Walking a chain"). Only then may
 * the keys be used.
 * @param {crypto.KeyObject} currentKey The team key of `currentVersion`, opened from the wrap.
 * @param {number} currentVersion The key version the answer gave.
 * @param {string} teamId The team's id, as the answer gave it.
 * @param {Map<number, string>} links The team's links by the key version they are stored with.
 * @param {{ keyVersion: number, commitment: Buffer }} pin The token's pin.
 * @param {{ downTo?: number }} [options] Walk on below the pin, down to this version.
 * @returns {Map<number, crypto.KeyObject>} The keys from `currentVersion` down, by version.
 * @throws {DecryptionError} When the current version is below the pin, a link is missing or does
 *   not open, or the commitment differs: the key was not made by a holder of the pinned one.
 */
function verifyChain(currentKey, currentVersion, teamId, links, pin, { downTo } = {}) {
  if (currentVersion < pin.keyVersion) {
    throw new DecryptionError(
      `the team key is version ${currentVersion}, below the pinned version ${pin.keyVersion}`,
    );
  }
  const keys = walkDown(currentKey, currentVersion, teamId, links, pin.keyVersion);
  const expected = commitment(keys.get(pin.keyVersion), teamId, pin.keyVersion);
  if (pin.commitment.length !== expected.length || !crypto.timingSafeEqual(expected, pin.commitment)) {
    throw new DecryptionError(
      `the team key does not match the pinned commitment of key version ${pin.keyVersion}`,
    );
  }
  if (downTo !== undefined && downTo < pin.keyVersion) {
    const below = walkDown(keys.get(pin.keyVersion), pin.keyVersion, teamId, links, Math.max(1, downTo));
    for (const [version, key] of below) keys.set(version, key);
  }
  return keys;
}

/**
 * Returns the keys from `version` (whose key is `key`, already verified) down to `lowest`,
 * opening the links one by one; DecryptionError when one is missing or does not open.
 */
function walkDown(key, version, teamId, links, lowest) {
  const keys = new Map([[version, key]]);
  for (let v = version; v > lowest; v -= 1) {
    const link = links.get(v);
    if (link === undefined) throw new DecryptionError(`the link of key version ${v} is missing`);
    key = openLink(link, key, teamId, v);
    keys.set(v - 1, key);
  }
  return keys;
}

module.exports = {
  splitToken,
  unwrapTeamKey,
  parseEnvelope,
  openValue,
  privateKeyOf,
  rawPublicKey,
  commitment,
  parseLink,
  openLink,
  verifyChain,
  walkDown,
};
