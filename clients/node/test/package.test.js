'use strict';
/**
 * package.test: the package as npm would publish it. `npm pack --dry-run` ships the library, its
 * types, README and LICENSE alone; the hand-kept declarations compile against a TypeScript consumer
 * (test/types, `tsc --noEmit`); package.json names the repository, and every file it points
 * to exists; every public item of the declarations has a JSDoc comment.
 */

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');

const PACKAGE = path.resolve(__dirname, '..');
const MANIFEST = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8'));
const run = promisify(execFile);

test('npm pack ships the library, its types, README, LICENSE and package.json, nothing else', async () => {
  const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: PACKAGE,
    timeout: 60_000,
    shell: process.platform === 'win32',
  });
  const [packed] = JSON.parse(stdout);
  const shipped = packed.files.map((file) => file.path).sort();
  const library = fs.readdirSync(path.join(PACKAGE, 'lib')).map((name) => `lib/${name}`);
  assert.deepEqual(shipped, [...library, 'LICENSE', 'README.md', 'package.json'].sort());
  for (const name of ['lib/index.js', 'lib/index.mjs', 'lib/index.d.ts', 'lib/index.d.mts']) {
    assert.ok(shipped.includes(name), `${name} is shipped`);
  }
  assert.equal(packed.name, 'cvsm');
  assert.equal(packed.version, MANIFEST.version);
});

test('package.json names the repository, and every entry it points to exists', () => {
  assert.deepEqual(MANIFEST.repository, {
    type: 'git',
    url: 'git+https://github.com/cvsm/cvsm.git',
    directory: 'clients/node',
  });
  assert.ok(MANIFEST.homepage && MANIFEST.bugs?.url, 'homepage and bugs');
  assert.equal(MANIFEST.scripts.test.split(' ')[0], 'node', 'npm test is node --test itself');
  const targets = [MANIFEST.main, MANIFEST.types];
  for (const condition of Object.values(MANIFEST.exports['.'])) targets.push(condition.types, condition.default);
  for (const target of targets) {
    assert.ok(fs.existsSync(path.join(PACKAGE, target)), `${target} exists`);
  }
});

test('the type declarations compile against a TypeScript consumer (tsc --noEmit)', async () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const { stdout, stderr } = await run(process.execPath, [tsc, '--noEmit', '-p', path.join(__dirname, 'types')], {
    cwd: PACKAGE,
    timeout: 120_000,
  }).catch((error) => assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`));
  assert.equal(stdout + stderr, '');
});

test('every public item of the declarations has a JSDoc comment in JSDoc voice', () => {
  const undocumented = [];
  const goVoice = [];
  for (const file of ['index.d.ts', 'index.d.mts']) {
    const lines = fs.readFileSync(path.join(PACKAGE, 'lib', file), 'utf8').split('\n');
    let inComment = false;
    lines.forEach((line, i) => {
      const text = line.trim();
      if (text.startsWith('/**')) inComment = !text.endsWith('*/');
      else if (inComment) inComment = !text.endsWith('*/');
      else if (/^(export (declare |default |interface |type )|readonly |constructor\(|[A-Za-z]+\??[:(])/.test(text)
        && !text.startsWith('export * from')) {
        const before = lines.slice(0, i).reverse().find((l) => l.trim() !== '');
        if (!before || !before.trim().endsWith('*/')) undocumented.push(`${file}:${i + 1}: ${text}`);
      }
      // Go's voice: a comment that starts with the item's own name ("get returns ...").
      const opening = text.match(/^\/\*\*\s+([A-Za-z]+) (is|are|returns|means|reads|builds|forgets|tells|controls|configures)\b/);
      if (opening) goVoice.push(`${file}:${i + 1}: ${text}`);
    });
  }
  assert.deepEqual(undocumented, []);
  assert.deepEqual(goVoice, []);
});
