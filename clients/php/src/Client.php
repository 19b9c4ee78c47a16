<?php

declare(strict_types=1);

namespace Cvsm;

use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\SecretNotFoundException;
use Cvsm\Internal\Config;
use Cvsm\Internal\HttpTransport;
use Cvsm\Internal\UnreadableResponse;

/**
 * Client reads secrets of one team and environment from a cvsm server, caches them for a short
 * time, and can inject them into the process environment.
 *
 *     $cvsm = new Cvsm\Client(['token' => getenv('CVSM_TOKEN'), 'team' => 'acme']);
 *     $dsn = $cvsm->get('DATABASE_URL');
 *
 * The token, the cached values and the transport (with its curl options) live outside the
 * object's properties, so var_dump, print_r, var_export, json_encode and (array) casts never show
 * them; the client cannot be serialized.
 */
class Client
{
    /** Client::VERSION is the version of this SDK. */
    public const VERSION = '0.1.0';

    /** Client::USER_AGENT is the User-Agent header sent with every request. */
    public const USER_AGENT = 'cvsm-php/' . self::VERSION;

    private const UUID = '/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/iD';

    /** A valid secret name (rule R10); anything else is not found without a request. */
    private const SECRET_NAME = '/^[A-Za-z_][A-Za-z0-9_]{0,254}$/D';

    /** A name inject() can put in the environment (rule R8). */
    private const VARIABLE_NAME = '/^[A-Za-z_][A-Za-z0-9_]*$/D';

    /**
     * The sensitive state of each client (token, transport, cached values, resolved team id),
     * keyed by the client's $key object and so kept out of its properties.
     *
     * @var \WeakMap<object, array{token: string, transport: HttpTransport, values: array<string, array{0: string, 1: int}>, all: array<string, array{0: array<string, string>, 1: int}>, team_id: ?string}>|null
     */
    private static ?\WeakMap $vault = null;

    /** $key is an empty object that names this client's entry in the vault. */
    private object $key;
    private Config $config;

