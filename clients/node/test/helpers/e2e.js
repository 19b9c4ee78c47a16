'use strict';
/**
 * e2e: the writing half of end-to-end teams for the tests (the client only reads): a value
 * sealed, a team key wrapped and a back-link made exactly as docs/e2e.md says, with node:crypto, so that the stub
 * can serve a team whose values and keys the tests choose. The reading half under test opens the
 * fixed vectors of conformance/vectors/e2e.json first (test/e2e.test.js).
 */

const crypto = require('node:crypto');

/** Returns `cvsm-e2e1.…`: `value` sealed under the 32-byte `teamKey` for one secret version. */
function seal(value, teamKey, keyVersion, { teamId, secretId, version, environment, name }) {
  const nonce = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', teamKey, nonce);
  cipher.setAAD(Buffer.from(`cvsm-e2e:v1:secret:${teamId}:${secretId}:${version}:${environment}:${name}`));
  const ct = Buffer.concat([cipher.update(value, 'utf8'), cipher.final(), cipher.getAuthTag()]);
  return `cvsm-e2e1.${keyVersion}.${secretId}.${version}.${nonce.toString('base64url')}.${ct.toString('base64url')}`;
}

/** Returns `cvsm-wrap1.…`: `teamKey` wrapped to the X25519 public key `recipient` (base64url). */
function wrap(teamKey, teamId, keyVersion, recipient) {
  const ephemeral = crypto.generateKeyPairSync('x25519');
  const ephemeralRaw = Buffer.from(ephemeral.publicKey.export({ format: 'jwk' }).x, 'base64url');
  const recipientKey = crypto.createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: recipient }, format: 'jwk' });
  const shared = crypto.diffieHellman({ privateKey: ephemeral.privateKey, publicKey: recipientKey });
  const salt = Buffer.concat([ephemeralRaw, Buffer.from(recipient, 'base64url')]);
  const wrapping = Buffer.from(crypto.hkdfSync('sha256', shared, salt, 'cvsm-e2e:v1:wrap', 32));
  const nonce = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', wrapping, nonce);
  cipher.setAAD(Buffer.from(`cvsm-e2e:v1:team-key:${teamId}:${keyVersion}`));
  const ct = Buffer.concat([cipher.update(teamKey), cipher.final(), cipher.getAuthTag()]);
  return `cvsm-wrap1.${ephemeralRaw.toString('base64url')}.${nonce.toString('base64url')}.${ct.toString('base64url')}`;
}

/** Returns `cvsm-link1.…`: the key of `newVersion - 1` (`oldKey`) sealed under `newKey` (format 2). */
function link(newKey, oldKey, teamId, newVersion) {
  const nonce = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', newKey, nonce);
  cipher.setAAD(Buffer.from(`cvsm-e2e:v2:link:${teamId}:${newVersion}`));
  const ct = Buffer.concat([cipher.update(oldKey), cipher.final(), cipher.getAuthTag()]);
  return `cvsm-link1.${nonce.toString('base64url')}.${ct.toString('base64url')}`;
}

module.exports = { seal, wrap, link };
