<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;
use Cvsm\Internal\Cache;
use Cvsm\Internal\HttpTransport;
use Cvsm\Internal\LiveStream;
use Cvsm\Internal\SseDecoder;

/**
 * LiveTest covers what the conformance cases of live caches (rule R16) do not see: the option and
 * CVSM_LIVE, the event-stream parser, the reconnection pauses, what the stream sends and how it
 * takes a refusal or an end, and that closing the client ends the stream, against the shared
 * stub's change stream (a stream with a hand-driven clock where the pauses matter).
 */
final class LiveTest extends TestCase
{
    /**
     * CVSM_LIVE's words are the conformance cases live_variable_spellings and
     * live_variable_turns_the_stream_on_and_off; here the option's type and precedence.
     */
    public function testTheOptionIsABoolThatWinsOverCvsmLive(): void
    {
        self::assertFalse($this->client()->isLive(), 'off by default');
        $this->setEnv('CVSM_LIVE', '1');
        self::assertFalse($this->client(['live' => false])->isLive());
        $this->setEnv('CVSM_LIVE', null);
        $this->expectException(ConfigurationException::class);
        $this->client(['live' => 'yes']);
    }

    public function testTheDecoderTakesEventsDataLinesCommentsAndIds(): void
    {
        $decoder = new SseDecoder();
        $events = [];
        foreach ([': heartbeat', '', 'event: snapshot', 'id: 7', 'data: {"a":', 'data:1}', '', 'event: nothing', '', 'data: plain', ''] as $line) {
            $event = $decoder->line($line);
            if ($event !== null) {
                $events[] = $event;
            }
        }

        self::assertSame([['snapshot', "{\"a\":\n1}"], ['message', 'plain']], $events);
        self::assertSame('7', $decoder->lastId);
    }

    public function testTheReconnectionPauseIsBetweenHalfAndAllOfItsDoublingCeiling(): void
    {
        foreach ([0 => 0.5, 1 => 1.0, 3 => 4.0, 6 => 30.0, 60 => 30.0] as $attempt => $ceiling) {
            for ($i = 0; $i < 200; $i++) {
                $delay = LiveStream::reconnectDelay($attempt);
                self::assertGreaterThanOrEqual($ceiling / 2, $delay, "attempt $attempt");
                self::assertLessThanOrEqual($ceiling, $delay, "attempt $attempt");
            }
        }
    }

    public function testTheStreamTakesSnapshotsAndChangesAndReconnectsWithLastEventId(): void
    {
        $this->stub->reset(['secrets' => [
            ['id' => 's', 'name' => 'SAME', 'environment' => 'production', 'value' => 'same', 'version' => 3],
            ['id' => 'o', 'name' => 'OTHER', 'environment' => 'production', 'value' => 'other', 'version' => 2],
        ]]);
        $now = 100.0;
        $cache = new Cache(30, 0);
        $cache->put(Cache::valueKey('production', 'SAME'), 'same', 3);
        $cache->put(Cache::valueKey('production', 'OTHER'), 'other', 1);
        $cache->put(Cache::valueKey('production', 'UNKNOWN'), 'unknown');
        $logged = [];
        $stream = $this->stream($cache, static function (string $level, string $message) use (&$logged): void {
            $logged[] = $level . ' ' . $message;
        }, static function () use (&$now): float {
            return $now;
        });

        self::assertSame(1, $stream->pump(2.0), 'the snapshot');
        self::assertTrue($stream->isConnected());
        [$request] = $this->stub->requests();
        self::assertSame(['/api/v1/teams/acme/secrets/changes', 'environment=production'], [$request['path'], $request['query']]);
        self::assertSame(['text/event-stream', 'Bearer ' . self::TOKEN], [$request['headers']['accept'], $request['headers']['authorization']]);
        self::assertArrayNotHasKey('last-event-id', $request['headers']);
        self::assertSame('same', $cache->fresh(Cache::valueKey('production', 'SAME')), 'the version it holds is current');
        self::assertNull($cache->fresh(Cache::valueKey('production', 'OTHER')), 'a newer version exists');
        self::assertNull($cache->fresh(Cache::valueKey('production', 'UNKNOWN')), 'its version is not known');

        $this->stub->changes(['name' => 'SAME', 'value' => 'new', 'id' => '42']);
        self::assertSame(1, $stream->pump(2.0));
        self::assertNull($cache->fresh(Cache::valueKey('production', 'SAME')));
        self::assertSame(4, $stream->latestVersion('SAME'));

        $this->stub->changes(['close' => true]);
        self::assertSame(0, $stream->pump(0.5));
        self::assertFalse($stream->isConnected());
        self::assertCount(1, $logged);
        self::assertStringContainsString('the change stream is down', $logged[0]);
        self::assertStringNotContainsString(self::TOKEN, $logged[0]);

        $now += 0.6; // past the first pause (at most 0.5 s)
        self::assertSame(1, $stream->pump(2.0), 'reconnected: a snapshot');
        self::assertSame('42', $this->stub->requests()[1]['headers']['last-event-id']);
    }

    public function testARefusalEmptiesTheCacheAndWaitsFiveMinutes(): void
    {
        $this->stub->route('GET /teams/acme/secrets/changes', ['status' => 401, 'body' => ['error' => 'token tidak valid']]);
        $now = 100.0;
        $stream = $this->stream(new Cache(30, 0), static function (): void {
        }, static function () use (&$now): float {
            return $now;
        });
        $stream->pump(0.5);

        self::assertTrue($stream->takeForget(), 'a 401 empties the cache, as a refused read does');
        self::assertFalse($stream->takeForget(), 'once');
        $now += 299.0;
        $stream->pump(0.2);
        self::assertCount(1, $this->stub->requests(), 'no new attempt before 300 s');
        $now += 2.0;
        $stream->pump(0.5);
        self::assertCount(2, $this->stub->requests());
    }

    public function testAnEndEventWithARefusalAsksForTheCacheToBeEmptied(): void
    {
        $stream = $this->stream(new Cache(30, 0), static function (): void {
        });
        $stream->pump(2.0);
        $this->stub->changes(['raw' => "event: end\ndata: {\"status\": 403}\n\n"]);
        $stream->pump(2.0);

        self::assertTrue($stream->takeForget());
        self::assertFalse($stream->isConnected());
    }

    public function testClosingTheClientEndsItsStream(): void
    {
        foreach (['close' => true, 'destroy' => false] as $how => $close) {
            $this->secrets(['FIRST_READ' => 'v']);
            $client = $this->client(['live' => true, 'team' => 'acme']);
            $client->get('FIRST_READ'); // opens the stream
            for ($i = 0; $i < 20 && !$client->isLiveConnected(); $i++) {
                $client->poll(0.1);
            }
            self::assertTrue($client->isLiveConnected(), "$how: the first read opened the stream");

            if ($close) {
                $client->close();
                self::assertFalse($client->isLiveConnected());
            } else {
                unset($client);
            }
            for ($i = 0; $i < 40 && $this->stub->streams()['open'] > 0; $i++) {
                usleep(50_000);
            }
            self::assertSame(['open' => 0, 'closed' => 1], $this->stub->streams(), "$how: the connection is closed");
        }
    }

    /**
     * @param \Closure(string, string): void $log
     * @param (\Closure(): float)|null $clock
     */
    private function stream(Cache $cache, \Closure $log, ?\Closure $clock = null): LiveStream
    {
        $url = $this->stub->url() . '/teams/acme/secrets/changes?environment=production';

        return new LiveStream(new HttpTransport(2, 0), $url, self::TOKEN, $cache, 'production', 'team "acme"', $log, $clock);
    }
}
