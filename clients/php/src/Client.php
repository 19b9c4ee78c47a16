<?php

declare(strict_types=1);

namespace Cvsm;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\DecryptionException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;
use Cvsm\Internal\Cache;
use Cvsm\Internal\Config;
use Cvsm\Internal\E2e;
use Cvsm\Internal\E2eError;
use Cvsm\Internal\HttpTransport;
use Cvsm\Internal\LiveStream;
use Cvsm\Internal\UnreadableResponse;
use Psr\Log\LoggerInterface;

/**
 * Reads secrets of one team and environment from a cvsm server, caches them for a short
 * time, and can inject them into the process environment.
 *
 *     $cvsm = new Cvsm\Client(['token' => getenv('CVSM_TOKEN'), 'team' => getenv('CVSM_TEAM')]);
 *     $dsn = $cvsm->get('DATABASE_URL');
 *
 * The token (with its key part, for an end-to-end team), the team key, the cached values, the
 * callbacks, a live client's change stream and the transport (with its curl options or PSR-18 client) live outside the object's
 * properties, so var_dump, print_r, var_export, json_encode and (array) casts never show them;
 * the client cannot be serialized.
 *
 * A token of an end-to-end team carries its own key and its pin after a dot
 * (`cvsm_<64 hex>.<key>.<key version>.<commitment>`): the client sends only the part before the
 * dot, fetches the team key wrapped to that key once, checks that it chains back to the pinned
 * key version through the team's links, and opens each value locally (see docs/e2e.md, format
 * 2). Nothing else is configured.
 */
class Client
{
    /** The version of this SDK. */
    public const VERSION = '0.1.0';

    /** The User-Agent header sent with every request. */
    public const USER_AGENT = Rules::USER_AGENT_PREFIX . 'php/' . self::VERSION;

    /** A valid secret name (rule R10); anything else is not found without a request. */
    private const SECRET_NAME = '/^' . Rules::SECRET_NAME_PATTERN . '$/D';

    /** A name inject() can put in the environment (rule R8). */
    private const VARIABLE_NAME = '/^' . Rules::VARIABLE_NAME_PATTERN . '$/D';

    /** What a token without its key part gets from an end-to-end team (by name: `"e2e": true`; the export: `Cvsm-E2E: 1`). */
    private const NEEDS_KEY_PART = Rules::MESSAGE_KEYLESS_E2E . ' (cvsm_<64 hex>.<private key>.<key version>.<commitment>, the whole token as it was shown when it was made) to read %s';
    /** The hint of a 400 to the team key's request: a key part used on a plain team. */
    private const NOT_END_TO_END = 'the team is not end-to-end, but the token carries a key part: use the token without it';

    /**
     * The sensitive state of each client (the API token, the token's key part and the team key
     * of an end-to-end team, transport, cache, callbacks, and the names whose stale value was
     * logged), keyed by the client's $key object and so kept out of its properties.
     *
     * @var \WeakMap<object, array{token: string, private_key: ?string, pin: ?array{0: int, 1: string}, team_key: ?array{team_id: string, version: int, keys: array<int, string>, links: array<int, string>}, transport: HttpTransport, cache: Cache, on_stale: ?\Closure, logger: ?LoggerInterface, warned: array<string, true>, live: ?LiveStream, closed: bool}>|null
     */
    private static ?\WeakMap $vault = null;

    /** $key is an empty object that names this client's entry in the vault. */
    private object $key;
    private Config $config;

