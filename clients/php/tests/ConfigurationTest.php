<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ConfigurationException;

final class ConfigurationTest extends TestCase
{

    /**
     * @return iterable<string, array{0: array<string, mixed>}>
     */
    public static function badOptions(): iterable
    {
        yield 'negative cache_ttl' => [['cache_ttl' => -1]];
        yield 'float cache_ttl' => [['cache_ttl' => 1.5]];
        yield 'zero timeout' => [['timeout' => 0]];
        yield 'text timeout' => [['timeout' => 'soon']];
        yield 'negative max_retries' => [['max_retries' => -1]];
        yield 'boolean max_retries' => [['max_retries' => true]];
        yield 'relative base_url' => [['base_url' => 'cvsm.example.com/api/v1']];
        yield 'unknown option' => [['base_uri' => 'http://x/api/v1']];
        yield 'token with a newline' => [['token' => "cvsm_abc\r\nX-Evil: 1"]];
    }

    /**
     * @dataProvider badOptions
     * @param array<string, mixed> $options
     */
    public function testInvalidOptionIsAConfigurationError(array $options): void
    {
        $this->expectException(ConfigurationException::class);
        $this->client($options);
    }

    public function testZeroCacheTtlAndZeroRetriesAreAccepted(): void
    {
        $client = $this->client(['cache_ttl' => 0, 'max_retries' => 0]);

        self::assertSame(0, $client->getCacheTtl());
        self::assertSame(0, $client->getMaxRetries());
    }
}
