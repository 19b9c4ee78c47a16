'use strict';
/**
 * e2e.test: end-to-end teams. Every entry of conformance/vectors/e2e.json (read from the
 * repository, never copied) opens or fails as it says; then the Client against the stub API
 * serving an end-to-end team: concurrent reads sharing one key fetch, the vectors' key answers,
 * and a key part that never leaves the process (the wire rules are the conformance cases e2e_*).
 */

const { test, describe, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const util = require('node:util');
const {
  Client,
  CvsmError,
  ConfigurationError,
  DecryptionError,
} = require('../lib');
const {
  splitToken,
  unwrapTeamKey,
  openValue,
  privateKeyOf,
  rawPublicKey,
  commitment,
  openLink,
  verifyChain,
} = require('../lib/e2e');
const { StubServer, TEAM_SLUG, cleanEnv } = require('./helpers/stub');
const { seal, wrap, link } = require('./helpers/e2e');

cleanEnv();

const VECTORS = JSON.parse(
  fs.readFileSync(path.resolve(__dirname, '../../../conformance/vectors/e2e.json'), 'utf8'),
);
const TEAM_KEY = Buffer.from(VECTORS.team_key, 'base64url');
const TOKEN_RECIPIENT = VECTORS.recipients.find((r) => r.what === 'token');
const MEMBER_RECIPIENT = VECTORS.recipients.find((r) => r.what === 'member');
const { token: TOKEN, api_token: API_TOKEN, private_key: KEY_PART } = VECTORS.token;

describe('vectors: conformance/vectors/e2e.json', () => {
  test('the file is the version 2 vectors, with every part the client opens', () => {
    assert.match(VECTORS.format, /version 2/);
    assert.ok(VECTORS.token_pins.some((p) => p.outcome === 'ok'));
    assert.ok(VECTORS.token_pins.some((p) => p.outcome === 'integrity'));
    assert.ok(VECTORS.chain.links.length >= 2 && VECTORS.chain.bad_links.length > 0);
    assert.ok(VECTORS.recipients.length >= 2);
    assert.ok(VECTORS.values.some((v) => v.opens) && VECTORS.values.some((v) => !v.opens));
    assert.ok(VECTORS.bad_tokens.length > 0);
  });

  for (const recipient of VECTORS.recipients) {
    test(`the ${recipient.what}'s wrapped key opens with its private key to the team key`, () => {
      const privateKey = privateKeyOf(Buffer.from(recipient.private_key, 'base64url'));
      assert.equal(rawPublicKey(privateKey).toString('base64url'), recipient.public_key);
      const key = unwrapTeamKey(recipient.wrapped_key, VECTORS.team_id, VECTORS.key_version, privateKey);
      assert.equal(key.type, 'secret');
      assert.deepEqual(key.export(), TEAM_KEY);
    });
  }

  test('a wrap does not open for another team, key version or recipient', () => {
    const own = privateKeyOf(Buffer.from(TOKEN_RECIPIENT.private_key, 'base64url'));
    const other = privateKeyOf(Buffer.from(MEMBER_RECIPIENT.private_key, 'base64url'));
    const wrapped = TOKEN_RECIPIENT.wrapped_key;
    const otherTeam = VECTORS.team_id.replace(/^./, (c) => (c === '0' ? '1' : '0'));
    for (const [teamId, version, key] of [
      [otherTeam, VECTORS.key_version, own],
      [VECTORS.team_id, VECTORS.key_version + 1, own],
      [VECTORS.team_id, VECTORS.key_version, other],
    ]) {
      assert.throws(() => unwrapTeamKey(wrapped, teamId, version, key), DecryptionError);
    }
    assert.throws(() => unwrapTeamKey('cvsm-wrap1.x.y', VECTORS.team_id, VECTORS.key_version, own), DecryptionError);
  });

  VECTORS.values.forEach((entry, i) => {
    const what = entry.opens ? `opens to its value` : `fails with DecryptionError (${entry.why})`;
    test(`values[${i}]: ${entry.name} in ${entry.environment} ${what}`, () => {
      const teamKey = crypto.createSecretKey(TEAM_KEY);
      const where = { teamId: VECTORS.team_id, environment: entry.environment, name: entry.name };
      if (entry.opens) {
        assert.equal(openValue(entry.envelope, teamKey, where), entry.value);
      } else {
        assert.throws(
          () => openValue(entry.envelope, teamKey, where),
          (err) => err instanceof DecryptionError && err instanceof CvsmError && err.status === null,
        );
      }
    });
  });

  test('the token splits into its API token, its private key and its pin', () => {
    const { apiToken, privateKey, pin } = splitToken(TOKEN);
    assert.equal(apiToken, API_TOKEN);
    assert.equal(pin.keyVersion, VECTORS.token.key_version);
    assert.equal(pin.commitment.toString('base64url'), VECTORS.token.commitment);
    assert.equal(privateKey.export({ format: 'jwk' }).d, KEY_PART);
    assert.equal(rawPublicKey(privateKey).toString('base64url'), TOKEN_RECIPIENT.public_key);
    assert.equal(TOKEN_RECIPIENT.private_key, KEY_PART);
  });

  VECTORS.bad_tokens.forEach((bad, i) => {
    test(`bad_tokens[${i}] is a configuration error at construction that never quotes it`, () => {
      assert.throws(
        () => new Client({ token: bad, baseUrl: 'http://127.0.0.1:9/api/v1', team: TEAM_SLUG }),
        (err) => {
          assert.ok(err instanceof ConfigurationError, String(err));
          assert.match(err.message, /key part/);
          for (const part of bad.split('.').filter((p) => p.length > 3)) {
            assert.ok(!err.message.includes(part), err.message);
          }
          return true;
        },
      );
    });
  });

  test('a key part that is not canonical base64url (spare bits set) is a configuration error', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = alphabet.indexOf(KEY_PART.at(-1));
    const loose = KEY_PART.slice(0, -1) + alphabet[last | 1];
    assert.deepEqual(Buffer.from(loose, 'base64url'), Buffer.from(KEY_PART, 'base64url'));
    assert.throws(() => splitToken(`${API_TOKEN}.${loose}`), ConfigurationError);
  });

  test('a token without a dot, and a JWT, are sent as they are', () => {
    assert.deepEqual(splitToken(API_TOKEN), { apiToken: API_TOKEN, privateKey: null, pin: null });
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl';
    assert.deepEqual(splitToken(jwt), { apiToken: jwt, privateKey: null, pin: null });
  });

  test('v1_token (the first format, no pin) is a configuration error that says so and never quotes it', () => {
    const options = { token: VECTORS.v1_token, baseUrl: 'http://127.0.0.1:9/api/v1', team: TEAM_SLUG };
    for (const build of [() => splitToken(VECTORS.v1_token), () => new Client(options)]) {
      assert.throws(build, (err) => {
        assert.ok(err instanceof ConfigurationError, String(err));
        assert.match(err.message, /first format, without its pin/);
        assert.match(err.message, /make a new token/);
        for (const part of VECTORS.v1_token.split('.')) assert.ok(!err.message.includes(part.slice(5)));
        return true;
      });
    }
  });

  for (const entry of VECTORS.chain.keys) {
    test(`chain: the commitment of key version ${entry.key_version} is the vectors'`, () => {
      const key = crypto.createSecretKey(Buffer.from(entry.team_key, 'base64url'));
      assert.equal(commitment(key, VECTORS.chain.team_id, entry.key_version).toString('base64url'), entry.commitment);
      // Another team or version commits to something else.
      assert.notEqual(commitment(key, VECTORS.team_id.replace(/^./, 'a'), entry.key_version).toString('base64url'), entry.commitment);
      assert.notEqual(commitment(key, VECTORS.chain.team_id, entry.key_version + 1).toString('base64url'), entry.commitment);
    });
  }

  for (const entry of VECTORS.chain.links) {
    test(`chain: the link of key version ${entry.key_version} opens to the key before it`, () => {
      const newer = VECTORS.chain.keys.find((k) => k.key_version === entry.key_version);
      const key = crypto.createSecretKey(Buffer.from(newer.team_key, 'base64url'));
      const older = openLink(entry.link, key, VECTORS.chain.team_id, entry.key_version);
      assert.equal(older.export().toString('base64url'), entry.opens_to);
    });
  }

  VECTORS.chain.bad_links.forEach((entry, i) => {
    test(`chain: bad_links[${i}] does not open (${entry.why})`, () => {
      const key = crypto.createSecretKey(Buffer.from(entry.key, 'base64url'));
      assert.throws(() => openLink(entry.link, key, VECTORS.chain.team_id, entry.key_version), DecryptionError);
    });
  });

  VECTORS.token_pins.forEach((entry, i) => {
    test(`token_pins[${i}]: ${entry.outcome} (${entry.why})`, () => {
      const answer = entry.key_answer;
      const open = () => {
        const { privateKey, pin } = splitToken(entry.token);
        const current = unwrapTeamKey(answer.wrapped_key, answer.team_id, answer.key_version, privateKey);
        const links = new Map((answer.links ?? []).map((l) => [l.key_version, l.link]));
        return verifyChain(current, answer.key_version, answer.team_id, links, pin);
      };
      if (entry.outcome === 'ok') {
        const keys = open();
        const { pin } = splitToken(entry.token);
        for (const k of VECTORS.chain.keys.filter((k) => k.key_version >= pin.keyVersion)) {
          assert.equal(keys.get(k.key_version).export().toString('base64url'), k.team_key);
        }
      } else if (entry.outcome === 'integrity') {
        assert.throws(open, (err) => err instanceof DecryptionError && err.status === null);
      } else {
        assert.equal(entry.outcome, 'configuration');
        assert.throws(open, ConfigurationError);
      }
    });
  });

  test('verifyChain walks on below the pin when asked, and refuses a team rolled back below it', () => {
    const keys = Object.fromEntries(
      VECTORS.chain.keys.map((k) => [k.key_version, crypto.createSecretKey(Buffer.from(k.team_key, 'base64url'))]),
    );
    const links = new Map(VECTORS.chain.links.map((l) => [l.key_version, l.link]));
    const commit = (v) => Buffer.from(VECTORS.chain.keys[v - 1].commitment, 'base64url');
    const walked = verifyChain(keys[3], 3, VECTORS.chain.team_id, links, { keyVersion: 2, commitment: commit(2) }, { downTo: 1 });
    assert.equal(walked.get(1).export().toString('base64url'), VECTORS.chain.keys[0].team_key);
    assert.throws(
      () => verifyChain(keys[2], 2, VECTORS.chain.team_id, links, { keyVersion: 3, commitment: commit(3) }),
      (err) => err instanceof DecryptionError && /below the pinned version 3/.test(err.message),
    );
  });
});