    /**
     * Builds a client from an options array; every option falls back to its environment
     * variable and then to its default:
     *
     * - token (CVSM_TOKEN, required): an API token, `cvsm_...`; an end-to-end team's token carries
     *   its key part after a dot, `cvsm_<64 hex>.<private key>.<key version>.<commitment>`
     *   (docs/e2e.md, format 2), which never leaves the process (only the part before the dot is
     *   sent); a token of the first format (`cvsm_<64 hex>.<key>`, no pin) is refused
     * - base_url (CVSM_BASE_URL, required): the API root including /api/v1
     * - team (CVSM_TEAM, required): a team id or slug, put in every path as it is
     * - environment (CVSM_ENVIRONMENT, default "production")
     * - cache_ttl (CVSM_CACHE_TTL, default 30): seconds a value stays cached; 0 disables the cache
     * - timeout (CVSM_TIMEOUT, default 10): seconds per HTTP attempt, the whole answer included
     * - max_retries (CVSM_MAX_RETRIES, default 2): extra attempts after a network error, an
     *   unreadable answer or a 502/503/504
     * - ca_file (CVSM_CA_FILE): a PEM bundle of the CAs to trust instead of the system store
     * - curl_options: CURLOPT_* => value, applied to every request after the client's own
     *   settings (the transport seam: proxies, client certificates, DNS, IP version, ...)
     * - http_client: a PSR-18 client (Psr\Http\Client\ClientInterface) that sends the requests
     *   instead of ext-curl; it owns the timeout, proxies and TLS, so "curl_options" and a CA
     *   bundle or "timeout" (or CVSM_TIMEOUT) are refused beside it: set the client's own
     * - request_factory: the PSR-17 request factory (Psr\Http\Message\RequestFactoryInterface)
     *   that builds the requests for "http_client"; not needed when the client is one itself
     * - stale_if_error (CVSM_STALE_IF_ERROR, default 0, off): seconds a cached value is kept after
     *   it stops being fresh, to be returned when a refresh fails with a network error, a 5xx or
     *   a 429 (never a 401 or 403, which empty the cache, nor any other error)
     * - on_stale: a callable that receives a Cvsm\StaleRead each time a kept value is returned
     *   instead of an error
     * - logger: a PSR-3 logger (Psr\Log\LoggerInterface) that gets one warning per secret served
     *   stale; without one the warning goes to error_log()
     *
     * - live (CVSM_LIVE: 1/true/yes/on or 0/false/no/off, any case; default off): keep one
     *   connection to the team's change stream, opened at the first read, so that a value whose
     *   secret changed stops being served from the cache as soon as its event arrives (rule R16).
     *   PHP has no thread to follow it on: every read applies what arrived before it, without
     *   blocking, and a long-running worker calls poll() from its loop (see "Live cache" in the
     *   README). It needs the built-in curl transport (not "http_client")
     *
     * Proxies come from http_proxy, HTTPS_PROXY, no_proxy and the like, read now.
     *
     * @param array{token?: string, base_url?: string, team?: string, environment?: string, cache_ttl?: int, timeout?: int|float, max_retries?: int, ca_file?: string, curl_options?: array<int, mixed>, stale_if_error?: int, on_stale?: callable(StaleRead): mixed, logger?: LoggerInterface, http_client?: \Psr\Http\Client\ClientInterface, request_factory?: \Psr\Http\Message\RequestFactoryInterface, live?: bool} $options
     *        the options above; every one may be left out
     * @throws ConfigurationException when a required setting is missing (the message names its
     *                                variable, such as "CVSM_TOKEN is not set") or a value is
     *                                invalid (a token with a dot that is not an end-to-end
     *                                team's token with its key part is one)
     */
    public function __construct(#[\SensitiveParameter] array $options = [])
    {
        [$token, $privateKey, $pinVersion, $pinCommitment] = Config::tokenParts(Config::token($options));
        $this->config = Config::fromOptions($options);
        $transport = HttpTransport::fromConfig(
            $this->config,
            Config::curlOptions($options),
            Config::psr18($options, $this->config->caFile)
        );
        $onStale = Config::onStale($options);
        $logger = Config::logger($options);
        self::$vault ??= new \WeakMap();
        $this->key = new \stdClass();
        self::$vault[$this->key] = [
            'token' => $token,
            'private_key' => $privateKey,
            'pin' => $privateKey !== null ? [(int) $pinVersion, (string) $pinCommitment] : null,
            'team_key' => null,
            'transport' => $transport,
            'cache' => new Cache($this->config->cacheTtl, $this->config->staleIfError),
            'on_stale' => $onStale,
            'logger' => $logger,
            'warned' => [],
            'live' => null,
            'closed' => false,
        ];
    }

    /**
     * Returns the value of the secret $name in the configured environment. Names are
     * case-sensitive; a cached value is returned without a request while it is fresh, and
     * otherwise one request reads it by name. Only when that answers 404 does a second request
     * (the listing of similar names) tell a missing secret from a wrong base URL or team.
     *
     * With stale_if_error, when that read fails with a network error, a 5xx or a 429, a value
     * fetched less than cache_ttl + stale_if_error seconds ago is returned instead: then the
     * on_stale callback receives a StaleRead and a warning is logged once for the name.
     *
     * With a token of an end-to-end team, the value read is sealed: the first read also fetches
     * the team key wrapped to the token (one more request, and again after clearCache()), and
     * the value is opened for this team, environment and name before it is cached and returned.
     *
     * @throws SecretNotFoundException when the name is absent (status 404), or is not a valid
     *                                 secret name (letters, digits and "_", not starting with a
     *                                 digit, at most 255 characters: then without a request and
     *                                 with status null); when a secret differs only in case,
     *                                 getSuggestion() and the message name it
     * @throws ConfigurationException  when the server says the base URL, team or environment is
     *                                 wrong (rule R9), or the team is end-to-end and the token
     *                                 has no key part
     * @throws DecryptionException     when the value of an end-to-end team does not open
     * @throws CvsmException           on any other failure (see the subclasses)
     */
    public function get(string $name): string
    {
        self::checkName($name);
        $environment = $this->config->environment;
        $key = self::valueKey($environment, $name);
        $this->pumpLive();
        $fresh = $this->cache()->fresh($key);
        if ($fresh !== null) {
            return $fresh;
        }

        try {
            [$value, $version] = $this->readByName($name, $environment);
        } catch (SecretNotFoundException $e) {
            throw $this->notFound($environment, $name, $e);
        } catch (CvsmException $e) {
            /** @var string */
            return $this->kept($key, $e, $name);
        }
        $this->store($name, $value, $version);

        return $value;
    }

    /**
     * Reads the secret $name now, past the cache, for the pattern "my database login failed:
     * fetch the credential again once" (rule R17): the same request, errors, retries and
     * not-found listing as get(), but never answered from the cache and never with a kept value
     * (stale_if_error does not apply: the caller asked for the current value). Without
     * $environment, or with the client's own, the cache then holds the value read; another
     * environment's value is returned and not cached.
     *
     *     try {
     *         $pdo = new PDO($dsn, 'app', $cvsm->get('DB_PASSWORD'));
     *     } catch (PDOException $e) {
     *         $pdo = new PDO($dsn, 'app', $cvsm->refresh('DB_PASSWORD')); // once, then give up
     *     }
     *
     * @throws SecretNotFoundException as get() does
     * @throws ConfigurationException  as get() does, and when $environment is ""
     * @throws DecryptionException     as get() does
     * @throws CvsmException           on any other failure, never answered by a kept value
     */
    public function refresh(string $name, ?string $environment = null): string
    {
        if ($environment === '') {
            throw new ConfigurationException('refresh: the environment must be a non-empty string, or null for the client\'s own');
        }
        $own = $this->config->environment;
        $environment ??= $own;
        self::checkName($name);
        $this->pumpLive();
        try {
            [$value, $version] = $this->readByName($name, $environment);
        } catch (SecretNotFoundException $e) {
            throw $this->notFound($environment, $name, $e);
        }
        if ($environment === $own) {
            $this->store($name, $value, $version);
        }

        return $value;
    }

    /**
     * Lets a live client's change stream work for up to $seconds (a long-running worker calls it
     * from its loop; see "Live cache" in the README): it applies the changes that arrived,
     * reconnects when its pause is over, and returns as soon as it applied an event, or when
     * $seconds have passed (0: without waiting at all). Returns the number of events applied.
     * Without live, before the first read opened the stream, or after close(), it only waits
     * $seconds. get(), getAll() and refresh() pump the stream the same way, without waiting,
     * before they look at the cache.
     */
    public function poll(float $seconds = 0.0): int
    {
        if ($this->liveStream() === null) {
            if ($seconds > 0) {
                usleep((int) round($seconds * 1_000_000));
            }

            return 0;
        }

        return $this->pumpLive($seconds);
    }

    /** Tells whether the client was built with live (option "live" or CVSM_LIVE). */
    public function isLive(): bool
    {
        return $this->config->live;
    }

    /** Tells whether a live client's change stream is up now: connected and its snapshot taken. */
    public function isLiveConnected(): bool
    {
        return $this->liveStream()?->isConnected() ?? false;
    }

    /**
     * Ends a live client's change stream (its connection is closed and not opened again); the
     * client then reads as without live. Destroying the client does the same. Nothing without live.
     */
    public function close(): void
    {
        $state = self::$vault[$this->key];
        $state['live']?->close();
        $state['closed'] = true;
        self::$vault[$this->key] = $state;
    }

    /** Ends a live client's change stream when the client goes away, as close() does. */
    public function __destruct()
    {
        if (isset($this->key) && self::$vault !== null && isset(self::$vault[$this->key])) {
            self::$vault[$this->key]['live']?->close();
        }
    }

    /**
     * Returns every secret of the configured environment as name => value, through the
     * export endpoint. The result is cached as a whole and also fills the per-name cache, so a
     * get() that follows makes no request. With stale_if_error, a failed refresh returns the
     * kept result as get() does. With a token of an end-to-end team, every value is opened as
     * get() opens one (the team key is fetched once), and the opened values are cached. A token
     * without its key part gets, for an export the server marks end-to-end (`Cvsm-E2E: 1`), the
     * ConfigurationException get() throws for such a team, and nothing is cached.
     *
     * @return array<string, string>
     * @throws ConfigurationException when the team is end-to-end and the token has no key part
     * @throws DecryptionException    when a value of an end-to-end team does not open
     * @throws CvsmException
     */
    public function getAll(): array
    {
        $environment = $this->config->environment;
        $key = self::allKey($environment);
        $this->pumpLive();
        $cache = $this->cache();
        $fresh = $cache->fresh($key);
        if ($fresh !== null) {
            return $fresh;
        }

        $keyless = self::$vault[$this->key]['private_key'] === null;
        try {
            /** @var array<string, string> $values */
            $values = $this->request(
                $this->teamPath() . '/secrets/export',
                ['format' => 'json', 'environment' => $environment],
                static function (mixed $answer, array $headers) use ($keyless, $environment): array {
                    // The export's {NAME: value} has no room for "e2e": the header marks its envelopes.
                    if ($keyless && trim($headers['cvsm-e2e'] ?? '') === '1') {
                        throw new ConfigurationException(sprintf(self::NEEDS_KEY_PART, 'the secrets of ' . $environment));
                    }
                    if (!is_object($answer)) {
                        throw new UnreadableResponse('the export is not a JSON object');
                    }
                    $values = get_object_vars($answer);
                    foreach ($values as $value) {
                        if (!is_string($value)) {
                            throw new UnreadableResponse('a value of the export is not a string');
                        }
                    }

                    return $values;
                },
                [400 => HttpTransport::CHECK_ENVIRONMENT, 404 => HttpTransport::CHECK_TEAM],
                $requestId
            );
            if (!$keyless) {
                $values = $this->open($values, $environment, null, $requestId);
            }
        } catch (CvsmException $e) {
            /** @var array<string, string> */
            return $this->kept($key, $e, null);
        }
        ksort($values, SORT_STRING);

        $cache->put($key, $values);
        $this->forgetWarning($key);
        $live = $this->liveStream();
        foreach ($values as $name => $value) {
            $cache->put(self::valueKey($environment, (string) $name), $value, $live?->latestVersion((string) $name));
            $this->forgetWarning(self::valueKey($environment, (string) $name));
        }

        return $values;
    }

    /**
     * Fetches every secret with getAll() and sets each one in the process environment
     * (putenv, $_ENV and $_SERVER). A variable that is already set is kept unless $overwrite is
     * true. It returns the names it set, sorted.
     *
     * It is all or nothing: before setting anything it checks every name (a variable name:
     * letters, digits and "_", not starting with a digit) and every value (no NUL character,
     * which no environment can hold); one that fails throws ConfigurationException naming the
     * secret, never its value, and nothing is set.
     *
     * @return list<string>
     * @throws ConfigurationException when a secret cannot be put in the environment
     * @throws CvsmException
     */
    public function inject(bool $overwrite = false): array
    {
        $values = $this->getAll();
        foreach ($values as $name => $value) {
            $name = (string) $name;
            if (!preg_match(self::VARIABLE_NAME, $name)) {
                throw new ConfigurationException(sprintf(
                    'secret "%s" cannot be put in the environment: its name is not a variable name (letters, digits and "_", not starting with a digit); nothing was set',
                    self::printable($name)
                ));
            }
            if (str_contains($value, "\0")) {
                throw new ConfigurationException(sprintf(
                    'secret "%s" cannot be put in the environment: its value holds a NUL character; nothing was set',
                    $name
                ));
            }
        }

        $set = [];
        foreach ($values as $name => $value) {
            $name = (string) $name;
            if (!$overwrite && getenv($name) !== false) {
                continue;
            }
            if (!putenv($name . '=' . $value)) {
                continue; // checked above, so never expected; never report such a name as set
            }
            $_ENV[$name] = $value;
            $_SERVER[$name] = $value;
            $set[] = $name;
        }
        sort($set, SORT_STRING);

        return $set;
    }

    /**
     * Forgets every cached value, the ones kept for stale_if_error included, so the
     * next get() or getAll() asks the server and has nothing to fall back on; for an end-to-end
     * team it forgets the team key too, which the next read fetches again.
     */
    public function clearCache(): void
    {
        $state = self::$vault[$this->key];
        $state['cache']->clear();
        $state['team_key'] = null;
        $state['warned'] = [];
        self::$vault[$this->key] = $state;
    }

    /** Returns the API root the client talks to, without a trailing slash. */
    public function getBaseUrl(): string
    {
        return $this->config->url();
    }

    /** Returns the team as configured: an id, or a slug. */
    public function getTeam(): string
    {
        return $this->config->team;
    }

    /** Returns the environment the client reads (default "production"). */
    public function getEnvironment(): string
    {
        return $this->config->environment;
    }

    /** Returns how many seconds a value stays cached; 0 means no cache. */
    public function getCacheTtl(): int
    {
        return $this->config->cacheTtl;
    }

    /** Returns the timeout of each HTTP attempt, in seconds. */
    public function getTimeout(): int|float
    {
        return $this->config->timeout;
    }

    /** Returns how many extra attempts a failed GET may make. */
    public function getMaxRetries(): int
    {
        return $this->config->maxRetries;
    }

    /**
     * Returns how many seconds a cached value is kept after it stops being
     * fresh, to be returned when a refresh fails; 0 means never.
     */
    public function getStaleIfError(): int
    {
        return $this->config->staleIfError;
    }

    /** Returns the PEM bundle trusted instead of the system store, or null. */
    public function getCaFile(): ?string
    {
        return $this->config->caFile;
    }

    /**
     * Returns the effective configuration (never the token): base_url (a user and password
     * in it shown as "***", as getBaseUrl() does not), team, environment, cache_ttl, timeout,
     * max_retries, stale_if_error.
     *
     * @return array{base_url: string, team: string, environment: string, cache_ttl: int, timeout: int|float, max_retries: int, stale_if_error: int}
     */
    public function getConfig(): array
    {
        return $this->config->toArray();
    }

    /**
     * What var_dump and print_r show: the configuration and cache size, with the
     * token redacted and no values.
     *
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return $this->config->toArray() + [
            'ca_file' => $this->config->caFile,
            'token' => '[redacted]',
            'cached_values' => self::$vault[$this->key]['cache']->count(),
        ];
    }

    /**
     * Gives the copy the same token and callbacks and an empty cache of its own (without the
     * team key of an end-to-end team, which it fetches again).
     */
    public function __clone()
    {
        $state = self::$vault[$this->key];
        $this->key = new \stdClass();
        $state['cache'] = new Cache($this->config->cacheTtl, $this->config->staleIfError);
        $state['team_key'] = null;
        $state['warned'] = [];
        $state['live'] = null; // the copy opens a stream of its own at its first read
        $state['closed'] = false;
        self::$vault[$this->key] = $state;
    }

    /**
     * Refuses: a client holds a credential and must be rebuilt from configuration.
     *
     * @return array<mixed>
     */
    public function __serialize(): array
    {
        throw new \LogicException('a Cvsm\Client cannot be serialized; build a new one from its configuration');
    }

    /**
     * Refuses, as __serialize does.
     *
     * @param array<mixed> $data
     */
    public function __unserialize(array $data): void
    {
        throw new \LogicException('a Cvsm\Client cannot be unserialized; build a new one from its configuration');
    }

    /**
     * Performs an authenticated GET of $path under the base URL and returns what $read
     * makes of the answer (see HttpTransport::getJson). An authentication or permission error
     * (401, 403) empties the whole cache before it propagates, so a revoked token or a withdrawn
     * permission stops reading at once.
     *
     * @param array<string, string> $query
     * @param callable(mixed, array<string, string>): mixed $read receives the answer and its headers
     * @param array<int, string> $misconfigured status => hint, for the statuses that mean a wrong
     *                                          configuration (see HttpTransport::getJson)
     * @param-out string|null $requestId the X-Request-Id of the answer read
     */
    private function request(string $path, array $query, callable $read, array $misconfigured = [], ?string &$requestId = null): mixed
    {
        $url = $this->config->requestUrl() . $path;
        if ($query !== []) {
            $url .= '?' . http_build_query($query, '', '&', PHP_QUERY_RFC3986);
        }
        $state = self::$vault[$this->key];
        try {
            return $state['transport']->getJson($url, $path, $state['token'], $read, $misconfigured, $requestId);
        } catch (AuthenticationException|PermissionDeniedException $e) {
            // Never stale: kept values go too, so a revoked token stops reading at once (R14).
            $this->clearCache();
            throw $e;
        }
    }

    /**
     * Decides what a 404 to the by-name read means, through the listing of the names
     * like $name: when the listing answers, the secret is absent and the error is $byName's
     * not-found (status 404, its request id), suggesting a name that differs only in case; a
     * 404 or 400 to the listing means the base URL, team or environment is wrong (rule R9) and
     * is thrown as the ConfigurationException it is.
     *
     * @throws CvsmException
     */
    private function notFound(string $environment, string $name, SecretNotFoundException $byName): SecretNotFoundException
    {
        /** @var list<mixed> $secrets */
        $secrets = $this->request(
            $this->teamPath() . '/secrets',
            ['environment' => $environment, 'search' => $name],
            static fn (mixed $answer): array => is_object($answer) && is_array($answer->secrets ?? null)
                ? $answer->secrets
                : throw new UnreadableResponse('no "secrets" list'),
            [400 => HttpTransport::CHECK_ENVIRONMENT, 404 => HttpTransport::CHECK_TEAM]
        );

        $suggestion = null;
        foreach ($secrets as $secret) {
            if (!is_object($secret) || !is_string($secret->name ?? null)) {
                continue;
            }
            if (isset($secret->environment) && $secret->environment !== $environment) {
                continue;
            }
            if ($secret->name !== $name && strcasecmp($secret->name, $name) === 0) {
                $suggestion = $secret->name;
                break;
            }
        }
        $message = sprintf('secret "%s" not found in %s', $name, $environment);
        if ($suggestion !== null) {
            $message .= sprintf(Rules::MESSAGE_DID_YOU_MEAN, $suggestion);
        }

        return new SecretNotFoundException($message, 404, $name, $suggestion, null, $byName->getRequestId());
    }

    /**
     * Opens the sealed values of an end-to-end team, name => envelope, read for $environment
     * (for get(), $requested is the name asked for). The team keys are the ones held (verified
     * against the token's pin), or are fetched when none are held or when an envelope names a key
     * version above the held current one, at most once per call; a key version below those held
     * is reached through the verified links (docs/e2e.md, "Walking a chain"). An envelope whose
     * key version the fetched keys do not reach, a wrap, a chain or a value that does not open or
     * verify throws DecryptionException, which names the secret, never a value or a key, and
     * carries the request id of the answer that carried the value ($requestId), or of the key's
     * answer when the wrap or the chain fails.
     *
     * @param array<string, string> $sealed
     * @return array<string, string>
     * @throws CvsmException
     */
    private function open(#[\SensitiveParameter] array $sealed, string $environment, ?string $requested, ?string $requestId): array
    {
        $fetched = false;
        $opened = [];
        foreach ($sealed as $name => $envelope) {
            $name = (string) $name;
            try {
                $version = E2e::keyVersion($envelope);
            } catch (E2eError $e) {
                throw self::undecryptable($name, $environment, $e, $requestId);
            }
            $teamKey = self::$vault[$this->key]['team_key'];
            if (($teamKey === null || $version > $teamKey['version']) && !$fetched) {
                $teamKey = $this->fetchTeamKey($requested);
                $fetched = true;
            }
            if ($teamKey === null || $version > $teamKey['version']) {
                throw self::undecryptable($name, $environment, new E2eError(sprintf(
                    'it was sealed under key version %d, and the key wrapped to this token is version %d',
                    $version,
                    $teamKey['version'] ?? 0
                )), $requestId);
            }
            try {
                $opened[$name] = E2e::openValue($envelope, $this->keyOfVersion($version), $teamKey['team_id'], $environment, $name);
            } catch (E2eError $e) {
                throw self::undecryptable($name, $environment, $e, $requestId);
            }
        }

        return $opened;
    }

    /**
     * Returns the held team key of $version (at most the held current one): a verified key, or
     * one reached from the lowest verified key by walking its links on down, which are then kept
     * too.
     *
     * @throws E2eError when a link on the way is missing or does not open
     */
    private function keyOfVersion(int $version): string
    {
        $state = self::$vault[$this->key];
        $teamKey = $state['team_key'];
        \assert($teamKey !== null);
        if ($version < 1) {
            throw new E2eError('a key version starts at 1');
        }
        $lowest = min(array_keys($teamKey['keys']));
        if ($version < $lowest) {
            $lowestKey = $teamKey['keys'][$lowest];
            $teamKey['keys'] += E2e::verifyChain(
                $lowestKey,
                $lowest,
                $teamKey['team_id'],
                $teamKey['links'],
                $lowest,
                E2e::commitment($lowestKey, $teamKey['team_id'], $lowest),
                $version
            );
            $state['team_key'] = $teamKey;
            self::$vault[$this->key] = $state;
        }

        return $teamKey['keys'][$version];
    }

    /**
     * Fetches the team key wrapped to this token (`GET /teams/{team}/e2e/key`, with the
     * retries and error types of every read: 401 and 403 empty the cache, a 404 means a wrong
     * base URL or team, a 400 a team that is not end-to-end), unwraps it with the token's key part,
     * checks that the answer's links chain it back to the token's pin (docs/e2e.md, format 2) and
     * holds the verified keys until clearCache(). $requested names the secret being read, for the
     * error; a wrap that does not open or a chain that does not verify throws
     * DecryptionException with the key answer's request id, and nothing is kept.
     *
     * @return array{team_id: string, version: int, keys: array<int, string>, links: array<int, string>}
     * @throws CvsmException
     */
    private function fetchTeamKey(?string $requested): array
    {
        /** @var array{0: string, 1: int, 2: string, 3: mixed} $answer */
        $answer = $this->request(
            $this->teamPath() . '/e2e/key',
            [],
            static fn (mixed $answer): array => is_object($answer) && is_string($answer->team_id ?? null)
                && is_int($answer->key_version ?? null) && $answer->key_version >= 1 && is_string($answer->wrapped_key ?? null)
                ? [$answer->team_id, $answer->key_version, $answer->wrapped_key, $answer->links ?? null]
                : throw new UnreadableResponse('not {"team_id": "...", "key_version": <int>, "wrapped_key": "...", "links": [...]}'),
            [400 => self::NOT_END_TO_END, 404 => HttpTransport::CHECK_TEAM],
            $requestId
        );
        [$teamId, $version, $wrapped, $rawLinks] = $answer;
        $state = self::$vault[$this->key];
        [$pinVersion, $pinCommitment] = $state['pin'] ?? [0, ''];
        $opening = true;
        try {
            $key = E2e::unwrapTeamKey($wrapped, $teamId, $version, (string) $state['private_key']);
            $opening = false;
            $links = self::links($rawLinks);
            $keys = E2e::verifyChain($key, $version, $teamId, $links, $pinVersion, $pinCommitment);
        } catch (E2eError $e) {
            throw new DecryptionException(
                sprintf(
                    $opening
                        ? '%sthe team key wrapped to this token cannot be opened with the token\'s key part: %s'
                        : '%sthe team key sent for this token (key version ' . $version . ') is not one a team member made for it: %s',
                    $requested !== null ? sprintf('secret "%s" in %s cannot be decrypted: ', $requested, $this->config->environment) : '',
                    $e->getMessage()
                ),
                $requested,
                null,
                $requestId
            );
        }
        $state['team_key'] = ['team_id' => $teamId, 'version' => $version, 'keys' => $keys, 'links' => $links];
        self::$vault[$this->key] = $state;

        return $state['team_key'];
    }

    /**
     * Returns the links of a key answer, key version => `cvsm-link1.…` (none when the answer has
     * none or null, as a server of the first format answers: the chain check then decides). Every
     * link is checked, needed or not: a malformed one makes the answer unusable.
     *
     * @return array<int, string>
     * @throws E2eError when "links" is not a list of {"key_version": <int, 2 or more, once>,
     *                  "link": "cvsm-link1.<nonce>.<ct>"}
     */
    private static function links(mixed $links): array
    {
        if ($links === null) {
            return [];
        }
        if (!is_array($links)) {
            throw new E2eError('the links of the key answer are not a list');
        }
        $byVersion = [];
        foreach ($links as $item) {
            if (!is_object($item) || !is_int($item->key_version ?? null) || $item->key_version < 2
                || isset($byVersion[$item->key_version]) || !is_string($item->link ?? null)) {
                throw new E2eError('the links of the key answer are not [{key_version, link}, ...]');
            }
            E2e::parseLink($item->link, $item->key_version);
            $byVersion[$item->key_version] = $item->link;
        }

        return $byVersion;
    }

    /**
     * Returns the DecryptionException for secret $name, whose value did not open; $requestId is
     * that of the answer that carried the value.
     */
    private static function undecryptable(string $name, string $environment, E2eError $why, ?string $requestId): DecryptionException
    {
        return new DecryptionException(
            sprintf('secret "%s" in %s cannot be decrypted: %s', $name, $environment, $why->getMessage()),
            $name,
            null,
            $requestId
        );
    }

    /** Returns /teams/{team}: the configured id or slug as it is, percent-encoded. */
    private function teamPath(): string
    {
        return '/teams/' . rawurlencode($this->config->team);
    }

    /**
     * Returns the value kept under $key in place of $error, when stale-if-error allows it:
     * $error is a network error (after the retries, an unreadable answer included), a 5xx (after
     * the retries) or a 429, and the value is younger than cache_ttl + stale_if_error. Then the
     * on_stale callback receives a StaleRead and, the first time for $key since it was last read
     * fresh, a warning is logged. Otherwise it throws $error.
     *
     * @throws CvsmException $error
     */
    private function kept(string $key, CvsmException $error, ?string $name): mixed
    {
        $servesStale = $error instanceof NetworkException
            || $error instanceof RateLimitException
            || ($error instanceof ApiException && $error->getStatus() >= 500);
        $kept = $servesStale ? $this->cache()->kept($key) : null;
        if ($kept === null) {
            throw $error;
        }
        [$value, $age] = $kept;
        $read = new StaleRead($name, $this->config->environment, $error, $age);
        $this->warnOnce($key, $read);
        $onStale = self::$vault[$this->key]['on_stale'];
        if ($onStale !== null) {
            $onStale($read);
        }

        return $value;
    }

    /**
     * Logs that $read served a stale value, once for $key until it is read fresh again
     * or the cache is cleared: through the logger option (PSR-3 warning()), else error_log(). The
     * warning names the secret and the error, never the value.
     */
    private function warnOnce(string $key, StaleRead $read): void
    {
        $state = self::$vault[$this->key];
        if (isset($state['warned'][$key])) {
            return;
        }
        $state['warned'][$key] = true;
        self::$vault[$this->key] = $state;

        $error = $read->error;
        $kind = match (true) {
            $error instanceof RateLimitException => 'rate limited (HTTP 429)',
            $error instanceof ApiException => 'HTTP ' . $error->getStatus(),
            default => 'network error',
        };
        $what = $read->name !== null
            ? sprintf('the stale value of secret "%s" in %s', $read->name, $read->environment)
            : sprintf('the stale values of every secret in %s (getAll)', $read->environment);
        $message = sprintf(
            'cvsm: serving %s, fetched %d s ago: the refresh failed with %s (%s): %s',
            $what,
            (int) $read->age,
            $kind,
            (new \ReflectionClass($error))->getShortName(),
            $error->getMessage()
        );
        $logger = $state['logger'];
        if ($logger === null) {
            error_log($message);

            return;
        }
        $logger->warning($message, [
            'secret' => $read->name,
            'environment' => $read->environment,
            'age' => $read->age,
            'error' => $kind,
            'request_id' => $error->getRequestId(),
            'exception' => $error,
        ]);
    }

    /** Lets the next stale value under $key be logged again: it was read fresh. */
    private function forgetWarning(string $key): void
    {
        if (isset(self::$vault[$this->key]['warned'][$key])) {
            $state = self::$vault[$this->key];
            unset($state['warned'][$key]);
            self::$vault[$this->key] = $state;
        }
    }

    private function cache(): Cache
    {
        return self::$vault[$this->key]['cache'];
    }

    /** Names the cache entry of one secret: per environment and name. */
    private static function valueKey(string $environment, string $name): string
    {
        return Cache::valueKey($environment, $name);
    }

    /** Names the cache entry of getAll()'s whole result for an environment. */
    private static function allKey(string $environment): string
    {
        return Cache::allKey($environment);
    }

    /**
     * Pumps a live client's change stream without blocking (opening it at the first read), so
     * that what arrived before a read is applied before the cache answers it; empties the cache
     * when the stream was refused (401, 403) or ended with a refusal. Nothing without live.
     */
    private function pumpLive(float $wait = 0.0): int
    {
        $live = $this->liveStream(true);
        if ($live === null) {
            return 0;
        }
        $applied = $live->pump($wait);
        if ($live->takeForget()) {
            $this->clearCache();
        }

        return $applied;
    }

    /** Returns the change stream of a live client, made when $open and none is (not after close()); else null. */
    private function liveStream(bool $open = false): ?LiveStream
    {
        $state = self::$vault[$this->key];
        if ($state['live'] !== null || !$open || !$this->config->live || $state['closed']) {
            return $state['live'];
        }
        $logger = $state['logger'];
        $log = static function (string $level, string $message) use ($logger): void {
            if ($logger !== null) {
                $logger->log($level, $message);
            } elseif ($level === 'warning') {
                error_log($message);
            }
        };
        $state['live'] = new LiveStream(
            $state['transport'],
            $this->config->requestUrl() . $this->teamPath() . '/secrets/changes?' . http_build_query(['environment' => $this->config->environment], '', '&', PHP_QUERY_RFC3986),
            $state['token'],
            $state['cache'],
            $this->config->environment,
            sprintf('team "%s", environment "%s"', self::printable($this->config->team), self::printable($this->config->environment)),
            $log
        );
        self::$vault[$this->key] = $state;

        return $state['live'];
    }

    /**
     * Reads $name by name in $environment (opening an end-to-end team's envelope) and returns
     * [value, the secret's version when the answer says it]; a 404 throws the
     * SecretNotFoundException that notFound() then decides.
     *
     * @return array{0: string, 1: ?int}
     * @throws CvsmException
     */
    private function readByName(string $name, string $environment): array
    {
        /** @var array{0: string, 1: bool, 2: ?int} $answer */
        $answer = $this->request(
            $this->teamPath() . '/secrets/by-name/' . rawurlencode($name),
            ['environment' => $environment],
            static fn (mixed $answer): array => is_object($answer) && is_object($answer->secret ?? null) && is_string($answer->value ?? null)
                ? [$answer->value, ($answer->secret->e2e ?? $answer->e2e ?? false) === true, is_int($answer->secret->version ?? null) ? $answer->secret->version : null]
                : throw new UnreadableResponse('not {"secret": {...}, "value": "..."}'),
            [400 => HttpTransport::CHECK_ENVIRONMENT],
            $requestId
        );
        [$value, $sealed, $version] = $answer;
        if (self::$vault[$this->key]['private_key'] !== null) {
            $value = $this->open([$name => $value], $environment, $name, $requestId)[$name];
        } elseif ($sealed) {
            throw new ConfigurationException(sprintf(self::NEEDS_KEY_PART, sprintf('secret "%s"', $name)));
        }

        return [$value, $version];
    }

    /**
     * Caches $value of $name (the client's environment) read at $version, unless a live
     * client's stream already announced a newer version than the answer's.
     */
    private function store(string $name, #[\SensitiveParameter] string $value, ?int $version): void
    {
        $latest = $this->liveStream()?->latestVersion($name);
        if ($version !== null && $latest !== null && $version < $latest) {
            return;
        }
        $key = self::valueKey($this->config->environment, $name);
        $this->cache()->put($key, $value, $version);
        $this->forgetWarning($key);
    }

    /**
     * Throws the not-found error of a name that is not a valid secret name, without a request
     * (rule R10).
     *
     * @throws SecretNotFoundException
     */
    private static function checkName(string $name): void
    {
        if (!preg_match(self::SECRET_NAME, $name)) {
            throw new SecretNotFoundException(
                sprintf(Rules::MESSAGE_INVALID_SECRET_NAME, '"' . self::printable($name) . '"'),
                null,
                $name
            );
        }
    }

    /** Shortens a name for an error message and hides its control characters. */
    private static function printable(string $name): string
    {
        $name = preg_replace('/[\x00-\x1f\x7f]/', '?', $name) ?? '';

        return strlen($name) > 80 ? substr($name, 0, 80) . '...' : $name;
    }
}
