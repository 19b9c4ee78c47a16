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
    private const EXPORT = 'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';

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
        $this->routeValueAnswer(['status' => $status, 'headers' => ['X-Request-Id' => 'req-' . $status], 'body' => ['error' => 'pesan dari server']]);

        try {
            $this->client()->get('A');
            self::fail('no exception');
        } catch (CvsmException $e) {
            self::assertSame($class, $e::class);
            self::assertInstanceOf(CvsmExceptionInterface::class, $e);
            self::assertSame($status, $e->getStatus());
            self::assertSame('req-' . $status, $e->getRequestId());
            self::assertStringStartsWith((string) $status, $e->getMessage());
            self::assertStringContainsString('pesan dari server', $e->getMessage());
        }
        self::assertSame(2, $this->requestCount(), 'a 4xx or 500 is never retried');
    }

    public function testErrorWithoutAJsonBodyStillNamesTheStatus(): void
    {
        $this->routeValueAnswer(['status' => 400, 'body' => '<html>bad</html>']);

        try {
            $this->client()->get('A');
            self::fail('no exception');
        } catch (ApiException $e) {
            self::assertSame(400, $e->getStatus());
            self::assertSame('400 Bad Request', $e->getMessage());
            self::assertNull($e->getRequestId(), 'no X-Request-Id header');
        }
    }

    /**
     * @return iterable<string, array{0: string, 1: int}>
     */
    public static function misconfigurations(): iterable
    {
        yield 'teams 404 (base URL without /api/v1)' => ['GET /teams', 404];
        yield 'listing 404 (unknown team id)' => ['GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=A', 404];
        yield 'listing 400 (rejected environment)' => ['GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=A', 400];
        yield 'export 404 (unknown team id)' => [self::EXPORT, 404];
        yield 'export 400 (rejected environment)' => [self::EXPORT, 400];
    }

    /**
     * @dataProvider misconfigurations
     */
    public function testWrongBaseUrlTeamOrEnvironmentIsAConfigurationErrorWithItsStatus(string $route, int $status): void
    {
        $this->stub->route('GET /teams', ['body' => ['teams' => [['id' => self::TEAM_ID, 'slug' => 'acme']]]]);
        $this->stub->route($route, ['status' => $status, 'headers' => ['X-Request-Id' => 'req-cfg'], 'body' => ['error' => 'tidak dikenal']]);
        $client = $this->client(['team' => 'acme', 'max_retries' => 2]);

        try {
            str_contains($route, 'export') ? $client->getAll() : $client->get('A');
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertSame($status, $e->getStatus());
            self::assertSame('req-cfg', $e->getRequestId());
            self::assertStringStartsWith($status . ' ', $e->getMessage());
            self::assertStringContainsString('tidak dikenal', $e->getMessage());
        }
        self::assertSame($route === 'GET /teams' ? 1 : 2, $this->requestCount(), 'never retried');
    }

    public function testA404ToTheValueRequestStaysNotFound(): void
    {
        $this->routeValueAnswer(['status' => 404, 'body' => ['error' => 'sudah dihapus']]);

        $this->expectException(SecretNotFoundException::class);
        $this->client()->get('A');
    }

    public function testRedirectIsAnApiErrorAndIsNotFollowed(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 302, 'headers' => ['Location' => $this->stub->url() . '/elsewhere']]);
        $this->stub->route('GET /elsewhere', ['body' => ['A' => 'moved']]);

        try {
            $this->client()->getAll();
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame(ApiException::class, $e::class);
            self::assertSame(302, $e->getStatus());
            self::assertStringStartsWith('302 Found', $e->getMessage());
        }
        self::assertSame(['/api/v1/teams/' . self::TEAM_ID . '/secrets/export'], array_column($this->stub->requests(), 'path'));
    }

    public function testRedirectIsNotFollowedEvenWhenCurlOptionsAsk(): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('CURLOPT_FOLLOWLOCATION');
        $this->client(['curl_options' => [CURLOPT_FOLLOWLOCATION => true]]);
    }

    public function testRateLimitCarriesRetryAfterAndIsNotRetried(): void
    {
        $this->stub->route(
            'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production',
            ['status' => 429, 'headers' => ['Retry-After' => '17', 'X-Request-Id' => 'req-429'], 'body' => ['error' => 'terlalu banyak permintaan']]
        );

        try {
            $this->client(['max_retries' => 2])->getAll();
            self::fail('no RateLimitException');
        } catch (RateLimitException $e) {
            self::assertSame(17, $e->getRetryAfter());
            self::assertSame(429, $e->getStatus());
            self::assertSame('req-429', $e->getRequestId());
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
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=database_url', ['headers' => ['X-Request-Id' => 'req-listing'], 'body' => [
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
            self::assertSame('req-listing', $e->getRequestId(), "the listing's request id");
            self::assertNull($e->getStatus());
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
            self::assertNull($e->getRequestId(), 'no answer, no request id');
            self::assertStringContainsString('after 2 attempts', $e->getMessage());
        }
    }

    public function testAServerErrorAfterRetriesCarriesTheLastRequestId(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 503, 'headers' => ['X-Request-Id' => 'req-first']], ['status' => 503, 'headers' => ['X-Request-Id' => 'req-last']]);

        try {
            $this->client(['max_retries' => 1])->getAll();
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame('req-last', $e->getRequestId());
        }
    }

    public function testTeamSlugMatchingNothingCarriesTheTeamsRequestId(): void
    {
        $this->stub->route('GET /teams', ['headers' => ['X-Request-Id' => 'req-teams'], 'body' => ['teams' => []]]);

        try {
            $this->client(['team' => 'nope'])->getAll();
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertNull($e->getStatus());
            self::assertSame('req-teams', $e->getRequestId());
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

    /**
     * routeValueAnswer lists secret A and answers its value request with $response.
     *
     * @param array<string, mixed> $response
     */
    private function routeValueAnswer(array $response): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=A', ['body' => [
            'secrets' => [['id' => 'id-a', 'name' => 'A', 'environment' => 'production']], 'total' => 1,
        ]]);
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/id-a', $response);
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