/** Resolves once `cond()` holds, polling every 5 ms for at most 5 s. */
async function waitUntil(cond) {
  for (const deadline = Date.now() + 5000; !cond(); ) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The end-to-end team the stub serves: its values, sealed under the vectors' team key. */
const SECRET_IDS = {
  DATABASE_URL: '0b6d3e2a-8f41-4a5c-b3d2-7e9c1f0a4b58',
  API_KEY: 'c2a7f9e1-5b3d-4e8a-9f60-1d2c3b4a5e6f',
};
const PLAIN = {
  production: { DATABASE_URL: 'postgres://prod-e2e-value', API_KEY: 'kunci rahasia — café 🔑' },
  staging: { DATABASE_URL: 'postgres://staging-e2e-value' },
};

/** Returns the envelopes of PLAIN (or `plain`), sealed under `key` at `keyVersion`. */
function sealAll(plain = PLAIN, key = TEAM_KEY, keyVersion = VECTORS.key_version) {
  const sealed = {};
  for (const [environment, values] of Object.entries(plain)) {
    sealed[environment] = {};
    for (const [name, value] of Object.entries(values)) {
      sealed[environment][name] = seal(value, key, keyVersion, {
        teamId: VECTORS.team_id,
        secretId: SECRET_IDS[name],
        version: 3,
        environment,
        name,
      });
    }
  }
  return sealed;
}

/**
 * The key answer of the team at `keyVersion`, wrapped to the token's public key, with the links
 * from it down to the token's pin (version 1): the vectors' link of version 2, and for a re-key
 * to the next version a link of `key` back to the vectors' team key.
 */
function keyAnswer(key = TEAM_KEY, keyVersion = VECTORS.key_version) {
  const links = VECTORS.chain.links
    .filter((l) => l.key_version <= VECTORS.key_version)
    .map(({ key_version: v, link: l }) => ({ key_version: v, link: l }));
  if (keyVersion === VECTORS.key_version + 1) {
    links.push({ key_version: keyVersion, link: link(key, TEAM_KEY, VECTORS.team_id, keyVersion) });
  }
  return {
    team_id: VECTORS.team_id,
    key_version: keyVersion,
    wrapped_key:
      key === TEAM_KEY && keyVersion === VECTORS.key_version
        ? TOKEN_RECIPIENT.wrapped_key
        : wrap(key, VECTORS.team_id, keyVersion, TOKEN_RECIPIENT.public_key),
    auth: null,
    links,
  };
}

describe('client: an end-to-end team', () => {
  let stub;

  function client(options = {}) {
    return new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_SLUG, ...options });
  }

  const BY_NAME = (name, environment = 'production') =>
    `/api/v1/teams/${TEAM_SLUG}/secrets/by-name/${name}?environment=${environment}`;
  const KEY = `/api/v1/teams/${TEAM_SLUG}/e2e/key`;
  const EXPORT = `/api/v1/teams/${TEAM_SLUG}/secrets/export?format=json&environment=production`;

  before(async () => {
    stub = await new StubServer({ token: API_TOKEN, e2e: keyAnswer(), secrets: sealAll() }).start();
  });

  after(async () => {
    await stub.close();
  });

  beforeEach(() => {
    stub.requests.length = 0;
    stub.faults.length = 0;
    stub.e2e = keyAnswer();
    stub.secrets = sealAll();
  });

  test('reads that start together share one key fetch', async () => {
    const c = client();
    const values = await Promise.all([c.get('DATABASE_URL'), c.get('API_KEY'), c.getAll()]);
    assert.deepEqual(values, [PLAIN.production.DATABASE_URL, PLAIN.production.API_KEY, PLAIN.production]);
    assert.equal(stub.paths.filter((p) => p === KEY).length, 1);
  });

  test('neither the printed client nor its JSON shows the token or its key part', () => {
    const c = client();
    for (const text of [util.inspect(c), util.inspect(c, { depth: null, showHidden: true }), JSON.stringify(c), String(c)]) {
      assert.ok(!text.includes(KEY_PART), text);
      assert.ok(!text.includes(API_TOKEN), text);
    }
  });

  test('a read of a newer key version that joined a key fetch begun before the re-key fetches the key itself', async () => {
    const c = client({ cacheTtl: 0 });
    let release;
    const released = new Promise((resolve) => {
      release = resolve;
    });
    // The first read's key fetch is answered with the key of before the re-key, held back...
    stub.fault({ pass: true }, { until: released, status: 200, body: keyAnswer() });
    const first = c.get('DATABASE_URL');
    await waitUntil(() => stub.requests.length === 2);
    // ...while the team is re-keyed and a second read gets a value sealed under the new version.
    const newKey = crypto.randomBytes(32);
    const newVersion = VECTORS.key_version + 1;
    stub.secrets = sealAll(PLAIN, newKey, newVersion);
    stub.e2e = keyAnswer(newKey, newVersion);
    const second = c.get('API_KEY');
    await waitUntil(() => stub.requests.length === 3);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the second read joins the fetch
    release();
    assert.equal(await first, PLAIN.production.DATABASE_URL);
    assert.equal(await second, PLAIN.production.API_KEY);
    assert.deepEqual(stub.paths, [BY_NAME('DATABASE_URL'), KEY, BY_NAME('API_KEY'), KEY]);
    // The key of the new version is the one kept.
    stub.requests.length = 0;
    assert.equal(await c.get('DATABASE_URL'), PLAIN.production.DATABASE_URL);
    assert.deepEqual(stub.paths, [BY_NAME('DATABASE_URL')]);
  });

  VECTORS.token_pins
    .filter((entry) => entry.outcome !== 'configuration')
    .forEach((entry) => {
      const outcome = entry.outcome === 'ok' ? 'opens the values' : 'is a DecryptionError, never retried nor kept';
      test(`the client with a token_pins answer (${entry.why}) ${outcome}`, async () => {
        // The values are sealed under key version 2; the answer's current version is 3.
        stub.e2e = entry.key_answer;
        const c = client({ token: entry.token, maxRetries: 2 });
        if (entry.outcome === 'ok') {
          assert.equal(await c.get('DATABASE_URL'), PLAIN.production.DATABASE_URL);
          assert.deepEqual(await c.getAll(), PLAIN.production);
          assert.deepEqual(stub.paths, [BY_NAME('DATABASE_URL'), KEY, EXPORT]);
          return;
        }
        for (let round = 0; round < 2; round += 1) {
          await assert.rejects(c.get('DATABASE_URL'), (err) => {
            assert.ok(err instanceof DecryptionError, String(err));
            assert.match(err.message, /is not one a team member made for it/);
            assert.ok(!err.message.includes(entry.token.split('.')[1]));
            return true;
          });
        }
        await assert.rejects(c.getAll(), DecryptionError);
        // Each read asked for the key once: never retried, and nothing was kept.
        assert.deepEqual(stub.paths, [BY_NAME('DATABASE_URL'), KEY, BY_NAME('DATABASE_URL'), KEY, EXPORT, KEY]);
      });
    });

  test('a key answer whose links are not [{key_version, link}] is a DecryptionError', async () => {
    stub.e2e = { ...keyAnswer(), links: [{ key_version: '2', link: 'cvsm-link1.a.b' }] };
    await assert.rejects(client().get('DATABASE_URL'), /links of the key answer are not/);
  });
});
