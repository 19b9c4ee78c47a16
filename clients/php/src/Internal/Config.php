<?php

declare(strict_types=1);

namespace Cvsm\Internal;

use Cvsm\Exception\ConfigurationException;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestFactoryInterface;
use Psr\Log\LoggerInterface;

/**
 * Owns the client's configuration rules: it merges explicit options with the CVSM_*
 * environment variables, applies the defaults and validates every value. It never holds the
 * token or the curl options (which may hold credentials of their own); Config::token() and
 * Config::curlOptions() resolve those separately so they stay out of any printable object.
 *
 * @internal
 */
final class Config
{
    /** A URL's scheme, then its user and password (up to the authority's last "@"). */
    private const USERINFO = '#^([A-Za-z][A-Za-z0-9+.-]*://)[^/?\#]*@#';
    /** The environment read when neither "environment" nor CVSM_ENVIRONMENT says. */
    public const DEFAULT_ENVIRONMENT = \Cvsm\Rules::DEFAULT_ENVIRONMENT;
    /** Seconds a value stays cached by default. */
    public const DEFAULT_CACHE_TTL = \Cvsm\Rules::DEFAULT_CACHE_TTL_SECONDS;
    /** Seconds per HTTP attempt by default. */
    public const DEFAULT_TIMEOUT = \Cvsm\Rules::DEFAULT_TIMEOUT_SECONDS;
    /** Extra attempts after a retryable failure by default. */
    public const DEFAULT_MAX_RETRIES = \Cvsm\Rules::DEFAULT_MAX_RETRIES;
    /** Seconds a value is kept for stale-if-error by default: off. */
    public const DEFAULT_STALE_IF_ERROR = \Cvsm\Rules::DEFAULT_STALE_IF_ERROR_SECONDS;

    /** Lists the option names the client accepts. */
    public const OPTIONS = [
        'token', 'base_url', 'team', 'environment', 'cache_ttl', 'timeout', 'max_retries', 'ca_file', 'curl_options',
        'stale_if_error', 'on_stale', 'logger', 'http_client', 'request_factory', 'live',
    ];

    /** The spellings of CVSM_LIVE (any case) that turn live on, and those that leave it off (rule R16). */
    private const LIVE_ON = \Cvsm\Rules::LIVE_TRUE_WORDS;
    private const LIVE_OFF = \Cvsm\Rules::LIVE_FALSE_WORDS;

    /** The characters trimmed from both ends of a token (rule R6): space, tab, CR, LF. */
    private const TOKEN_TRIM = \Cvsm\Rules::TOKEN_TRIMMED_CHARACTERS;

    /** @var \WeakMap<self, string>|null each Config's base URL as given (see url()) */
    private static ?\WeakMap $urls = null;

    private function __construct(
        /** The base URL as it may be printed: its user and password, if any, as "***" (see url()). */
        public readonly string $baseUrl,
        public readonly string $team,
        public readonly string $environment,
        public readonly int $cacheTtl,
        public readonly int|float $timeout,
        public readonly int $maxRetries,
        public readonly ?string $caFile,
        public readonly int $staleIfError,
        public readonly bool $live = false
    ) {
    }

