<?php

declare(strict_types=1);

namespace Cvsm\Internal;

use Cvsm\Exception\ConfigurationException;

/**
 * Config owns the client's configuration rules: it merges explicit options with the CVSM_*
 * environment variables, applies the defaults and validates every value. It never holds the
 * token or the curl options (which may hold credentials of their own); Config::token() and
 * Config::curlOptions() resolve those separately so they stay out of any printable object.
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
    public const OPTIONS = [
        'token', 'base_url', 'team', 'environment', 'cache_ttl', 'timeout', 'max_retries', 'ca_file', 'curl_options',
    ];

    /** The characters trimmed from both ends of a token (rule R6): space, tab, CR, LF. */
    private const TOKEN_TRIM = " \t\r\n";

    private function __construct(
        public readonly string $baseUrl,
        public readonly string $team,
        public readonly string $environment,
        public readonly int $cacheTtl,
        public readonly int|float $timeout,
        public readonly int $maxRetries,
        public readonly ?string $caFile
    ) {
    }

    /**
     * Config::fromOptions resolves every setting but the token and the curl options: explicit
     * option first, then the environment variable, then the default. It throws
     * ConfigurationException on a missing base URL or team and on any invalid value.
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
            self::maxRetries($options),
            self::caFile($options)
        );
    }

    /**
     * Config::token returns the token from the "token" option or CVSM_TOKEN without its leading
     * and trailing whitespace (so a token read from a mounted file works). It throws
     * ConfigurationException when neither is set or the token holds a character other than
     * visible ASCII. The message never repeats the token.
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
        $token = trim($token, self::TOKEN_TRIM);
        if ($token === '') {
            throw new ConfigurationException('the token is empty: it holds nothing but whitespace');
        }
        if (preg_match('/[^\x21-\x7e]/', $token)) {
            throw new ConfigurationException(
                'the token holds a character other than visible ASCII ("!" to "~"), such as a control character or an inner space'
            );
        }

        return $token;
    }

    /**
     * Config::curlOptions returns the "curl_options" option: CURLOPT_* constants => values that
     * the transport applies to every handle after its own. An option the client needs to work as
     * documented (the URL, the method, the headers, redirects, how the answer is read) is refused,
     * and so is any option or value that ext-curl rejects.
     *
     * @param array<string, mixed> $options
     * @return array<int, mixed>
     */
    public static function curlOptions(#[\SensitiveParameter] array $options): array
    {
        $curlOptions = $options['curl_options'] ?? [];
        if (!is_array($curlOptions)) {
            throw new ConfigurationException('option "curl_options" must be an array of CURLOPT_* constants => values');
        }
        if ($curlOptions === []) {
            return [];
        }
        $names = [];
        foreach (get_defined_constants(true)['curl'] ?? [] as $name => $value) {
            if (str_starts_with($name, 'CURLOPT_') && is_int($value)) {
                $names[$value] ??= $name;
            }
        }
        $reserved = self::reservedCurlOptions();
        $probe = curl_init();
        foreach ($curlOptions as $option => $value) {
            if (!is_int($option) || !isset($names[$option])) {
                throw new ConfigurationException(sprintf(
                    'option "curl_options" holds %s, which is not a CURLOPT_* constant',
                    is_int($option) ? 'the key ' . $option : 'a key that is not an integer'
                ));
            }
            if (in_array($option, $reserved, true)) {
                throw new ConfigurationException(sprintf(
                    'option "curl_options" may not set %s: the client sets it itself',
                    $names[$option]
                ));
            }
            try {
                $accepted = curl_setopt($probe, $option, $value);
            } catch (\ValueError|\TypeError) {
                $accepted = false;
            }
            if (!$accepted) {
                throw new ConfigurationException(sprintf('option "curl_options": ext-curl rejects the value of %s', $names[$option]));
            }
        }

        return $curlOptions;
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
            $raw = self::env('CVSM_TIMEOUT');
            if ($raw === null) {
                return self::DEFAULT_TIMEOUT;
            }
            $timeout = self::positiveNumber(trim($raw));
            if ($timeout === null) {
                throw new ConfigurationException(sprintf(
                    'CVSM_TIMEOUT must be a positive number of seconds, got "%s"',
                    self::printable($raw)
                ));
            }

            return $timeout;
        }
        $timeout = self::positiveNumber($value);
        if ($timeout === null) {
            throw new ConfigurationException('option "timeout" must be a positive number of seconds');
        }

        return $timeout;
    }

    /**
     * @param array<string, mixed> $options
     */
    private static function maxRetries(#[\SensitiveParameter] array $options): int
    {
        $value = $options['max_retries'] ?? null;
        if ($value === null) {
            $raw = self::env('CVSM_MAX_RETRIES');
            if ($raw === null) {
                return self::DEFAULT_MAX_RETRIES;
            }
            $retries = self::nonNegativeInt(trim($raw));
            if ($retries === null) {
                throw new ConfigurationException(sprintf(
                    'CVSM_MAX_RETRIES must be a non-negative integer, got "%s"',
                    self::printable($raw)
                ));
            }

            return $retries;
        }
        $retries = self::nonNegativeInt($value);
        if ($retries === null) {
            throw new ConfigurationException('option "max_retries" must be a non-negative integer');
        }

        return $retries;
    }

    /**
     * caFile returns the PEM bundle to trust instead of the system store ("ca_file", then
     * CVSM_CA_FILE), after checking that it can be read and holds a certificate.
     *
     * @param array<string, mixed> $options
     */
    private static function caFile(#[\SensitiveParameter] array $options): ?string
    {
        $path = self::stringSetting($options, 'ca_file', 'CVSM_CA_FILE');
        if ($path === null) {
            return null;
        }
        $source = isset($options['ca_file']) ? 'ca_file' : 'CVSM_CA_FILE';
        $pem = is_file($path) && is_readable($path) ? @file_get_contents($path) : false;
        if ($pem === false) {
            throw new ConfigurationException(sprintf('%s "%s" cannot be read', $source, self::printable($path)));
        }
        if (!str_contains($pem, '-----BEGIN CERTIFICATE-----')) {
            throw new ConfigurationException(sprintf('%s "%s" holds no PEM certificate', $source, self::printable($path)));
        }

        return $path;
    }

    /**
     * reservedCurlOptions lists the CURLOPT_* options that "curl_options" may not set.
     *
     * @return list<int>
     */
    private static function reservedCurlOptions(): array
    {
        return [
            CURLOPT_URL, CURLOPT_HTTPGET, CURLOPT_POST, CURLOPT_PUT, CURLOPT_NOBODY, CURLOPT_CUSTOMREQUEST,
            CURLOPT_UPLOAD, CURLOPT_RETURNTRANSFER, CURLOPT_HEADER, CURLOPT_HEADERFUNCTION,
            CURLOPT_WRITEFUNCTION, CURLOPT_FILE, CURLOPT_WRITEHEADER, CURLOPT_HTTPHEADER,
            CURLOPT_FOLLOWLOCATION, CURLOPT_PROTOCOLS, CURLOPT_REDIR_PROTOCOLS, CURLOPT_USERAGENT,
        ];
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

    private static function positiveNumber(mixed $value): int|float|null
    {
        if (is_string($value) && preg_match('/^([0-9]{1,12}(\.[0-9]*)?|\.[0-9]+)$/', $value)) {
            $value = $value + 0;
        }
        if ((!is_int($value) && !is_float($value)) || !is_finite((float) $value) || $value <= 0) {
            return null;
        }

        return $value;
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

        return strlen($text) > 60 ? substr($text, 0, 60) . '...' : $text;
    }
}
