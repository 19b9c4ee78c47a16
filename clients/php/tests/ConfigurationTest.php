<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ConfigurationException;

final class ConfigurationTest extends TestCase
{
    public function testDefaultsApplyWhenOnlyRequiredSettingsAreGiven(): void
    {
        $client = new Client(['token' => self::TOKEN, 'base_url' => 'https://cvsm.example.com/api/v1', 'team' => 'acme']);

        self::assertSame([
            'base_url' => 'https://cvsm.example.com/api/v1',
            'team' => 'acme',
            'environment' => 'production',
            'cache_ttl' => 30,
            'timeout' => 10,
            'max_retries' => 2,
        ], $client->getConfig());
        self::assertSame('production', $client->getEnvironment());
        self::assertSame(30, $client->getCacheTtl());
        self::assertSame(10, $client->getTimeout());
        self::assertSame(2, $client->getMaxRetries());
        self::assertSame('acme', $client->getTeam());
        self::assertSame('https://cvsm.example.com/api/v1', $client->getBaseUrl());
    }

    public function testSettingsComeFromCvsmVariablesWhenOptionsAreAbsent(): void
    {
        $this->setEnv('CVSM_TOKEN', self::TOKEN);
        $this->setEnv('CVSM_BASE_URL', 'http://10.0.0.5:8080/api/v1/');
        $this->setEnv('CVSM_TEAM', 'platform');
        $this->setEnv('CVSM_ENVIRONMENT', 'staging');
        $this->setEnv('CVSM_CACHE_TTL', '0');

        $config = (new Client())->getConfig();

        self::assertSame('http://10.0.0.5:8080/api/v1', $config['base_url'], 'a trailing slash is ignored');
        self::assertSame('platform', $config['team']);
        self::assertSame('staging', $config['environment']);
        self::assertSame(0, $config['cache_ttl']);
    }

    public function testExplicitOptionsWinOverVariables(): void
    {
        $this->setEnv('CVSM_TOKEN', 'cvsm_from_env');
        $this->setEnv('CVSM_BASE_URL', 'http://env.example/api/v1');
        $this->setEnv('CVSM_TEAM', 'env-team');
        $this->setEnv('CVSM_ENVIRONMENT', 'staging');
        $this->setEnv('CVSM_CACHE_TTL', '99');

        $client = new Client([
            'base_url' => 'http://option.example/api/v1',
            'team' => 'option-team',
            'environment' => 'development',
            'cache_ttl' => 5,
            'timeout' => 2.5,
            'max_retries' => 0,
        ]);

        self::assertSame([
            'base_url' => 'http://option.example/api/v1',
            'team' => 'option-team',
            'environment' => 'development',
            'cache_ttl' => 5,
            'timeout' => 2.5,
            'max_retries' => 0,
        ], $client->getConfig());
    }

    public function testExplicitTokenWinsOverCvsmToken(): void
    {
        $this->setEnv('CVSM_TOKEN', 'cvsm_from_env');
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['body' => ['A' => '1']]);

        $this->client(['token' => 'cvsm_explicit'])->getAll();

        self::assertSame('Bearer cvsm_explicit', $this->stub->requests()[0]['headers']['authorization']);
    }

    /**
     * @return iterable<string, array{0: array<string, mixed>, 1: string}>
     */
    public static function missingSettings(): iterable
    {
        yield 'token' => [['base_url' => 'http://x/api/v1', 'team' => 'acme'], 'CVSM_TOKEN is not set'];
        yield 'base url' => [['token' => self::TOKEN, 'team' => 'acme'], 'CVSM_BASE_URL is not set'];
        yield 'team' => [['token' => self::TOKEN, 'base_url' => 'http://x/api/v1'], 'CVSM_TEAM is not set'];
        yield 'empty token' => [['token' => '', 'base_url' => 'http://x/api/v1', 'team' => 'acme'], 'token'];
    }

    /**
     * @dataProvider missingSettings
     * @param array<string, mixed> $options
     */
    public function testMissingRequiredSettingIsAConfigurationErrorNamingTheVariable(array $options, string $expected): void
    {
        try {
            new Client($options);
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertStringContainsString($expected, $e->getMessage());
            self::assertNull($e->getStatus());
        }
    }

    /**
     * @return iterable<string, array{0: string}>
     */
    public static function badCacheTtls(): iterable
    {
        yield 'word' => ['abc'];
        yield 'negative' => ['-1'];
        yield 'fraction' => ['1.5'];
    }

    /**
     * @dataProvider badCacheTtls
     */
    public function testCacheTtlVariableThatIsNotANonNegativeIntegerIsAConfigurationError(string $value): void
    {
        $this->setEnv('CVSM_CACHE_TTL', $value);

        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('CVSM_CACHE_TTL');
        $this->client();
    }

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