    /**
     * Client builds a client from an options array; every option falls back to its environment
     * variable and then to its default:
     *
     * - token (CVSM_TOKEN, required): an API token, `cvsm_...`
     * - base_url (CVSM_BASE_URL, required): the API root including /api/v1
     * - team (CVSM_TEAM, required): a team id, or a slug resolved once through GET /teams
     * - environment (CVSM_ENVIRONMENT, default "production")
     * - cache_ttl (CVSM_CACHE_TTL, default 30): seconds a value stays cached; 0 disables the cache
     * - timeout (CVSM_TIMEOUT, default 10): seconds per HTTP attempt, the whole answer included
     * - max_retries (CVSM_MAX_RETRIES, default 2): extra attempts after a network error, an
     *   unreadable answer or a 502/503/504
     * - ca_file (CVSM_CA_FILE): a PEM bundle of the CAs to trust instead of the system store
     * - curl_options: CURLOPT_* => value, applied to every request after the client's own
     *   settings (the transport seam: proxies, client certificates, DNS, IP version, ...)
     *
     * Proxies come from http_proxy, HTTPS_PROXY, no_proxy and the like, read now.
     *
     * @param array{token?: string, base_url?: string, team?: string, environment?: string, cache_ttl?: int, timeout?: int|float, max_retries?: int, ca_file?: string, curl_options?: array<int, mixed>} $options
     * @throws ConfigurationException when a required setting is missing (the message names its
     *                                variable, such as "CVSM_TOKEN is not set") or a value is invalid
     */
    public function __construct(#[\SensitiveParameter] array $options = [])
    {
        $token = Config::token($options);
        $this->config = Config::fromOptions($options);
        $transport = HttpTransport::fromConfig($this->config, Config::curlOptions($options));
        self::$vault ??= new \WeakMap();
        $this->key = new \stdClass();
        self::$vault[$this->key] = ['token' => $token, 'transport' => $transport, 'values' => [], 'all' => [], 'team_id' => null];
    }

    /**
     * get returns the value of the secret $name in the configured environment. Names are
     * case-sensitive; a cached value is returned without a request while it is fresh.
     *
     * @throws SecretNotFoundException when the name is absent, or is not a valid secret name
     *                                 (letters, digits and "_", not starting with a digit, at most
     *                                 255 characters: then without a request); when a secret
     *                                 differs only in case, getSuggestion() and the message name it
     * @throws CvsmException           on any other failure (see the subclasses)
     */
    public function get(string $name): string
    {
        if (!preg_match(self::SECRET_NAME, $name)) {
            throw new SecretNotFoundException(
                sprintf('secret name "%s" is not valid: use letters, digits and "_", not starting with a digit, at most 255 characters', self::printable($name)),
                null,
                $name
            );
        }
        $environment = $this->config->environment;
        $cached = $this->cachedValue($environment, $name);
        if ($cached !== null) {
            return $cached;
        }

        $teamPath = '/teams/' . rawurlencode($this->teamId());
        $listingId = null;
        /** @var list<mixed> $secrets */
        $secrets = $this->request(
            $teamPath . '/secrets',
            ['environment' => $environment, 'search' => $name],
            static fn (mixed $answer): array => is_object($answer) && is_array($answer->secrets ?? null)
                ? $answer->secrets
                : throw new UnreadableResponse('no "secrets" list'),
            [400, 404],
            $listingId
        );

        $id = null;
        $suggestion = null;
        foreach ($secrets as $secret) {
            if (!is_object($secret) || !is_string($secret->name ?? null)) {
                continue;
            }
            if (isset($secret->environment) && $secret->environment !== $environment) {
                continue;
            }
            if ($secret->name === $name && (is_string($secret->id ?? null) || is_int($secret->id ?? null))) {
                $id = (string) $secret->id;
                break;
            }
            if ($suggestion === null && strcasecmp($secret->name, $name) === 0) {
                $suggestion = $secret->name;
            }
        }
        if ($id === null) {
            $message = sprintf('secret "%s" not found in %s', $name, $environment);
            if ($suggestion !== null) {
                $message .= sprintf('; did you mean "%s"?', $suggestion);
            }
            throw new SecretNotFoundException($message, null, $name, $suggestion, null, $listingId);
        }

        /** @var string $value */
        $value = $this->request(
            $teamPath . '/secrets/' . rawurlencode($id),
            [],
            static fn (mixed $answer): string => is_object($answer) && is_string($answer->value ?? null)
                ? $answer->value
                : throw new UnreadableResponse('no string "value"')
        );
        $this->storeValue($environment, $name, $value);

        return $value;
    }

    /**
     * getAll returns every secret of the configured environment as name => value, through the
     * export endpoint. The result is cached as a whole and also fills the per-name cache, so a
     * get() that follows makes no request.
     *
     * @return array<string, string>
     * @throws CvsmException
     */
    public function getAll(): array
    {
        $environment = $this->config->environment;
        $ttl = $this->config->cacheTtl;
        if ($ttl > 0) {
            $entry = self::$vault[$this->key]['all'][$environment] ?? null;
            if ($entry !== null && $entry[1] > hrtime(true)) {
                return $entry[0];
            }
        }

        $teamPath = '/teams/' . rawurlencode($this->teamId());
        /** @var array<string, string> $values */
        $values = $this->request(
            $teamPath . '/secrets/export',
            ['format' => 'json', 'environment' => $environment],
            static function (mixed $answer): array {
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
            [400, 404]
        );
        ksort($values, SORT_STRING);

        if ($ttl > 0) {
            $state = self::$vault[$this->key];
            $expires = hrtime(true) + $ttl * 1_000_000_000;
            $state['all'][$environment] = [$values, $expires];
            foreach ($values as $name => $value) {
                $state['values'][self::cacheKey($environment, $name)] = [$value, $expires];
            }
            self::$vault[$this->key] = $state;
        }

        return $values;
    }

    /**
     * inject fetches every secret with getAll() and sets each one in the process environment
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
     * clearCache forgets every cached value, so the next get() or getAll() asks the server.
     */
    public function clearCache(): void
    {
        $state = self::$vault[$this->key];
        $state['values'] = [];
        $state['all'] = [];
        self::$vault[$this->key] = $state;
    }

    /** getBaseUrl returns the API root the client talks to, without a trailing slash. */
    public function getBaseUrl(): string
    {
        return $this->config->baseUrl;
    }

    /** getTeam returns the team as configured: an id, or a slug. */
    public function getTeam(): string
    {
        return $this->config->team;
    }

    /** getEnvironment returns the environment the client reads (default "production"). */
    public function getEnvironment(): string
    {
        return $this->config->environment;
    }

    /** getCacheTtl returns how many seconds a value stays cached; 0 means no cache. */
    public function getCacheTtl(): int
    {
        return $this->config->cacheTtl;
    }

    /** getTimeout returns the timeout of each HTTP attempt, in seconds. */
    public function getTimeout(): int|float
    {
        return $this->config->timeout;
    }

    /** getMaxRetries returns how many extra attempts a failed GET may make. */
    public function getMaxRetries(): int
    {
        return $this->config->maxRetries;
    }

    /** getCaFile returns the PEM bundle trusted instead of the system store, or null. */
    public function getCaFile(): ?string
    {
        return $this->config->caFile;
    }

    /**
     * getConfig returns the effective configuration (never the token): base_url, team,
     * environment, cache_ttl, timeout, max_retries.
     *
     * @return array{base_url: string, team: string, environment: string, cache_ttl: int, timeout: int|float, max_retries: int}
     */
    public function getConfig(): array
    {
        return $this->config->toArray();
    }

    /**
     * __debugInfo is what var_dump and print_r show: the configuration and cache size, with the
     * token redacted and no values.
     *
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return $this->config->toArray() + [
            'ca_file' => $this->config->caFile,
            'token' => '[redacted]',
            'cached_values' => count(self::$vault[$this->key]['values']),
        ];
    }

    /**
     * __clone gives the copy the same token and an empty cache of its own.
     */
    public function __clone()
    {
        $state = self::$vault[$this->key];
        $this->key = new \stdClass();
        self::$vault[$this->key] = ['values' => [], 'all' => []] + $state;
    }

    /**
     * __serialize refuses: a client holds a credential and must be rebuilt from configuration.
     *
     * @return array<mixed>
     */
    public function __serialize(): array
    {
        throw new \LogicException('a Cvsm\Client cannot be serialized; build a new one from its configuration');
    }

    /**
     * __unserialize refuses, as __serialize does.
     *
     * @param array<mixed> $data
     */
    public function __unserialize(array $data): void
    {
        throw new \LogicException('a Cvsm\Client cannot be unserialized; build a new one from its configuration');
    }

    /**
     * request performs an authenticated GET of $path under the base URL and returns what $read
     * makes of the answer (see HttpTransport::getJson). An authentication error empties the cache
     * before it propagates.
     *
     * @param array<string, string> $query
     * @param callable(mixed): mixed $read
     * @param list<int> $misconfigured statuses that mean a wrong base URL, team or environment
     */
    private function request(string $path, array $query, callable $read, array $misconfigured = [], ?string &$requestId = null): mixed
    {
        $url = $this->config->baseUrl . $path;
        if ($query !== []) {
            $url .= '?' . http_build_query($query, '', '&', PHP_QUERY_RFC3986);
        }
        $state = self::$vault[$this->key];
        try {
            return $state['transport']->getJson($url, $path, $state['token'], $read, $misconfigured, $requestId);
        } catch (AuthenticationException $e) {
            $this->clearCache();
            throw $e;
        }
    }

    /**
     * teamId returns the team id: the configured team when it is a UUID, otherwise the id of the
     * caller's team with that slug, looked up once per client through GET /teams.
     */
    private function teamId(): string
    {
        $known = self::$vault[$this->key]['team_id'];
        if ($known !== null) {
            return $known;
        }
        $team = $this->config->team;
        if (preg_match(self::UUID, $team)) {
            $id = $team;
        } else {
            /** @var list<mixed> $teams */
            $teams = $this->request(
                '/teams',
                [],
                static fn (mixed $answer): array => is_object($answer) && is_array($answer->teams ?? null)
                    ? $answer->teams
                    : throw new UnreadableResponse('no "teams" list'),
                [404],
                $teamsId
            );
            $id = null;
            foreach ($teams as $candidate) {
                if (is_object($candidate) && is_string($candidate->slug ?? null) && $candidate->slug === $team
                    && (is_string($candidate->id ?? null) || is_int($candidate->id ?? null))) {
                    $id = (string) $candidate->id;
                    break;
                }
            }
            if ($id === null) {
                throw new ConfigurationException(sprintf(
                    'team "%s" matches none of the teams this token belongs to (set "team" or CVSM_TEAM to a team id or slug)',
                    $team
                ), null, null, $teamsId);
            }
        }
        $state = self::$vault[$this->key];
        $state['team_id'] = $id;
        self::$vault[$this->key] = $state;

        return $id;
    }

    private function cachedValue(string $environment, string $name): ?string
    {
        if ($this->config->cacheTtl === 0) {
            return null;
        }
        $entry = self::$vault[$this->key]['values'][self::cacheKey($environment, $name)] ?? null;

        return ($entry !== null && $entry[1] > hrtime(true)) ? $entry[0] : null;
    }

    private function storeValue(string $environment, string $name, #[\SensitiveParameter] string $value): void
    {
        if ($this->config->cacheTtl === 0) {
            return;
        }
        $state = self::$vault[$this->key];
        $state['values'][self::cacheKey($environment, $name)] = [$value, hrtime(true) + $this->config->cacheTtl * 1_000_000_000];
        self::$vault[$this->key] = $state;
    }

    private static function cacheKey(string $environment, string $name): string
    {
        return $environment . "\0" . $name;
    }

    /** printable shortens a name for an error message and hides its control characters. */
    private static function printable(string $name): string
    {
        $name = preg_replace('/[\x00-\x1f\x7f]/', '?', $name) ?? '';

        return strlen($name) > 80 ? substr($name, 0, 80) . '...' : $name;
    }
}
