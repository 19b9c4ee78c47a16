'use strict';
/**
 * live.test: the parts of `live` (rule R16) and `refresh` (rule R17) the conformance cases do
 * not see: the option and CVSM_LIVE, the event-stream parser, the reconnection pauses, the
 * refusals, Last-Event-ID, and that close() (or a forgotten close) ends the stream.
 */

const { test, describe, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const { Client, ConfigurationError } = require('../lib');
const { LiveStream, SseDecoder, LineSplitter, StreamRefused, reconnectDelay, REFUSED_BACKOFF } = require('../lib/live');
const { SharedStub, TOKEN, cleanEnv } = require('./helpers/shared-stub');

cleanEnv();
// The outage warning is the SDK's own; these tests read none of it.
process.removeAllListeners('warning');

const BASE = { token: TOKEN, team: 'acme' };

/** Waits until `check()` (or the promise it returns) is true, polling every 10 ms, for at most `ms`. */
async function until(check, ms = 3000) {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('the live option', () => {
  beforeEach(() => cleanEnv());

  test('is off by default, on with live: true, and rejects anything but a boolean', () => {
    assert.equal(new Client({ ...BASE, baseUrl: 'http://x.test/api/v1' }).live, false);
    assert.equal(new Client({ ...BASE, baseUrl: 'http://x.test/api/v1', live: true }).live, true);
    assert.throws(() => new Client({ ...BASE, baseUrl: 'http://x.test/api/v1', live: 'yes' }), ConfigurationError);
    // CVSM_LIVE's words are the conformance cases live_variable_spellings and
    // live_variable_turns_the_stream_on_and_off; in Node an explicit live: false wins over it.
    process.env.CVSM_LIVE = '1';
    assert.equal(new Client({ ...BASE, baseUrl: 'http://x.test/api/v1', live: false }).live, false);
  });
});

describe('the event-stream parser', () => {
  test('reads events, multi-line data, ids, and skips comments', () => {
    const sse = new SseDecoder();
    const lines = new LineSplitter();
    const events = [];
    const text = ': heartbeat\r\n\r\nid: 3\nevent: change\ndata: {"a":\ndata:1}\n\ndata: x\r\rretry: 5\n\n';
    // Fed one character at a time: a CR at a chunk's end waits for a possible LF.
    for (const ch of text) {
      for (const line of lines.push(ch)) {
        const event = sse.line(line);
        if (event !== null) events.push(event);
      }
    }
    assert.deepEqual(events, [
      ['change', '{"a":\n1}'],
      ['message', 'x'],
    ]);
    assert.equal(sse.lastId, '3');
  });
});

describe('the reconnection pause', () => {
  test('is between half and all of min(30, 0.5 * 2**attempt)', () => {
    assert.equal(reconnectDelay(0, () => 0), 0.25);
    assert.equal(reconnectDelay(0, () => 1), 0.5);
    assert.equal(reconnectDelay(3, () => 1), 4);
    assert.equal(reconnectDelay(20, () => 0), 15);
    assert.equal(reconnectDelay(20, () => 1), 30);
  });

  test('grows per attempt, is at least Retry-After after a 429 and 300 s after 401/403/404', () => {
    let refusals = 0;
    const stream = new LiveStream({
      open: async () => ({ status: 503, body: null }),
      onSnapshot() {},
      onChange() {},
      onLost() {},
      onRefused: () => {
        refusals += 1;
      },
      describe: 'team "acme", environment "production"',
      random: () => 1,
    });
    assert.equal(stream.lost('x'), 0.5);
    assert.equal(stream.lost('x'), 1);
    assert.equal(stream.refused(new StreamRefused(429, 120)), 120);
    assert.equal(stream.refused(new StreamRefused(404)), REFUSED_BACKOFF);
    assert.equal(refusals, 0, 'a 404 does not empty the cache');
    assert.equal(stream.refused(new StreamRefused(401)), REFUSED_BACKOFF);
    assert.equal(stream.refused(new StreamRefused(403)), REFUSED_BACKOFF);
    assert.equal(refusals, 2);
    // An end that carries a refusal empties the cache too; a snapshot starts the pauses over.
    assert.throws(() => stream.event('end', '{"status":404}'));
    assert.equal(refusals, 3);
    stream.event('snapshot', '{"secrets":{}}');
    assert.equal(stream.lost('x'), 0.5);
  });
});

describe('the stream loop', () => {
  /** A LiveStream whose connections send `chunks` and then nothing, counting the opens. */
  function quietStream(chunks, options = {}) {
    const opens = [];
    const stream = new LiveStream({
      open: async ({ lastEventId }) => {
        opens.push(lastEventId);
        return {
          status: 200,
          // A body that ignores the abort signal: only cancelling its reader ends it.
          body: new ReadableStream({
            start(controller) {
              for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
            },
          }),
        };
      },
      onSnapshot() {},
      onChange() {},
      onLost() {},
      onRefused() {},
      describe: 'team "acme", environment "production"',
      random: () => 0,
      ...options,
    });
    return { stream, opens };
  }

  test('a stream silent for the read limit is down, and reconnects with Last-Event-ID', async () => {
    const { stream, opens } = quietStream(['id: 9\nevent: snapshot\ndata: {"secrets":{}}\n\n'], { readTimeoutMs: 100 });
    stream.start();
    await until(() => opens.length >= 2, 2000);
    assert.deepEqual(opens.slice(0, 2), [null, '9']);
    await stream.close();
  });

  test('close() ends a connection whose fetch ignores the abort signal', async () => {
    const { stream, opens } = quietStream(['event: snapshot\ndata: {"secrets":{}}\n\n']);
    stream.start();
    await until(() => stream.connected);
    await stream.close();
    assert.equal(stream.connected, false);
    assert.equal(opens.length, 1);
  });
});

describe('a live client', () => {
  let stub;
  before(async () => {
    stub = await SharedStub.start();
  });
  after(() => stub.stop());
  beforeEach(() => stub.reset({ production: { DB_PASSWORD: 'one' } }));

  const streamRequests = () => stub.requests('/secrets/changes');
  const reads = async () => (await stub.requests()).filter((r) => r.path.includes('/by-name/')).length;

  test('opens one stream at its first read, drops a changed value, and close() ends the stream', async () => {
    const client = new Client({ ...BASE, baseUrl: stub.baseUrl, live: true });
    assert.equal(await client.get('DB_PASSWORD'), 'one');
    await until(() => client.liveConnected);
    const [request] = await streamRequests();
    assert.equal(request.headers.accept, 'text/event-stream');
    assert.equal(request.headers.authorization, `Bearer ${TOKEN}`);
    assert.equal(request.query, 'environment=production');
    assert.equal(await client.get('DB_PASSWORD'), 'one');
    assert.equal(await reads(), 1, 'still cached after the snapshot');
    await stub.push({ name: 'DB_PASSWORD', value: 'two' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(await client.get('DB_PASSWORD'), 'two');
    assert.equal((await streamRequests()).length, 1, 'one stream');

    await client.close();
    assert.equal(client.liveConnected, false);
    await until(async () => (await stub.streams()).closed === 1);
    assert.equal(await client.refresh('DB_PASSWORD'), 'two', 'it still reads after close');
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal((await streamRequests()).length, 1, 'no stream after close');
  });

  test('sends Last-Event-ID when it reconnects after an event with an id', async () => {
    const client = new Client({ ...BASE, baseUrl: stub.baseUrl, live: true });
    await client.get('DB_PASSWORD');
    await until(() => client.liveConnected);
    await stub.push({ raw: 'id: 7\nevent: change\ndata: {"name":"OTHER","environment":"production","version":1}\n\n' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await stub.push({ close: true }); // dropped: it reconnects after 0.25 to 0.5 s
    await until(() => !client.liveConnected);
    await until(() => client.liveConnected);
    assert.deepEqual((await streamRequests()).map((r) => r.headers['last-event-id']), [undefined, '7']);
    await client.close();
  });

  test('a reconnection\'s snapshot drops only the values that changed while it was down', async () => {
    await stub.push({ name: 'OTHER', value: 'other-1', silent: true });
    const client = new Client({ ...BASE, baseUrl: stub.baseUrl, live: true });
    await client.get('DB_PASSWORD');
    await client.get('OTHER');
    await until(() => client.liveConnected);
    await stub.push({ name: 'OTHER', value: 'other-2', silent: true }, { close: true }); // not announced
    await until(() => !client.liveConnected);
    await until(() => client.liveConnected);
    const before = await reads();
    assert.equal(await client.get('OTHER'), 'other-2');
    assert.equal(await client.get('DB_PASSWORD'), 'one');
    assert.equal(await reads(), before + 1, 'the unchanged value stays cached');
    await client.close();
  });

  // A 401 to the stream emptying the cache is the conformance case live_stream_refused_empties_the_cache.

  test('refresh checks its environment option', async () => {
    const client = new Client({ ...BASE, baseUrl: stub.baseUrl });
    await assert.rejects(client.refresh('DB_PASSWORD', { environment: '' }), TypeError);
    await assert.rejects(client.refresh('DB_PASSWORD', { environment: 3 }), TypeError);
    await assert.rejects(client.refresh(1), TypeError);
  });

  test('does not keep the process alive when it is never closed (the stream is unref\'d)', async () => {
    const script = `
      const { Client } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
      const client = new Client({ token: ${JSON.stringify(TOKEN)}, team: 'acme', baseUrl: ${JSON.stringify(stub.baseUrl)}, live: true });
      client.get('DB_PASSWORD').then(async (value) => {
        while (!client.liveConnected) await new Promise((r) => setTimeout(r, 10));
        console.log(value);
      });`;
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', script], { timeout: 10_000 });
    assert.equal(stdout.trim(), 'one');
  });
});
