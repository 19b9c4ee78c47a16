<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;

/**
 * Options of the wrong PHP type or form; the variables and values every SDK refuses alike are the
 * conformance cases invalid_*_is_configuration_error and token_with_control_characters_*.
 */
final class ConfigurationTest extends TestCase
{
    /**
     * @return iterable<string, array{0: array<string, mixed>}>
     */
    public static function badOptions(): iterable
    {
        yield 'float cache_ttl' => [['cache_ttl' => 1.5]];
        yield 'zero timeout' => [['timeout' => 0]];
        yield 'text timeout' => [['timeout' => 'soon']];
        yield 'negative max_retries' => [['max_retries' => -1]];
        yield 'boolean max_retries' => [['max_retries' => true]];
        yield 'relative base_url' => [['base_url' => 'cvsm.example.com/api/v1']];
        yield 'unknown option' => [['base_uri' => 'http://x/api/v1']];
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
}
