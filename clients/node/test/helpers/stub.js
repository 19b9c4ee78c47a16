'use strict';
/**
 * stub: e2e.test.js's in-process imitation of the cvsm API (secret by name, JSON export, an
 * end-to-end team's key; a team by id or slug) on 127.0.0.1, recording every request,
 * with a queue of one-shot faults. Every other test uses the shared stub (shared-stub.js,
 * conformance/stub.py); this one goes when e2e.test.js's rules are conformance cases.
 */

const http = require('node:http');

const { SECRETS, TOKEN, TEAM_ID, TEAM_SLUG, cleanEnv } = require('./shared-stub');

function send(res, status, body, headers = {}) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(text);
}

/**
 * StubServer answers like the cvsm API. `secrets` maps environment -> name -> value.
 * `fault(spec)` queues a one-shot answer for the next request: `{until, status, body, headers}`
 * (that answer, made now, sent once the promise `until` resolves) or `{pass: true}` (answer
 * normally). Every answer carries `X-Request-Id: req-<n>`,
 * n counting requests from 1. `token` is the API token it accepts (default TOKEN). With `e2e`
 * (`{team_id, key_version, wrapped_key}`, replaceable later through `stub.e2e`) the team is
 * end-to-end: `secrets` then holds envelopes, the by-name answer's secret says `"e2e": true`, the export carries the header
 * `Cvsm-E2E: 1`, and `GET /teams/:team/e2e/key` answers `e2e`; without it that route answers
 * 400, as the server does for a team that is not.
 */
class StubServer {
  constructor({ secrets, token = TOKEN, e2e = null } = {}) {
    this.token = token;
    this.e2e = e2e;
    this.requests = [];
    this.faults = [];
    this.secrets = secrets || structuredClone(SECRETS);
    this.server = http.createServer((req, res) => this.#handle(req, res));
  }

  /** start listens on a free port of 127.0.0.1. */
  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
    this.baseUrl = `http://127.0.0.1:${this.port}/api/v1`;
    return this;
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  fault(...specs) {
    this.faults.push(...specs);
  }

  /** paths lists the recorded request paths with their query strings. */
  get paths() {
    return this.requests.map((r) => r.url);
  }

  #idOf(environment, name) {
    const envIndex = Object.keys(this.secrets).indexOf(environment);
    const nameIndex = Object.keys(this.secrets[environment]).indexOf(name);
    return `00000000-0000-4000-8000-${String(envIndex).padStart(4, '0')}${String(nameIndex).padStart(8, '0')}`;
  }

  #handle(req, res) {
    this.requests.push({ method: req.method, url: req.url, headers: req.headers });
    res.setHeader('X-Request-Id', `req-${this.requests.length}`);
    const fault = this.faults.shift();
    if (fault && fault.until) {
      const { until, ...rest } = fault;
      until.then(() => {
        if (!res.destroyed) send(res, rest.status, rest.body, rest.headers);
      });
      return;
    }
    if (fault && fault.pass) {
      this.#route(req, res);
      return;
    }
    this.#route(req, res);
  }

  #route(req, res) {
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      send(res, 401, { error: 'token tidak valid' });
      return;
    }
    const url = new URL(req.url, 'http://stub');
    const parts = url.pathname.split('/').filter(Boolean);
    if (parts[0] !== 'api' || parts[1] !== 'v1') return send(res, 404, { error: 'tidak ditemukan' });
    const [, , resource, team, sub, id, byName, extra] = parts;
    if (resource === 'teams' && (team === TEAM_ID || team === TEAM_SLUG) && sub === 'e2e' && id === 'key' && byName === undefined) {
      if (this.e2e === null) return send(res, 400, { error: 'tim ini bukan tim end-to-end' });
      return send(res, 200, this.e2e);
    }
    if (resource !== 'teams' || (team !== TEAM_ID && team !== TEAM_SLUG) || sub !== 'secrets') {
      return send(res, 404, { error: 'tidak ditemukan' });
    }
    const environment = url.searchParams.get('environment') || 'production';
    if (!['production', 'staging', 'development'].includes(environment)) {
      return send(res, 400, { error: 'environment tidak valid' });
    }
    if (id === 'by-name' && byName !== undefined && extra === undefined) {
      const values = this.secrets[environment] || {};
      if (!Object.hasOwn(values, byName)) return send(res, 404, { error: 'rahasia tidak ditemukan' });
      return send(res, 200, {
        secret: {
          id: this.#idOf(environment, byName), name: byName, environment, type: 'credential',
          e2e: this.e2e !== null,
        },
        value: values[byName],
      });
    }
    if (id === 'export') {
      // The server marks an end-to-end team's export with a header: the JSON has no room for it.
      const mark = this.e2e === null ? {} : { 'Cvsm-E2E': '1' };
      return send(res, 200, { ...(this.secrets[environment] || {}) }, mark);
    }
    return send(res, 404, { error: 'rahasia tidak ditemukan' });
  }
}

module.exports = { StubServer, TEAM_SLUG, cleanEnv };
