<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\CvsmException;
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

    /**
     * Every answer that is 200 but not the shape its request promises (rule R3).
     *
     * @return iterable<string, array{0: string, 1: string}>
     */
    public static function unreadableAnswers(): iterable
    {
        $export = 'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';
        $listing = 'GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=A';
        $value = 'GET /teams/' . self::TEAM_ID . '/secrets/id-a';
        yield 'export: not JSON' => [$export, '<html>captive portal</html>'];
        yield 'export: null' => [$export, 'null'];
        yield 'export: an array' => [$export, '["one","two"]'];
        yield 'export: an empty array' => [$export, '[]'];
        yield 'export: a string' => [$export, '"A=1"'];
        yield 'export: a number value' => [$export, '{"A":"1","B":2}'];
        yield 'export: a null value' => [$export, '{"A":null}'];
        yield 'export: an object value' => [$export, '{"A":{"v":"1"}}'];
        yield 'export: cut short' => [$export, '{"A":"1"'];
        yield 'listing: no secrets' => [$listing, '{"total":0}'];
        yield 'listing: secrets not a list' => [$listing, '{"secrets":{"id":"id-a","name":"A"}}'];
        yield 'listing: an array' => [$listing, '[]'];
        yield 'value: no value' => [$value, '{"secret":{"id":"id-a"}}'];
        yield 'value: a number value' => [$value, '{"value":12}'];
        yield 'value: null' => [$value, 'null'];
        yield 'teams: no teams' => ['GET /teams', '{"team":[]}'];
        yield 'teams: teams not a list' => ['GET /teams', '{"teams":"acme"}'];
    }

    /**
     * @dataProvider unreadableAnswers
     */
    public function testAnUnreadableAnswerIsRetriedThenANetworkError(string $route, string $body): void
    {
        $this->routeReadableAnswers();
        $this->stub->route($route, ['body' => $body, 'headers' => ['X-Request-Id' => 'req-unreadable']]);
        $client = $this->client(['team' => 'acme', 'max_retries' => 2]);

        try {
            str_contains($route, 'export') ? $client->getAll() : $client->get('A');
            self::fail('no NetworkException');
        } catch (CvsmException $e) {
            self::assertSame(NetworkException::class, $e::class, $e->getMessage());
            self::assertNull($e->getStatus());
            self::assertSame('req-unreadable', $e->getRequestId());
            self::assertStringContainsString('unreadable response', $e->getMessage());
            self::assertStringContainsString('after 3 attempts', $e->getMessage());
        }
        $paths = array_map(static fn (array $r): string => $r['path'] . '?' . $r['query'], $this->stub->requests());
        $target = '/api/v1' . substr($route, 4);
        self::assertCount(3, array_keys($paths, str_contains($target, '?') ? $target : $target . '?', true), 'three attempts');
    }

    /**
     * @dataProvider unreadableAnswers
     */
    public function testAnUnreadableAnswerThenAGoodOneSucceeds(string $route, string $body): void
    {
        $this->routeReadableAnswers();
        $good = $this->readableAnswers()[$route];
        $this->stub->route($route, ['body' => $body], $good);
        $client = $this->client(['team' => 'acme', 'max_retries' => 1]);

        $result = str_contains($route, 'export') ? $client->getAll() : $client->get('A');

        self::assertSame(str_contains($route, 'export') ? ['A' => 'one'] : 'one', $result);
    }

    public function testAnExportThatIsAnArrayNeverSetsVariablesWithTheCacheOff(): void
    {
        $this->setEnv('0', null);
        $this->setEnv('1', null);
        $this->stub->route(self::EXPORT, ['body' => ['one', 'two']]);

        try {
            $this->client(['cache_ttl' => 0, 'max_retries' => 0])->inject(true);
            self::fail('no NetworkException');
        } catch (NetworkException $e) {
            self::assertNull($e->getStatus());
        }
        self::assertFalse(getenv('0'));
        self::assertFalse(getenv('1'));
    }

    public function testAnEmptyExportObjectIsReadable(): void
    {
        $this->stub->route(self::EXPORT, ['body' => '{}']);

        self::assertSame([], $this->client(['max_retries' => 0])->getAll());
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

    /**
     * @return array<string, array{body: mixed}>
     */
    private function readableAnswers(): array
    {
        return [
            'GET /teams' => ['body' => ['teams' => [['id' => self::TEAM_ID, 'slug' => 'acme']]]],
            'GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=A' => ['body' => [
                'secrets' => [['id' => 'id-a', 'name' => 'A', 'environment' => 'production']], 'total' => 1,
            ]],
            'GET /teams/' . self::TEAM_ID . '/secrets/id-a' => ['body' => ['secret' => ['id' => 'id-a'], 'value' => 'one']],
            self::EXPORT => ['body' => ['A' => 'one']],
        ];
    }

    private function routeReadableAnswers(): void
    {
        foreach ($this->readableAnswers() as $route => $answer) {
            $this->stub->route($route, $answer);
        }
    }
}
