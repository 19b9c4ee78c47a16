<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;
use Cvsm\StaleRead;

/**
 * Stale-if-error (rule R14). Most tests use cache_ttl 0, where nothing is ever fresh but a value
 * is kept stale_if_error seconds after it was fetched, so no test has to wait for a value to
 * stop being fresh; InternalCacheTest covers the bound with a fake clock.
 */
final class StaleIfErrorTest extends TestCase
{
    private const VALUE = 'kept-value-that-must-not-be-logged';
    private const EXPORT = 'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';

    /** @var list<StaleRead> what the on_stale callback received */
    private array $reads = [];

    /** @var list<array{0: string, 1: array<string, mixed>}> what the logger received */
    private array $warnings = [];

    /**
     * Each failure, the error it ends with, and the attempts made (max_retries 1) before the
     * kept value is returned.
     *
     * @return iterable<string, array{0: array<string, mixed>, 1: class-string<CvsmException>, 2: int}>
     */
    public static function failuresThatServeStale(): iterable
    {
        yield 'dropped connection' => [['body' => ['secret' => []], 'truncate' => true], NetworkException::class, 2];
        yield 'timeout' => [['delay_ms' => 1500, 'body' => ['secret' => [], 'value' => 'late']], NetworkException::class, 2];
        yield 'unreadable answer' => [['body' => '<html>maintenance</html>'], NetworkException::class, 2];
        yield 'a value that is not a string' => [['body' => ['secret' => [], 'value' => 5]], NetworkException::class, 2];
        yield '500' => [['status' => 500, 'body' => ['error' => 'rusak']], ApiException::class, 1];
        yield '502' => [['status' => 502], ApiException::class, 2];
        yield '503' => [['status' => 503, 'headers' => ['X-Request-Id' => 'req-503']], ApiException::class, 2];
        yield '504' => [['status' => 504], ApiException::class, 2];
        yield '429' => [['status' => 429, 'headers' => ['Retry-After' => '1']], RateLimitException::class, 1];
    }

