'use strict';
/**
 * pki: the tests' private CA and server certificate, made when a test process first asks for
 * them, in a temporary directory removed when the process exits, so no key is committed.
 * Keys come from node:crypto; node-forge (a dev dependency) writes the certificates, which
 * node:crypto cannot.
 *
 * Files: `ca.pem` (a CA whose key is never written), `server.pem` and `server-key.pem` (signed
 * by it for localhost and 127.0.0.1), `other-ca.pem` (an unrelated CA, which must not be enough
 * to trust the server).
 */

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const forge = require('node-forge');

const CA_EXTENSIONS = [
  { name: 'basicConstraints', cA: true, critical: true },
  { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
];

function keyPair() {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    pem: privateKey.export({ type: 'pkcs8', format: 'pem' }),
    privateKey: forge.pki.privateKeyFromPem(privateKey.export({ type: 'pkcs1', format: 'pem' })),
    publicKey: forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' })),
  };
}

/** certificate signs `keys.publicKey` as `subject`, by `issuer` with `issuerKey`, for a day. */
function certificate({ subject, keys, issuer, issuerKey, extensions }) {
  const cert = forge.pki.createCertificate();
  cert.publicKey = keys.publicKey;
  cert.serialNumber = '01' + crypto.randomBytes(8).toString('hex'); // positive
  cert.validity.notBefore = new Date(Date.now() - 60_000);
  cert.validity.notAfter = new Date(Date.now() + 24 * 3600_000);
  cert.setSubject([{ name: 'commonName', value: subject }]);
  cert.setIssuer([{ name: 'commonName', value: issuer }]);
  cert.setExtensions(extensions);
  cert.sign(issuerKey, forge.md.sha256.create());
  return forge.pki.certificateToPem(cert);
}

function make() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cvsm-node-pki-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const ca = keyPair();
  const other = keyPair();
  const server = keyPair();
  const files = {
    'ca.pem': certificate({
      subject: 'cvsm tests CA', keys: ca, issuer: 'cvsm tests CA', issuerKey: ca.privateKey,
      extensions: CA_EXTENSIONS,
    }),
    'other-ca.pem': certificate({
      subject: 'cvsm tests unrelated CA', keys: other, issuer: 'cvsm tests unrelated CA',
      issuerKey: other.privateKey, extensions: CA_EXTENSIONS,
    }),
    'server.pem': certificate({
      subject: 'localhost', keys: server, issuer: 'cvsm tests CA', issuerKey: ca.privateKey,
      extensions: [
        { name: 'basicConstraints', cA: false },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', serverAuth: true },
        { name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }] },
      ],
    }),
    'server-key.pem': server.pem,
  };
  for (const [name, text] of Object.entries(files)) {
    fs.writeFileSync(path.join(dir, name), text, { mode: 0o600 });
  }
  return dir;
}

let dir;

/** pkiFile is the path of one of the files above (made on first use). */
function pkiFile(name) {
  dir ??= make();
  return path.join(dir, name);
}

module.exports = { pkiFile };
