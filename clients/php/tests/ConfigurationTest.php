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

    /**
     * @return iterable<string, array{0: string}>
     */
    public static function tokensWithWhitespaceAround(): iterable
    {
        yield 'trailing newline (a mounted file)' => [self::TOKEN . "\n"];
        yield 'CRLF' => [self::TOKEN . "\r\n"];
        yield 'spaces and tabs' => [" \t" . self::TOKEN . "\t "];
        yield 'newlines on both sides' => ["\n\n" . self::TOKEN . "\n"];
    }

    /**
     * @dataProvider tokensWithWhitespaceAround
     */
    public function testWhitespaceAroundTheTokenIsTrimmed(string $token): void
    {
        $this->routeExport(['A' => '1']);

        $this->client(['token' => $token])->getAll();
        $this->setEnv('CVSM_TOKEN', $token);
        (new Client(['base_url' => $this->stub->url(), 'team' => self::TEAM_ID]))->clearCache();
        (new Client(['base_url' => $this->stub->url(), 'team' => self::TEAM_ID]))->getAll();

        $requests = $this->stub->requests();
        self::assertCount(2, $requests);
        foreach ($requests as $request) {
            self::assertSame('Bearer ' . self::TOKEN, $request['headers']['authorization']);
        }
    }

    /**
     * @return iterable<string, array{0: string}>
     */
    public static function tokensWithBadCharacters(): iterable
    {
        yield 'inner space' => ['cvsm_abc def'];
        yield 'inner newline (header injection)' => ["cvsm_abc\r\nX-Evil: 1"];
        yield 'NUL' => ["cvsm_abc\0def"];
        yield 'escape' => ["cvsm_abc\x1bdef"];
        yield 'DEL' => ["cvsm_abc\x7fdef"];
        yield 'non-ASCII' => ['cvsm_abcdéf'];
        yield 'vertical tab at the end' => ["cvsm_abcdef\x0b"];
        yield 'only whitespace' => [" \n\t "];
    }

    /**
     * @dataProvider tokensWithBadCharacters
     */
    public function testATokenWithOtherCharactersIsAConfigurationErrorWithoutTheToken(string $token): void
    {
        // From the option, then from CVSM_TOKEN (which cannot hold a NUL: putenv cuts there).
        $sources = str_contains($token, "\0") ? [$token] : [$token, null];
        foreach ($sources as $option) {
            $this->setEnv('CVSM_TOKEN', $option === null ? $token : null);
            try {
                $this->client(['token' => $option]);
                self::fail('no ConfigurationException');
            } catch (ConfigurationException $e) {
                self::assertNull($e->getStatus());
                self::assertStringContainsString('token', $e->getMessage());
                foreach (['cvsm_abc', 'def', 'X-Evil'] as $part) {
                    self::assertStringNotContainsString($part, $e->getMessage());
                }
            }
        }
        self::assertSame(0, $this->requestCount());
    }

    public function testTimeoutAndMaxRetriesComeFromTheirVariables(): void
    {
        $this->setEnv('CVSM_TIMEOUT', '2.5');
        $this->setEnv('CVSM_MAX_RETRIES', '5');
        $client = new Client(['token' => self::TOKEN, 'base_url' => 'http://x/api/v1', 'team' => 'acme']);

        self::assertSame(2.5, $client->getTimeout());
        self::assertSame(5, $client->getMaxRetries());

        $this->setEnv('CVSM_TIMEOUT', '7');
        $client = new Client(['token' => self::TOKEN, 'base_url' => 'http://x/api/v1', 'team' => 'acme', 'max_retries' => 0]);
        self::assertSame(7, $client->getTimeout());
        self::assertSame(0, $client->getMaxRetries(), 'the option wins');

        $this->setEnv('CVSM_TIMEOUT', '');
        $this->setEnv('CVSM_MAX_RETRIES', '');
        $client = new Client(['token' => self::TOKEN, 'base_url' => 'http://x/api/v1', 'team' => 'acme']);
        self::assertSame(10, $client->getTimeout(), 'empty counts as unset');
        self::assertSame(2, $client->getMaxRetries());
    }

    /**
     * @return iterable<string, array{0: string, 1: string}>
     */
    public static function badNumberVariables(): iterable
    {
        yield 'timeout word' => ['CVSM_TIMEOUT', 'soon'];
        yield 'timeout zero' => ['CVSM_TIMEOUT', '0'];
        yield 'timeout negative' => ['CVSM_TIMEOUT', '-1'];
        yield 'timeout exponent' => ['CVSM_TIMEOUT', '1e3'];
        yield 'max retries fraction' => ['CVSM_MAX_RETRIES', '1.5'];
        yield 'max retries negative' => ['CVSM_MAX_RETRIES', '-1'];
        yield 'max retries word' => ['CVSM_MAX_RETRIES', 'two'];
    }

    /**
     * @dataProvider badNumberVariables
     */
    public function testAnInvalidNumberVariableIsAConfigurationErrorNamingIt(string $variable, string $value): void
    {
        $this->setEnv($variable, $value);

        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage($variable);
        $this->client(['timeout' => null, 'max_retries' => null]);
    }

    public function testZeroCacheTtlAndZeroRetriesAreAccepted(): void
    {
        $client = $this->client(['cache_ttl' => 0, 'max_retries' => 0]);

        self::assertSame(0, $client->getCacheTtl());
        self::assertSame(0, $client->getMaxRetries());
    }
}