    /**
     * @dataProvider failuresThatServeStale
     * @param array<string, mixed> $failure
     * @param class-string<CvsmException> $class
     */
    public function testAFailedReadReturnsTheKeptValueMarkedStale(array $failure, string $class, int $attempts): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), $failure);
        $client = $this->staleClient(['max_retries' => 1, 'timeout' => 0.3]);

        self::assertSame(self::VALUE, $client->get('A'));
        self::assertSame([], $this->reads, 'a fresh read is not stale');

        self::assertSame(self::VALUE, $client->get('A'));

        self::assertCount(1, $this->reads);
        $read = $this->reads[0];
        self::assertSame('A', $read->name);
        self::assertSame('production', $read->environment);
        self::assertSame($class, $read->error::class);
        self::assertGreaterThanOrEqual(0.0, $read->age);
        self::assertLessThan(10.0, $read->age);
        self::assertSame(1 + $attempts, $this->requestCount(), 'the kept value comes after the retries');
    }

    /**
     * @return iterable<string, array{0: array<string, mixed>, 1: class-string<CvsmException>}>
     */
    public static function failuresThatNeverServeStale(): iterable
    {
        yield '400 (rejected environment)' => [['status' => 400], ConfigurationException::class];
        yield '401' => [['status' => 401], AuthenticationException::class];
        yield '403' => [['status' => 403], PermissionDeniedException::class];
        yield '409' => [['status' => 409], ApiException::class];
        yield '302' => [['status' => 302, 'headers' => ['Location' => '/elsewhere']], ApiException::class];
    }

    /**
     * @dataProvider failuresThatNeverServeStale
     * @param array<string, mixed> $failure
     * @param class-string<CvsmException> $class
     */
    public function testOtherErrorsAreThrownWithAValueKept(array $failure, string $class): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), $failure);
        $client = $this->staleClient();
        $client->get('A');

        try {
            $client->get('A');
            self::fail('no ' . $class);
        } catch (CvsmException $e) {
            self::assertSame($class, $e::class);
        }
        self::assertSame([], $this->reads);
        self::assertSame([], $this->warnings);
    }

    public function testASecretGoneFromTheServerIsNotFoundWithAValueKept(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 404, 'body' => ['error' => 'x']]);
        $this->stub->route(self::listing('A'), ['body' => ['secrets' => [], 'total' => 0]]);
        $client = $this->staleClient();
        $client->get('A');

        $this->expectException(SecretNotFoundException::class);
        $client->get('A');
    }

    public function testAFailedListingAfterA404ServesNoKeptValue(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 404, 'body' => ['error' => 'x']]);
        $this->stub->route(self::listing('A'), ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');

        try {
            $client->get('A');
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame(503, $e->getStatus());
        }
        self::assertSame([], $this->reads, 'the read by name said 404: the value is gone, whatever the listing says');
    }

    /**
     * @return iterable<string, array{0: int}>
     */
    public static function refusedCredentials(): iterable
    {
        yield '401' => [401];
        yield '403' => [403];
    }

    /**
     * @dataProvider refusedCredentials
     */
    public function testARefusedCredentialForgetsEveryKeptValue(int $status): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => $status], ['status' => 503]);
        $this->routeExport(['A' => self::VALUE, 'B' => 'two']);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');
        $client->getAll();
        $this->stub->route(self::EXPORT, ['status' => 503]);

        try {
            $client->get('A');
            self::fail('no exception for ' . $status);
        } catch (AuthenticationException|PermissionDeniedException $e) {
            self::assertSame($status, $e->getStatus());
        }
        foreach ([static fn () => $client->get('A'), static fn () => $client->getAll()] as $read) {
            try {
                $read();
                self::fail('a value was kept after a ' . $status);
            } catch (ApiException $e) {
                self::assertSame(503, $e->getStatus());
            }
        }
        self::assertSame([], $this->reads);
    }

    public function testGetAllReturnsTheKeptExportMarkedStale(): void
    {
        $this->stub->route(self::EXPORT, ['body' => ['B' => 'two', 'A' => self::VALUE]], ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->getAll();

        self::assertSame(['A' => self::VALUE, 'B' => 'two'], $client->getAll());

        self::assertCount(1, $this->reads);
        self::assertNull($this->reads[0]->name, 'getAll served the whole environment');
        self::assertSame(503, $this->reads[0]->error->getStatus());
    }

    public function testGetFallsBackOnAValueGetAllFetched(): void
    {
        $this->routeExport(['A' => self::VALUE]);
        $this->stub->route(self::byName('A'), ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->getAll();

        self::assertSame(self::VALUE, $client->get('A'));
        self::assertSame('A', $this->reads[0]->name);
    }

    public function testGetAllHasNothingToFallBackOnWithOnlySingleValuesKept(): void
    {
        $this->routeSecret('A', self::VALUE);
        $this->stub->route(self::EXPORT, ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');

        $this->expectException(ApiException::class);
        $client->getAll();
    }

    public function testInjectUsesTheKeptExport(): void
    {
        $this->setEnv('CVSM_TEST_STALE_A', null);
        $this->stub->route(self::EXPORT, ['body' => ['CVSM_TEST_STALE_A' => 'one']], ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->getAll();

        self::assertSame(['CVSM_TEST_STALE_A'], $client->inject());
        self::assertSame('one', getenv('CVSM_TEST_STALE_A'));
        self::assertCount(1, $this->reads);
    }

    public function testClearCacheForgetsKeptValues(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');
        $client->clearCache();

        $this->expectException(ApiException::class);
        $client->get('A');
    }

    public function testWithoutStaleIfErrorAFailedReadIsTheError(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503]);
        $client = $this->client(['cache_ttl' => 0, 'max_retries' => 0, 'on_stale' => fn (StaleRead $read) => $this->reads[] = $read]);
        self::assertSame(0, $client->getStaleIfError());
        $client->get('A');

        try {
            $client->get('A');
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame(503, $e->getStatus());
        }
        self::assertSame([], $this->reads);
    }

    public function testAKeptValueIsServedOnlyWithinTheBound(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503]);
        $client = $this->staleClient(['stale_if_error' => 1, 'max_retries' => 0]);
        $client->get('A');
        self::assertSame(self::VALUE, $client->get('A'), 'within cache_ttl 0 + stale_if_error 1');

        usleep(1_050_000);
        try {
            $client->get('A');
            self::fail('a value older than the bound was served');
        } catch (ApiException $e) {
            self::assertSame(503, $e->getStatus());
        }
    }

    public function testAFreshValueIsServedFromTheCacheWithoutARequest(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503]);
        $client = $this->staleClient(['cache_ttl' => 30]);

        $client->get('A');
        self::assertSame(self::VALUE, $client->get('A'));

        self::assertSame(1, $this->requestCount());
        self::assertSame([], $this->reads, 'a fresh cached value is not stale');
    }

    public function testTheWarningIsLoggedOncePerNameAndNamesNoValue(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503, 'headers' => ['X-Request-Id' => 'req-a']]);
        $this->stub->route(self::byName('B'), self::answer('B', 'value-of-b'), ['body' => 'not json']);
        $client = $this->staleClient(['max_retries' => 0, 'logger' => $this->logger()]);
        $client->get('A');
        $client->get('B');

        $client->get('A');
        $client->get('A');
        $client->get('B');
        $client->get('A');

        self::assertCount(4, $this->reads, 'every stale read is signalled');
        self::assertCount(2, $this->warnings, 'one warning per name');
        [[$first, $context], [$second]] = $this->warnings;
        self::assertStringContainsString('"A"', $first);
        self::assertStringContainsString('production', $first);
        self::assertStringContainsString('HTTP 503', $first);
        self::assertStringContainsString('ApiException', $first);
        self::assertStringContainsString('"B"', $second);
        self::assertStringContainsString('network error', $second);
        self::assertSame('A', $context['secret']);
        self::assertSame('production', $context['environment']);
        self::assertSame('req-a', $context['request_id']);
        self::assertInstanceOf(ApiException::class, $context['exception']);
        foreach ($this->warnings as [$message, $context]) {
            self::assertStringNotContainsString(self::VALUE, $message . print_r($context, true));
            self::assertStringNotContainsString('value-of-b', $message);
            self::assertStringNotContainsString(self::TOKEN, $message . print_r($context, true));
        }
    }

    public function testTheWarningComesBackAfterAFreshRead(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', 'one'), ['status' => 503], self::answer('A', 'two'), ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0, 'logger' => $this->logger()]);

        $client->get('A');
        self::assertSame('one', $client->get('A'));
        self::assertSame('two', $client->get('A'));
        self::assertSame('two', $client->get('A'));
        self::assertSame('two', $client->get('A'));

        self::assertCount(3, $this->reads);
        self::assertCount(2, $this->warnings, 'one warning per outage of a name');
    }

    public function testGetAllWarnsOnceForTheWholeEnvironment(): void
    {
        $this->stub->route(self::EXPORT, ['body' => ['A' => self::VALUE]], ['status' => 429]);
        $client = $this->staleClient(['logger' => $this->logger()]);
        $client->getAll();

        $client->getAll();
        $client->getAll();

        self::assertCount(1, $this->warnings);
        self::assertStringContainsString('every secret in production', $this->warnings[0][0]);
        self::assertStringContainsString('rate limited', $this->warnings[0][0]);
        self::assertNull($this->warnings[0][1]['secret']);
    }

    public function testWithoutALoggerTheWarningGoesToErrorLogOncePerName(): void
    {
        $log = tempnam(sys_get_temp_dir(), 'cvsm-php-error-log-');
        self::assertIsString($log);
        $previous = ini_set('error_log', $log);
        try {
            $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 502]);
            $client = $this->staleClient(['max_retries' => 0]);
            $client->get('A');

            $client->get('A');
            $client->get('A');

            $lines = array_values(array_filter(explode("\n", (string) file_get_contents($log))));
        } finally {
            ini_set('error_log', (string) $previous);
            @unlink($log);
        }
        self::assertCount(1, $lines);
        self::assertStringContainsString('cvsm: serving the stale value of secret "A" in production', $lines[0]);
        self::assertStringContainsString('HTTP 502', $lines[0]);
        self::assertStringNotContainsString(self::VALUE, $lines[0]);
    }

    public function testAStaleReadShowsNoValue(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');
        $client->get('A');

        ob_start();
        var_dump($this->reads[0]);
        $dumped = (string) ob_get_clean();
        self::assertStringNotContainsString(self::VALUE, $dumped . print_r($this->reads[0], true) . json_encode($this->reads[0]));
        self::assertStringNotContainsString(self::TOKEN, $dumped);
    }

    public function testACloneKeepsTheCallbacksButNotTheKeptValues(): void
    {
        $this->stub->route(self::byName('A'), self::answer('A', self::VALUE), ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');
        $copy = clone $client;

        try {
            $copy->get('A');
            self::fail('the copy had a kept value');
        } catch (ApiException) {
        }
        self::assertSame(self::VALUE, $client->get('A'));
        self::assertCount(1, $this->reads);
    }

    public function testStaleIfErrorComesFromTheOptionThenTheVariable(): void
    {
        $this->setEnv('CVSM_STALE_IF_ERROR', '300');
        self::assertSame(300, $this->client()->getStaleIfError());
        self::assertSame(300, $this->client()->getConfig()['stale_if_error']);
        self::assertSame(5, $this->client(['stale_if_error' => 5])->getConfig()['stale_if_error']);
        self::assertSame(0, $this->client(['stale_if_error' => 0])->getStaleIfError());

        $this->setEnv('CVSM_STALE_IF_ERROR', '');
        self::assertSame(0, $this->client()->getStaleIfError(), 'an empty variable counts as unset');
    }

    /**
     * @return iterable<string, array{0: ?string, 1: array<string, mixed>, 2: string}>
     */
    public static function invalidSettings(): iterable
    {
        yield 'a word in the variable' => ['soon', [], 'CVSM_STALE_IF_ERROR'];
        yield 'a negative variable' => ['-1', [], 'CVSM_STALE_IF_ERROR'];
        yield 'a fraction in the variable' => ['1.5', [], 'CVSM_STALE_IF_ERROR'];
        yield 'a negative option' => [null, ['stale_if_error' => -1], 'stale_if_error'];
        yield 'a float option' => [null, ['stale_if_error' => 1.5], 'stale_if_error'];
        yield 'an on_stale that is not callable' => [null, ['on_stale' => 'no_such_function_anywhere'], 'on_stale'];
        yield 'a logger without warning()' => [null, ['logger' => new \stdClass()], 'logger'];
        yield 'a logger with warning() that is not PSR-3' => [null, ['logger' => new class () {
            public function warning(string $message, array $context = []): void
            {
            }
        }], 'Psr\\Log\\LoggerInterface'];
        yield 'a logger that is a string' => [null, ['logger' => 'syslog'], 'logger'];
    }

    /**
     * @dataProvider invalidSettings
     * @param array<string, mixed> $options
     */
    public function testAnInvalidSettingIsAConfigurationError(?string $variable, array $options, string $named): void
    {
        if ($variable !== null) {
            $this->setEnv('CVSM_STALE_IF_ERROR', $variable);
        }

        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage($named);
        $this->client($options);
    }

    /**
     * staleClient builds a client with cache_ttl 0 and stale_if_error 60 whose on_stale callback
     * records into $this->reads; $options override.
     *
     * @param array<string, mixed> $options
     */
    private function staleClient(array $options = []): Client
    {
        return $this->client($options + [
            'cache_ttl' => 0,
            'stale_if_error' => 60,
            'on_stale' => function (StaleRead $read): void {
                $this->reads[] = $read;
            },
        ]);
    }

    /** Returns a PSR-3 logger that records its warnings into $this->warnings. */
    private function logger(): \Psr\Log\LoggerInterface
    {
        $warnings = &$this->warnings;

        return new class ($warnings) extends \Psr\Log\AbstractLogger {
            /** @param list<array{0: string, 1: array<string, mixed>}> $warnings */
            public function __construct(private array &$warnings)
            {
            }

            /**
             * @param mixed $level
             * @param string|\Stringable $message
             * @param array<string, mixed> $context
             */
            public function log($level, $message, array $context = []): void
            {
                if ($level === \Psr\Log\LogLevel::WARNING) {
                    $this->warnings[] = [(string) $message, $context];
                }
            }
        };
    }

    /**
     * @return array{body: array<string, mixed>}
     */
    private static function answer(string $name, string $value): array
    {
        return ['body' => ['secret' => ['id' => 'id-' . $name, 'name' => $name, 'environment' => 'production'], 'value' => $value]];
    }
}