    /**
     * Resolves every setting but the token, the curl options and the
     * callbacks (on_stale, logger): explicit option first, then the environment variable, then
     * the default. It throws ConfigurationException on a missing base URL or team and on any
     * invalid value.
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

        $baseUrl = self::stringSetting($options, 'base_url', \Cvsm\Rules::ENV_BASE_URL);
        if ($baseUrl === null) {
            throw new ConfigurationException(
                sprintf(\Cvsm\Rules::MESSAGE_NOT_SET, \Cvsm\Rules::ENV_BASE_URL) . ': pass the "base_url" option or set CVSM_BASE_URL (it includes /api/v1)'
            );
        }
        $baseUrl = rtrim($baseUrl, '/');
        if (!preg_match('#^https?://[^/?\#\s]+(/[^?\#\s]*)?$#i', $baseUrl)) {
            throw new ConfigurationException(
                'base_url must be an absolute http:// or https:// URL without query, such as https://cvsm.example.com/api/v1'
            );
        }

        $team = self::stringSetting($options, 'team', \Cvsm\Rules::ENV_TEAM);
        if ($team === null) {
            throw new ConfigurationException(
                sprintf(\Cvsm\Rules::MESSAGE_NOT_SET, \Cvsm\Rules::ENV_TEAM) . ': pass the "team" option or set CVSM_TEAM (a team id or slug)'
            );
        }

        $environment = self::stringSetting($options, 'environment', \Cvsm\Rules::ENV_ENVIRONMENT) ?? self::DEFAULT_ENVIRONMENT;

        $config = new self(
            self::displayUrl($baseUrl),
            $team,
            $environment,
            self::seconds($options, 'cache_ttl', \Cvsm\Rules::ENV_CACHE_TTL, self::DEFAULT_CACHE_TTL, '0 disables the cache'),
            self::timeout($options),
            self::maxRetries($options),
            self::caFile($options),
            self::seconds($options, 'stale_if_error', \Cvsm\Rules::ENV_STALE_IF_ERROR, self::DEFAULT_STALE_IF_ERROR, '0 turns stale-if-error off'),
            self::live($options)
        );
        self::$urls ??= new \WeakMap();
        self::$urls[$config] = $baseUrl;

        return $config;
    }

    /**
     * Returns the base URL requests go to. The baseUrl property holds it as it may be printed
     * (see displayUrl()); the URL itself, which may carry a user and password, lives outside the
     * object's properties, so that var_export, print_r and json_encode never show the password.
     */
    public function url(): string
    {
        return self::$urls[$this] ?? $this->baseUrl;
    }

    /**
     * Returns the URL requests go to: url() without a user and password. The client
     * authenticates with its Bearer token only, so they are never sent (neither in the URL nor
     * as the Basic authorization curl or a PSR-18 client would make of them).
     */
    public function requestUrl(): string
    {
        return (string) preg_replace(self::USERINFO, '$1', $this->url(), 1);
    }

    /**
     * Returns $url as it may be printed: a user and password in it become "***"
     * (https://user:secret@host/api/v1 shows as https://***@host/api/v1, as every SDK prints it).
     */
    public static function displayUrl(string $url): string
    {
        return (string) preg_replace(self::USERINFO, '$1***@', $url, 1);
    }

