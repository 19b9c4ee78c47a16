'use strict';
/**
 * shared-stub: conformance/stub.py, the stub API every SDK's own tests share, in a child process
 * (python3, or $PYTHON) on 127.0.0.1, driven over its /_stub API: `reset` stores the fixture
 * secrets (or others), `fault` queues its scripted faults, `requests` reads what it recorded,
 * `push` changes secrets and drives its open change streams, `streams` counts them; and the
 * tests' token, team and environment helpers. helpers/stub.js is e2e.test.js's alone.
 */

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const os = require('node:os');
const path = require('node:path');

const { pkiFile } = require('./pki');

const TOKEN = 'cvsm_' + 'a1b2c3d4'.repeat(8);
const TEAM_ID = '6f1c2b9e-3d4a-4f5b-8c7d-9e0f1a2b3c4d';
const TEAM_SLUG = 'acme';
const SCRIPT = path.resolve(__dirname, '../../../../conformance/stub.py');

/** The secrets a reset stores unless told otherwise: environment -> name -> value. */
const SECRETS = {
  production: {
    DATABASE_URL: 'postgres://prod-db-value',
    API_KEY: 'prod-api-key-value',
    API_KEY_OLD: 'prod-old-key-value',
  },
  staging: { DATABASE_URL: 'postgres://staging-db-value' },
};

class SharedStub {
  /** start runs the stub (HTTPS with the test PKI's server certificate when `tls`), reset. */
  static async start({ tls = false } = {}) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cvsm-stub-'));
    const portFile = path.join(dir, 'port');
    const certs = tls ? [pkiFile('server.pem'), pkiFile('server-key.pem')] : [];
    const child = spawn(process.env.PYTHON || 'python3', [SCRIPT, portFile, ...certs], { stdio: 'ignore' });
    process.on('exit', () => child.kill());
    for (let waited = 0; !fs.existsSync(portFile); waited += 20) {
      if (waited > 10_000 || child.exitCode !== null) throw new Error('the stub did not start');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const stub = new SharedStub(child, tls, Number(fs.readFileSync(portFile, 'utf8')));
    fs.rmSync(dir, { recursive: true, force: true });
    await stub.reset();
    return stub;
  }

  constructor(child, tls, port) {
    this.child = child;
    this.tls = tls;
    this.port = port;
    this.root = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
    this.baseUrl = `${this.root}/api/v1`;
  }

  #call(method, route, body) {
    const text = body === undefined ? '' : JSON.stringify(body);
    const options = { method, agent: false, rejectUnauthorized: false, headers: { 'Content-Length': Buffer.byteLength(text) } };
    return new Promise((resolve, reject) => {
      const req = (this.tls ? https : http).request(`${this.root}${route}`, options, (res) => {
        let answer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => (answer += chunk));
        res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(answer)) : reject(new Error(answer))));
      });
      req.on('error', reject);
      req.end(text);
    });
  }

  /** reset stores `secrets` (environment -> name -> value) and forgets requests and faults. */
  reset(secrets = SECRETS) {
    const list = Object.entries(secrets).flatMap(([environment, values]) =>
      Object.entries(values).map(([name, value], i) => ({ id: `${environment}-${i}`, name, environment, value })),
    );
    const teams = [{ id: TEAM_ID, slug: TEAM_SLUG, name: 'Acme', plan: 'starter' }];
    return this.#call('POST', '/_stub/reset', { token: TOKEN, teams, secrets: list });
  }

  /** fault queues stub faults (`{path, after, count, status, body, drip, delay, drop, ...}`). */
  fault(...faults) {
    return this.#call('POST', '/_stub/faults', faults);
  }

  /** requests lists the recorded requests (`{method, path, query, headers}`), whose path ends with `suffix`. */
  async requests(suffix = '') {
    return (await this.#call('GET', '/_stub/requests')).filter((r) => r.path.endsWith(suffix));
  }

  /** push applies /_stub/changes items: `{name, value}` (announced), `{raw}`, `{close: true}`. */
  push(...items) {
    return this.#call('POST', '/_stub/changes', items);
  }

  /** streams answers `{open, closed}`: the change streams open now and ended since the reset. */
  streams() {
    return this.#call('GET', '/_stub/streams');
  }

  stop() {
    this.child.kill();
  }
}

/** The proxy variables, which the tests control. */
const PROXY_VARIABLES = ['http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'no_proxy', 'NO_PROXY'];

/** cleanEnv removes every CVSM_* and proxy variable from this process's environment. */
function cleanEnv() {
  for (const name of Object.keys(process.env)) {
    if (name.startsWith('CVSM_') || PROXY_VARIABLES.includes(name)) delete process.env[name];
  }
}

/** freePort returns a port on 127.0.0.1 that nothing listens on (connections are refused). */
async function freePort() {
  const server = http.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

module.exports = { SharedStub, SECRETS, TOKEN, TEAM_ID, TEAM_SLUG, PROXY_VARIABLES, cleanEnv, freePort };
