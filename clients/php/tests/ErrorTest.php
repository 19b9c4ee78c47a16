<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\CvsmExceptionInterface;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;

final class ErrorTest extends TestCase
{
    /**
     * @return iterable<string, array{0: int, 1: class-string<CvsmException>}>
     */
    public static function statuses(): iterable
    {
        yield '400' => [400, ApiException::class];
        yield '401' => [401, AuthenticationException::class];
        yield '403' => [403, PermissionDeniedException::class];
        yield '404' => [404, SecretNotFoundException::class];
        yield '409' => [409, ApiException::class];
        yield '410' => [410, ApiException::class];
        yield '429' => [429, RateLimitException::class];
        yield '500' => [500, ApiException::class];
    }

    /**
     * @dataProvider statuses
     * @param class-string<CvsmException> $class
     */
    public function testEachStatusRaisesItsExceptionTypeWithStatusAndServerMessage(int $status, string $class): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['status' => $status, 'body' => ['error' => 'pesan dari server']]);

        try {
            $this->client()->getAll();
            self::fail('no exception');
        } catch (CvsmException $e) {
            self::assertSame($class, $e::class);
            self::assertInstanceOf(CvsmExceptionInterface::class, $e);
            self::assertSame($status, $e->getStatus());
            self::assertStringStartsWith((string) $status, $e->getMessage());
            self::assertStringContainsString('pesan dari server', $e->getMessage());
        }
        self::assertSame(1, $this->requestCount(), 'a 4xx or 500 is never retried');
    }

    public function testErrorWithoutAJsonBodyStillNamesTheStatus(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['status' => 400, 'body' => '<html>bad</html>']);

        try {
            $this->client()->getAll();
            self::fail('no exception');
        } catch (ApiException $e) {
            self::assertSame(400, $e->getStatus());
            self::assertSame('400 Bad Request', $e->getMessage());
        }
    }

    public function testRateLimitCarriesRetryAfterAndIsNotRetried(): void
    {
        $this->stub->route(
            'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production',
            ['status' => 429, 'headers' => ['Retry-After' => '17'], 'body' => ['error' => 'terlalu banyak permintaan']]
        );

        try {
            $this->client(['max_retries' => 2])->getAll();
            self::fail('no RateLimitException');
        } catch (RateLimitException $e) {
            self::assertSame(17, $e->getRetryAfter());
            self::assertSame(429, $e->getStatus());
        }
        self::assertSame(1, $this->requestCount());
    }

    public function testRateLimitWithoutRetryAfterHasNullRetryAfter(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['status' => 429, 'body' => ['error' => 'x']]);

        try {
            $this->client()->getAll();
            self::fail('no RateLimitException');
        } catch (RateLimitException $e) {
            self::assertNull($e->getRetryAfter());
        }
    }

    public function testAbsentNameIsNotFoundWithoutStatus(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=MISSING', ['body' => ['secrets' => [], 'total' => 0]]);

        try {
            $this->client()->get('MISSING');
            self::fail('no SecretNotFoundException');
        } catch (SecretNotFoundException $e) {
            self::assertSame('secret "MISSING" not found in production', $e->getMessage());
            self::assertNull($e->getStatus());
            self::assertSame('MISSING', $e->getSecretName());
            self::assertNull($e->getSuggestion());
        }
        self::assertSame(1, $this->requestCount());
    }

    public function testNameThatDiffersOnlyInCaseSuggestsTheExistingName(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=database_url', ['body' => [
            'secrets' => [
                ['id' => 'x', 'name' => 'DATABASE_URL_OLD', 'environment' => 'production'],
                ['id' => 'y', 'name' => 'DATABASE_URL', 'environment' => 'production'],
            ],
            'total' => 2,
        ]]);

        try {
            $this->client()->get('database_url');
            self::fail('no SecretNotFoundException');
        } catch (SecretNotFoundException $e) {
            self::assertSame('secret "database_url" not found in production; did you mean "DATABASE_URL"?', $e->getMessage());
            self::assertSame('DATABASE_URL', $e->getSuggestion());
        }
        self::assertSame(1, $this->requestCount(), 'no read by id for a name that does not match');
    }

    public function testNotFoundFromTheServerCarries404(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=A', ['body' => ['secrets' => [['id' => 'gone', 'name' => 'A']], 'total' => 1]]);
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/gone', ['status' => 404, 'body' => ['error' => 'tidak ditemukan']]);

        try {
            $this->client()->get('A');
            self::fail('no SecretNotFoundException');
        } catch (SecretNotFoundException $e) {
            self::assertSame(404, $e->getStatus());
        }
    }

    public function testSuccessBodyThatIsNotJsonIsANetworkError(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['body' => 'not json']);

        $this->expectException(NetworkException::class);
        $this->client(['max_retries' => 0])->getAll();
    }

    public function testConnectionRefusedIsANetworkError(): void
    {
        $port = self::closedPort();

        try {
            $this->client(['base_url' => 'http://127.0.0.1:' . $port . '/api/v1', 'max_retries' => 1])->getAll();
            self::fail('no NetworkException');
        } catch (NetworkException $e) {
            self::assertNull($e->getStatus());
            self::assertStringContainsString('after 2 attempts', $e->getMessage());
        }
    }

    public function testEveryExceptionSharesTheBaseClassAndInterface(): void
    {
        foreach ([
            ConfigurationException::class, AuthenticationException::class, PermissionDeniedException::class,
            SecretNotFoundException::class, RateLimitException::class, ApiException::class, NetworkException::class,
        ] as $class) {
            self::assertTrue(is_subclass_of($class, CvsmException::class), $class);
            self::assertTrue(is_subclass_of($class, CvsmExceptionInterface::class), $class);
        }
    }

    private static function closedPort(): int
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        self::assertNotFalse($socket);
        $name = (string) stream_socket_get_name($socket, false);
        fclose($socket);

        return (int) substr($name, strrpos($name, ':') + 1);
    }
}
