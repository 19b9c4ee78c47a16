<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ApiException;
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

    public function testGetAllHasNothingToFallBackOnWithOnlySingleValuesKept(): void
    {
        $this->secrets(['A' => self::VALUE]);
        $this->stub->route(self::EXPORT, ['status' => 503]);
        $client = $this->staleClient(['max_retries' => 0]);
        $client->get('A');

        $this->expectException(ApiException::class);
        $client->getAll();
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
