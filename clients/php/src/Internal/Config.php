<?php

declare(strict_types=1);

namespace Cvsm\Internal;

use Cvsm\Exception\ConfigurationException;

/**
 * Config owns the client's configuration rules: it merges explicit options with the CVSM_*
 * environment variables, applies the defaults and validates every value. It never holds the
 * token; Config::token() resolves that separately so it stays out of any printable object.
 *
 * @internal
 */
final class Config
{
    public const DEFAULT_ENVIRONMENT = 'production';
    public const DEFAULT_CACHE_TTL = 30;
    public const DEFAULT_TIMEOUT = 10;
    public const DEFAULT_MAX_RETRIES = 2;

    /** Config::OPTIONS lists the option names the client accepts. */
    public const OPTIONS = ['token', 'base_url', 'team', 'environment', 'cache_ttl', 'timeout', 'max_retries'];

    private function __construct(
        public readonly string $baseUrl,
        public readonly string $team,
        public readonly string $environment,
        public readonly int $cacheTtl,
        public readonly int|float $timeout,
        public readonly int $maxRetries
    ) {
    }

    /**
     * Config::fromOptions resolves every setting but the token: explicit option first, then the
     * environment variable, then the default. It throws ConfigurationException on a missing base
     * URL or team and on any invalid value.
     *
     * @param array<string, mixed> $options
     */
    public static function fromOptions(#[\SensitiveParameter] array $options): self
    {
        foreach (array_keys($options) as $key) {
            if (!in_array($key, self::OPTIONS, true)) {
                $shown = preg_match('/^[A-Za-z_][A-Za-z0-9_]{0,30}$/', (string) $key) ? '"' . $key . '"' : '(not shown)';
                throw new ConfigurationException(sprintf(
                    'unknown option %s; the options are: %s',
                    $shown,
                    implode(', ', self::OPTIONS)
                ));
            }
        }

        $baseUrl = self::stringSetting($options, 'base_url', 'CVSM_BASE_URL');
        if ($baseUrl === null) {
            throw new ConfigurationException(
                'CVSM_BASE_URL is not set: pass the "base_url" option or set CVSM_BASE_URL (it includes /api/v1)'
            );
        }
        $baseUrl = rtrim($baseUrl, '/');
        if (!preg_match('#^https?://[^/?\#\s]+(/[^?\#\s]*)?$#i', $baseUrl)) {
            throw new ConfigurationException(
                'base_url must be an absolute http:// or https:// URL without query, such as https://cvsm.example.com/api/v1'
            );
        }

        $team = self::stringSetting($options, 'team', 'CVSM_TEAM');
        if ($team === null) {
            throw new ConfigurationException(
                'CVSM_TEAM is not set: pass the "team" option or set CVSM_TEAM (a team id or slug)'
            );
        }

        $environment = self::stringSetting($options, 'environment', 'CVSM_ENVIRONMENT') ?? self::DEFAULT_ENVIRONMENT;

        return new self(
            $baseUrl,
            $team,
            $environment,
            self::cacheTtl($options),
            self::timeout($options),
            self::maxRetries($options)
        );
    }

    /**
     * Config::token returns the token from the "token" option or CVSM_TOKEN, and throws
     * ConfigurationException when neither is set. The message never repeats the token.
     *
     * @param array<string, mixed> $options
     */
    public static function token(#[\SensitiveParameter] array $options): string
    {
        $token = self::stringSetting($options, 'token', 'CVSM_TOKEN');
        if ($token === null) {
            throw new ConfigurationException(
                'CVSM_TOKEN is not set: pass the "token" option or set CVSM_TOKEN'
            );
        }
        if (preg_match('/[\x00-\x20\x7f]/', $token)) {
            throw new ConfigurationException('the token contains whitespace or control characters');
        }

        return $token;
    }

    /**
     * Config::toArray returns the effective configuration as the option names spell it.
     *
     * @return array{base_url: string, team: string, environment: string, cache_ttl: int, timeout: int|float, max_retries: int}
     */
    public function toArray(): array
    {
        return [
            'base_url' => $this->baseUrl,
            'team' => $this->team,
            'environment' => $this->environment,
            'cache_ttl' => $this->cacheTtl,
            'timeout' => $this->timeout,
            'max_retries' => $this->maxRetries,
        ];
    }

    /**
     * @param array<string, mixed> $options
     */
    private static function stringSetting(#[\SensitiveParameter] array $options, string $key, string $variable): ?string
    {
        $value = $options[$key] ?? null;
        if ($value !== null) {
            if (!is_string($value) || $value === '') {
                throw new ConfigurationException(sprintf('option "%s" must be a non-empty string', $key));
            }

            return $value;
        }

        return self::env($variable);
    }

    /**
     * @param array<string, mixed> $options
     */
    private static function cacheTtl(#[\SensitiveParameter] array $options): int
    {
        $value = $options['cache_ttl'] ?? null;
        if ($value !== null) {
            $ttl = self::nonNegativeInt($value);
            if ($ttl === null) {
                throw new ConfigurationException('option "cache_ttl" must be a non-negative integer (seconds; 0 disables the cache)');
            }

            return $ttl;
        }
        $raw = self::env('CVSM_CACHE_TTL');
        if ($raw === null) {
            return self::DEFAULT_CACHE_TTL;
        }
        $ttl = self::nonNegativeInt(trim($raw));
        if ($ttl === null) {
            throw new ConfigurationException(sprintf(
                'CVSM_CACHE_TTL must be a non-negative integer (seconds; 0 disables the cache), got "%s"',
                self::printable($raw)
            ));
        }

        return $ttl;
    }

    /**
     * @param array<string, mixed> $options
     */
    private static function timeout(#[\SensitiveParameter] array $options): int|float
    {
        $value = $options['timeout'] ?? null;
        if ($value === null) {
            return self::DEFAULT_TIMEOUT;
        }
        if (is_string($value) && is_numeric($value)) {
            $value = $value + 0;
        }
        if ((!is_int($value) && !is_float($value)) || !is_finite((float) $value) || $value <= 0) {
            throw new ConfigurationException('option "timeout" must be a positive number of seconds');
        }

        return $value;
    }

    /**
     * @param array<string, mixed> $options
     */
    private static function maxRetries(#[\SensitiveParameter] array $options): int
    {
        $value = $options['max_retries'] ?? null;
        if ($value === null) {
            return self::DEFAULT_MAX_RETRIES;
        }
        $retries = self::nonNegativeInt($value);
        if ($retries === null) {
            throw new ConfigurationException('option "max_retries" must be a non-negative integer');
        }

        return $retries;
    }

    private static function nonNegativeInt(mixed $value): ?int
    {
        if (is_int($value)) {
            return $value >= 0 ? $value : null;
        }
        if (is_string($value) && preg_match('/^[0-9]{1,18}$/', $value)) {
            return (int) $value;
        }

        return null;
    }

    private static function env(string $variable): ?string
    {
        $value = getenv($variable);

        return ($value === false || $value === '') ? null : $value;
    }

    /** printable shortens a user-supplied string for an error message. */
    private static function printable(string $text): string
    {
        $text = preg_replace('/[\x00-\x1f\x7f]/', '?', $text) ?? '';

        return strlen($text) > 40 ? substr($text, 0, 40) . '...' : $text;
    }
}
