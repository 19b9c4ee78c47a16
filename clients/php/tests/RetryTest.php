<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\NetworkException;

final class RetryTest extends TestCase
{
    private const EXPORT = 'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';

    /**
     * @return iterable<string, array{0: int}>
     */
    public static function retriedStatuses(): iterable
    {
        yield '502' => [502];
        yield '503' => [503];
        yield '504' => [504];
    }

    /**
     * @dataProvider retriedStatuses
     */
    public function testGatewayErrorIsRetriedUntilSuccess(int $status): void
    {
        $this->stub->route(self::EXPORT, ['status' => $status, 'body' => ['error' => 'sibuk']], ['body' => ['A' => 'one']]);

        self::assertSame(['A' => 'one'], $this->client()->getAll());
        self::assertSame(2, $this->requestCount());
    }

    public function testPersistent503RaisesApiErrorAfterMaxRetries(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 503, 'body' => ['error' => 'sibuk']]);

        try {
            $this->client(['max_retries' => 2])->getAll();
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame(503, $e->getStatus());
        }
        self::assertSame(3, $this->requestCount());
    }

    public function testMaxRetriesZeroMakesOneAttempt(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 503, 'body' => ['error' => 'sibuk']]);

        try {
            $this->client(['max_retries' => 0])->getAll();
            self::fail('no ApiException');
        } catch (ApiException) {
        }
        self::assertSame(1, $this->requestCount());
    }

    /**
     * @return iterable<string, array{0: int}>
     */
    public static function clientErrors(): iterable
    {
        foreach ([400, 401, 403, 404, 409, 429] as $status) {
            yield (string) $status => [$status];
        }
    }

    /**
     * @dataProvider clientErrors
     */
    public function testClientErrorsAreNeverRetried(int $status): void
    {
        $this->stub->route(self::EXPORT, ['status' => $status, 'body' => ['error' => 'x']], ['body' => ['A' => 'one']]);

        try {
            $this->client(['max_retries' => 3])->getAll();
            self::fail('no exception for ' . $status);
        } catch (\Cvsm\Exception\CvsmException $e) {
            self::assertSame($status, $e->getStatus());
        }
        self::assertSame(1, $this->requestCount());
    }

    public function testDroppedConnectionIsRetried(): void
    {
        $this->stub->route(self::EXPORT, ['body' => ['A' => 'partial'], 'truncate' => true], ['body' => ['A' => 'one']]);

        self::assertSame(['A' => 'one'], $this->client()->getAll());
        self::assertSame(2, $this->requestCount());
    }

    public function testDroppedConnectionEveryTimeIsANetworkErrorAfterRetries(): void
    {
        $this->stub->route(self::EXPORT, ['body' => ['A' => 'partial'], 'truncate' => true]);

        try {
            $this->client(['max_retries' => 2])->getAll();
            self::fail('no NetworkException');
        } catch (NetworkException $e) {
            self::assertNull($e->getStatus());
        }
        self::assertSame(3, $this->requestCount());
    }

    public function testTimeoutIsANetworkErrorThatIsRetried(): void
    {
        $this->stub->route(self::EXPORT, ['delay_ms' => 1500, 'body' => ['A' => 'late']], ['body' => ['A' => 'one']]);

        $started = microtime(true);
        self::assertSame(['A' => 'one'], $this->client(['timeout' => 0.4])->getAll());
        self::assertLessThan(1.4, microtime(true) - $started, 'the first attempt was cut at the timeout');
        self::assertSame(2, $this->requestCount());
    }

    public function testTimeoutOnEveryAttemptIsANetworkError(): void
    {
        $this->stub->route(self::EXPORT, ['delay_ms' => 1000, 'body' => ['A' => 'late']]);

        try {
            $this->client(['timeout' => 0.3, 'max_retries' => 1])->getAll();
            self::fail('no NetworkException');
        } catch (NetworkException $e) {
            self::assertStringContainsString('timed out', $e->getMessage());
        }
        self::assertSame(2, $this->requestCount());
    }
}