    /**
     * Resolves "live" (rule R16): the option when given (a bool), else CVSM_LIVE (1, true, yes or
     * on; 0, false, no or off; any case, around spaces), else off. Anything else is a
     * ConfigurationException; live with "http_client" is one too, since the change stream is
     * held open without blocking through ext-curl, which a PSR-18 client cannot do.
     *
     * @param array<string, mixed> $options
     */
    private static function live(#[\SensitiveParameter] array $options): bool
    {
        if (array_key_exists('live', $options) && $options['live'] !== null) {
            if (!is_bool($options['live'])) {
                throw new ConfigurationException('option "live" must be true or false');
            }
            $live = $options['live'];
        } else {
            $raw = self::env(\Cvsm\Rules::ENV_LIVE);
            $word = strtolower(trim((string) $raw));
            $live = match (true) {
                $raw === null, in_array($word, self::LIVE_OFF, true) => false,
                in_array($word, self::LIVE_ON, true) => true,
                default => throw new ConfigurationException('CVSM_LIVE must be 1 or 0 (or true/false, yes/no, on/off)'),
            };
        }
        if ($live && ($options['http_client'] ?? null) !== null) {
            throw new ConfigurationException(
                'live cannot be used with option "http_client": the change stream is held open through ext-curl, without blocking, which a PSR-18 client cannot do'
            );
        }

        return $live;
    }

    /**
     * Returns the token from the "token" option or CVSM_TOKEN without its leading
     * and trailing whitespace (so a token read from a mounted file works). It throws
     * ConfigurationException when neither is set or the token holds a character other than
     * visible ASCII. The message never repeats the token.
     *
     * @param array<string, mixed> $options
     */
    public static function token(#[\SensitiveParameter] array $options): string
    {
        $token = self::stringSetting($options, 'token', \Cvsm\Rules::ENV_TOKEN);
        if ($token === null) {
            throw new ConfigurationException(
                sprintf(\Cvsm\Rules::MESSAGE_NOT_SET, \Cvsm\Rules::ENV_TOKEN) . ': pass the "token" option or set CVSM_TOKEN'
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
     * Splits a token (from Config::token()) into the API token sent as the bearer and, for an
     * end-to-end team's token, its private key (32 raw bytes) and its pin (key version and
     * commitment, 32 raw bytes), or nulls for a token without a dot. It throws
     * ConfigurationException when the token has a dot but is not
     * `cvsm_<64 hex>.<private key>.<key version>.<commitment>` (a token of the first format,
     * without the pin, is one), or when ext-sodium or ext-openssl, which open the values, is
     * missing. The message never repeats the token.
     *
     * @return array{0: string, 1: ?string, 2: ?int, 3: ?string}
     */
    public static function tokenParts(#[\SensitiveParameter] string $token): array
    {
        try {
            [$apiToken, $privateKey, $pinVersion, $pinCommitment] = E2e::splitToken($token);
        } catch (E2eError $e) {
            throw new ConfigurationException(
                'the token has a dot, so it should be an end-to-end team\'s token with its key part, but it is not one: '
                . $e->getMessage() . ' (the whole token as it was shown when it was made)'
            );
        }
        if ($privateKey !== null && (!function_exists('sodium_crypto_scalarmult') || !function_exists('openssl_decrypt'))) {
            throw new ConfigurationException('a token of an end-to-end team needs the PHP extensions sodium and openssl, which open its values');
        }

        return [$apiToken, $privateKey, $pinVersion, $pinCommitment];
    }

    /**
     * Returns the "curl_options" option: CURLOPT_* constants => values that
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
     * Returns the "on_stale" option, a callable that receives a Cvsm\StaleRead
     * each time a kept value is served instead of an error, or null.
     *
     * @param array<string, mixed> $options
     * @return (\Closure(\Cvsm\StaleRead): mixed)|null
     */
    public static function onStale(array $options): ?\Closure
    {
        $onStale = $options['on_stale'] ?? null;
        if ($onStale === null) {
            return null;
        }
        if (!is_callable($onStale)) {
            throw new ConfigurationException('option "on_stale" must be a callable that takes a Cvsm\StaleRead');
        }

        return \Closure::fromCallable($onStale);
    }

    /**
     * Returns the "logger" option, a PSR-3 logger, or null.
     *
     * @param array<string, mixed> $options
     * @throws ConfigurationException when it is not a Psr\Log\LoggerInterface
     */
    public static function logger(array $options): ?LoggerInterface
    {
        $logger = $options['logger'] ?? null;
        if ($logger === null) {
            return null;
        }
        if (!$logger instanceof LoggerInterface) {
            throw new ConfigurationException(sprintf(
                'option "logger" must be a PSR-3 logger (Psr\Log\LoggerInterface), not %s',
                get_debug_type($logger)
            ));
        }

        return $logger;
    }

    /**
     * Returns the sender for the "http_client" option, a PSR-18 client, with the PSR-17 request
     * factory of "request_factory" (or the client itself, when it is one); null without the
     * option. The caller's client owns TLS, proxies and timeouts, so a CA bundle ("ca_file" or
     * CVSM_CA_FILE), a timeout ("timeout" or CVSM_TIMEOUT) or "curl_options" beside it is refused
     * rather than silently ignored.
     *
     * @param array<string, mixed> $options
     * @throws ConfigurationException when an option is of the wrong type or conflicts
     */
    public static function psr18(#[\SensitiveParameter] array $options, ?string $caFile): ?Psr18Sender
    {
        $client = $options['http_client'] ?? null;
        $factory = $options['request_factory'] ?? null;
        if ($client === null) {
            if ($factory !== null) {
                throw new ConfigurationException('option "request_factory" is only used with "http_client"');
            }

            return null;
        }
        if (!$client instanceof ClientInterface) {
            throw new ConfigurationException(sprintf(
                'option "http_client" must be a PSR-18 client (Psr\Http\Client\ClientInterface), not %s',
                get_debug_type($client)
            ));
        }
        $factory ??= $client instanceof RequestFactoryInterface ? $client : null;
        if (!$factory instanceof RequestFactoryInterface) {
            throw new ConfigurationException(
                'option "http_client" needs "request_factory", a PSR-17 request factory (Psr\Http\Message\RequestFactoryInterface), such as GuzzleHttp\Psr7\HttpFactory'
                . ($factory === null ? '' : ', not ' . get_debug_type($factory))
            );
        }
        if (($options['curl_options'] ?? []) !== []) {
            throw new ConfigurationException('option "curl_options" configures the built-in curl transport; with "http_client", configure that client instead');
        }
        if (isset($options['timeout']) || self::env('CVSM_TIMEOUT') !== null) {
            throw new ConfigurationException(sprintf(
                '%s cannot be used with option "http_client": set the timeout on the given client',
                isset($options['timeout']) ? 'timeout' : 'CVSM_TIMEOUT'
            ));
        }
        if ($caFile !== null) {
            $source = isset($options['ca_file']) ? 'ca_file' : 'CVSM_CA_FILE';
            throw new ConfigurationException(sprintf(
                '%s cannot be used with option "http_client": the given client owns its TLS settings',
                $source
            ));
        }

        return new Psr18Sender($client, $factory);
    }

    /**
     * Returns the effective configuration as the option names spell it.
     *
     * @return array{base_url: string, team: string, environment: string, cache_ttl: int, timeout: int|float, max_retries: int, stale_if_error: int}
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
            'stale_if_error' => $this->staleIfError,
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
     * Resolves a setting of whole seconds, 0 or more: the option $key, else the variable
     * $variable, else $default. $zero says what 0 means, for the error message.
     *
     * @param array<string, mixed> $options
     */
    private static function seconds(#[\SensitiveParameter] array $options, string $key, string $variable, int $default, string $zero): int
    {
        $value = $options[$key] ?? null;
        if ($value !== null) {
            $seconds = self::nonNegativeInt($value);
            if ($seconds === null) {
                throw new ConfigurationException(sprintf('option "%s" must be a non-negative integer (seconds; %s)', $key, $zero));
            }

            return $seconds;
        }
        $raw = self::env($variable);
        if ($raw === null) {
            return $default;
        }
        $seconds = self::nonNegativeInt(trim($raw));
        if ($seconds === null) {
            throw new ConfigurationException(sprintf(
                '%s must be a non-negative integer (seconds; %s), got "%s"',
                $variable,
                $zero,
                self::printable($raw)
            ));
        }

        return $seconds;
    }

    /**
     * @param array<string, mixed> $options
     */
    private static function timeout(#[\SensitiveParameter] array $options): int|float
    {
        $value = $options['timeout'] ?? null;
        if ($value === null) {
            $raw = self::env(\Cvsm\Rules::ENV_TIMEOUT);
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
            $raw = self::env(\Cvsm\Rules::ENV_MAX_RETRIES);
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
     * Returns the PEM bundle to trust instead of the system store ("ca_file", then
     * CVSM_CA_FILE), after checking that it can be read and holds a certificate.
     *
     * @param array<string, mixed> $options
     */
    private static function caFile(#[\SensitiveParameter] array $options): ?string
    {
        $path = self::stringSetting($options, 'ca_file', \Cvsm\Rules::ENV_CA_FILE);
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
     * Lists the CURLOPT_* options that "curl_options" may not set.
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

    /** Shortens a user-supplied string for an error message. */
    private static function printable(string $text): string
    {
        $text = preg_replace('/[\x00-\x1f\x7f]/', '?', $text) ?? '';

        return strlen($text) > 60 ? substr($text, 0, 60) . '...' : $text;
    }
}
