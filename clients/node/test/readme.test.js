'use strict';
/**
 * readme.test: the first code example of README.md, run exactly as printed, from a project that
 * has the package in its node_modules, against the shared stub API (conformance/stub.py); and the install line, as printed,
 * in the layout it describes (it needs npm, and the registry unless undici is in npm's cache).
 */

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const { SharedStub, TOKEN, PROXY_VARIABLES } = require('./helpers/shared-stub');

const PACKAGE = path.resolve(__dirname, '..');
const README = fs.readFileSync(path.join(PACKAGE, 'README.md'), 'utf8');

/** firstBlock returns the text of the first fenced block of `language` in the README. */
function firstBlock(language) {
  const match = README.match(new RegExp('^```' + language + '\\n([\\s\\S]*?)^```$', 'm'));
  assert.ok(match, `README.md has no ${language} block`);
  return match[1];
}

/** cleanChildEnv is this process's environment without CVSM_* and proxy variables. */
function cleanChildEnv() {
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('CVSM_') && !PROXY_VARIABLES.includes(k)),
  );
}

let stub;
let project;

before(async () => {
  stub = await SharedStub.start();
  // A project that installed the package: node_modules/cvsm is this package.
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'cvsm-readme-'));
  fs.mkdirSync(path.join(project, 'node_modules'));
  fs.symlinkSync(PACKAGE, path.join(project, 'node_modules', 'cvsm'), 'dir');
});

after(() => {
  stub.stop();
  fs.rmSync(project, { recursive: true, force: true });
});

test('the first example of README.md runs as printed', async () => {
  const example = firstBlock('js');
  assert.ok(README.indexOf('```js') < README.indexOf('```sh'), 'the js example comes first');
  const file = path.join(project, 'example.mjs');
  fs.writeFileSync(file, example);
  const { stdout, stderr } = await promisify(execFile)(process.execPath, [file], {
    cwd: project,
    env: { ...cleanChildEnv(), CVSM_TOKEN: TOKEN, CVSM_BASE_URL: stub.baseUrl, CVSM_TEAM: 'acme' },
    timeout: 20_000,
  });
  assert.equal(stderr, '');
  assert.match(stdout, /^loaded [A-Z_, ]+\n$/); // the names it set, never a value
  // get('DATABASE_URL') is one by-name request, the slug in the path; inject() reads the export.
  assert.deepEqual(
    (await stub.requests()).map((r) => r.path),
    ['/api/v1/teams/acme/secrets/by-name/DATABASE_URL', '/api/v1/teams/acme/secrets/export'],
  );
});

test('the install line works as printed, in an empty project folder next to a clone', async (t) => {
  const line = firstBlock('sh').trim();
  assert.match(line, /^npm install .*\.\.\/cvsm\/clients\/node$/);
  // The layout the README describes: the clone at ../cvsm, the command run in the project.
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cvsm-install-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  fs.mkdirSync(path.join(root, 'cvsm', 'clients'), { recursive: true });
  fs.symlinkSync(PACKAGE, path.join(root, 'cvsm', 'clients', 'node'), 'dir');
  const app = path.join(root, 'app');
  fs.mkdirSync(app);
  const [npm, ...args] = line.split(/\s+/);
  await promisify(execFile)(npm, [...args, '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd: app,
    timeout: 120_000,
    shell: process.platform === 'win32',
  });
  // A real copy, not a link back into the clone, with undici beside it.
  assert.ok(!fs.lstatSync(path.join(app, 'node_modules', 'cvsm')).isSymbolicLink());
  const file = path.join(app, 'example.mjs');
  fs.writeFileSync(file, firstBlock('js'));
  await stub.reset();
  await promisify(execFile)(process.execPath, [file], {
    cwd: app,
    env: { ...cleanChildEnv(), CVSM_TOKEN: TOKEN, CVSM_BASE_URL: stub.baseUrl, CVSM_TEAM: 'acme' },
    timeout: 20_000,
  });
  assert.equal((await stub.requests()).length, 2);
});
