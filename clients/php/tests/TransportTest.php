<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Internal\HttpTransport;

/**
 * TransportTest checks the backoff schedule and header parsing of the internal transport.
 */
final class TransportTest extends TestCase
{
    private const EXPORT = 'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';

    public function testBackoffIsFullJitterThatDoublesEachAttempt(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 503, 'body' => ['error' => 'sibuk']]);
        $sleeps = [];
        $transport = new HttpTransport(2, 3, static function (float $seconds) use (&$sleeps): void {
            $sleeps[] = $seconds;
        });

        try {
            $transport->getJson($this->exportUrl(), '/export', self::TOKEN);
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame(503, $e->getStatus());
        }

        self::assertCount(3, $sleeps, 'one sleep before each of the 3 retries');
        foreach ($sleeps as $attempt => $seconds) {
            self::assertGreaterThanOrEqual(0.0, $seconds);
            self::assertLessThanOrEqual(0.1 * 2 ** $attempt, $seconds, 'attempt ' . $attempt);
        }
        self::assertSame(4, $this->requestCount());
    }

    public function testRetryAfterGivenAsAnHttpDateBecomesWholeSeconds(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 429, 'headers' => ['Retry-After' => gmdate('D, d M Y H:i:s', time() + 120) . ' GMT']]);
        $transport = new HttpTransport(2, 0, static function (): void {
        });

        try {
            $transport->getJson($this->exportUrl(), '/export', self::TOKEN);
            self::fail('no RateLimitException');
        } catch (RateLimitException $e) {
            self::assertGreaterThanOrEqual(118, $e->getRetryAfter());
            self::assertLessThanOrEqual(120, $e->getRetryAfter());
        }
    }

    private function exportUrl(): string
    {
        return $this->stub->url() . '/teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';
    }
}
