<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\NetworkException;
use Cvsm\Internal\Cache;
use Cvsm\Internal\HttpTransport;
use Cvsm\Internal\LiveStream;
use Cvsm\Internal\SseDecoder;

/**
 * LiveTest covers what the conformance cases of live caches (rule R16) do not see: the option and
 * CVSM_LIVE, the event-stream parser, the reconnection pauses, what the stream sends and how it
 * takes a refusal, and that closing the client ends the stream. The change stream is served by a
 * socket of this process, which the client's non-blocking stream lets it answer between pumps.
 */
final class LiveTest extends TestCase
{
    /** @var resource|null */
    private $server = null;

    protected function tearDown(): void
    {
        if (is_resource($this->server)) {
            fclose($this->server);
        }
        parent::tearDown();
    }

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

        $request = $this->accept($stream, $connection);
        self::assertStringStartsWith('GET /api/v1/teams/acme/secrets/changes?environment=production HTTP/1.1', $request);
        self::assertStringContainsStringIgnoringCase("\r\naccept: text/event-stream\r\n", $request);
        self::assertStringContainsStringIgnoringCase("\r\nauthorization: Bearer " . self::TOKEN . "\r\n", $request);
        self::assertStringNotContainsStringIgnoringCase('last-event-id', $request);

        fwrite($connection, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            . ": hello\r\nevent: snapshot\r\nid: 41\r\ndata: {\"secrets\": {\"SAME\": {\"environment\": \"production\", \"version\": 3}, \"OTHER\": {\"environment\": \"production\", \"version\": 2}}}\r\n\r\n");
        self::assertSame(1, $stream->pump(2.0));
        self::assertTrue($stream->isConnected());
        self::assertSame('same', $cache->fresh(Cache::valueKey('production', 'SAME')), 'the version it holds is current');
        self::assertNull($cache->fresh(Cache::valueKey('production', 'OTHER')), 'a newer version exists');
        self::assertNull($cache->fresh(Cache::valueKey('production', 'UNKNOWN')), 'its version is not known');

        fwrite($connection, "event: change\nid: 42\ndata: {\"name\": \"SAME\", \"environment\": \"production\", \"version\": 4}\n\n");
        self::assertSame(1, $stream->pump(2.0));
        self::assertNull($cache->fresh(Cache::valueKey('production', 'SAME')));
        self::assertSame(4, $stream->latestVersion('SAME'));

        fclose($connection);
        self::assertSame(0, $stream->pump(0.5));
        self::assertFalse($stream->isConnected());
        self::assertCount(1, $logged);
        self::assertStringContainsString('the change stream is down', $logged[0]);
        self::assertStringNotContainsString(self::TOKEN, $logged[0]);

        $now += 0.6; // past the first pause (at most 0.5 s)
        $request = $this->accept($stream, $connection);
        self::assertStringContainsStringIgnoringCase("\r\nlast-event-id: 42\r\n", $request);
        fclose($connection);
    }

    public function testARefusalEmptiesTheCacheAndWaitsFiveMinutes(): void
    {
        $now = 100.0;
        $cache = new Cache(30, 0);
        $stream = $this->stream($cache, static function (): void {
        }, static function () use (&$now): float {
            return $now;
        });
        $this->accept($stream, $connection);
        fwrite($connection, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
        fclose($connection);
        $stream->pump(0.5);

        self::assertTrue($stream->takeForget(), 'a 401 empties the cache, as a refused read does');
        self::assertFalse($stream->takeForget(), 'once');
        $now += 299.0;
        $stream->pump(0.2);
        self::assertFalse(@stream_socket_accept($this->server(), 0.2), 'no new attempt before 300 s');
        $now += 2.0;
        $this->accept($stream, $connection);
        fclose($connection);
    }

    public function testAnEndEventWithARefusalAsksForTheCacheToBeEmptied(): void
    {
        $stream = $this->stream(new Cache(30, 0), static function (): void {
        });
        $this->accept($stream, $connection);
        fwrite($connection, "HTTP/1.1 200 OK\r\n\r\nevent: end\ndata: {\"status\": 403}\n\n");
        $stream->pump(2.0);

        self::assertTrue($stream->takeForget());
        self::assertFalse($stream->isConnected());
        fclose($connection);
    }

    public function testClosingTheClientEndsItsStream(): void
    {
        foreach (['close' => true, 'destroy' => false] as $how => $close) {
            $client = $this->client(['live' => true, 'base_url' => $this->baseUrl(), 'team' => 'acme', 'timeout' => 0.3, 'max_retries' => 0]);
            try {
                $client->get('FIRST_READ'); // opens the stream; nothing answers the read itself
                self::fail('the read was answered');
            } catch (NetworkException) {
            }
            $stream = null;
            for ($i = 0; $i < 4 && $stream === null; $i++) {
                $client->poll(0.05);
                $connection = @stream_socket_accept($this->server(), 0.5);
                if ($connection !== false && str_contains($this->requestOn($connection, static fn () => $client->poll(0.01)), '/secrets/changes')) {
                    $stream = $connection;
                }
            }
            self::assertNotNull($stream, "$how: the first read opened the stream");
            fwrite($stream, "HTTP/1.1 200 OK\r\n\r\nevent: snapshot\ndata: {\"secrets\": {}}\n\n");
            $client->poll(2.0);
            self::assertTrue($client->isLiveConnected(), $how);

            if ($close) {
                $client->close();
                self::assertFalse($client->isLiveConnected());
            } else {
                unset($client);
            }
            stream_set_blocking($stream, true);
            stream_set_timeout($stream, 2);
            self::assertSame('', (string) fread($stream, 100), "$how: the connection is closed");
            self::assertTrue(feof($stream), $how);
            fclose($stream);
        }
    }

    /**
     * @param \Closure(string, string): void $log
     * @param (\Closure(): float)|null $clock
     */
    private function stream(Cache $cache, \Closure $log, ?\Closure $clock = null): LiveStream
    {
        $url = $this->baseUrl() . '/teams/acme/secrets/changes?environment=production';

        return new LiveStream(new HttpTransport(2, 0), $url, self::TOKEN, $cache, 'production', 'team "acme"', $log, $clock);
    }

    /**
     * Pumps $stream until it connects, accepts the connection into $connection and returns the
     * request read on it.
     *
     * @param resource|null $connection
     */
    private function accept(LiveStream $stream, &$connection): string
    {
        for ($i = 0; $i < 20; $i++) {
            $stream->pump(0.02);
            $accepted = @stream_socket_accept($this->server(), 0.1);
            if ($accepted !== false) {
                $connection = $accepted;

                return $this->requestOn($accepted, static fn () => $stream->pump(0.01));
            }
        }
        self::fail('the stream did not connect');
    }

    /**
     * Reads a request's head from $connection, calling $pump meanwhile (the sender is this process).
     *
     * @param resource $connection
     */
    private function requestOn($connection, \Closure $pump): string
    {
        stream_set_blocking($connection, false);
        $request = '';
        for ($i = 0; $i < 200 && !str_contains($request, "\r\n\r\n"); $i++) {
            $pump();
            $request .= (string) fread($connection, 8192);
        }

        return $request;
    }

    /** @return resource */
    private function server()
    {
        if (!is_resource($this->server)) {
            $server = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
            self::assertNotFalse($server, $error);
            $this->server = $server;
        }

        return $this->server;
    }

    private function baseUrl(): string
    {
        return 'http://' . stream_socket_get_name($this->server(), false) . '/api/v1';
    }
}
