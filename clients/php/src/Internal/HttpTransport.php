<?php

declare(strict_types=1);

namespace Cvsm\Internal;

use Cvsm\Client;
use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;

/**
 * Owns the wire: one authenticated GET over ext-curl (or the caller's PSR-18
 * client, through Psr18Sender), with the timeout per attempt,
 * the retries (network errors, unreadable answers and 502/503/504, full-jitter backoff, never
 * after a 4xx), the JSON decoding and the mapping of HTTP statuses to exception types. It keeps
 * no token: the caller passes it on each call. It does hold the curl options, which may carry
 * credentials of their own (a proxy's), so the client keeps it out of its printable properties.
 *
 * @internal
 */
final class HttpTransport
{
    /** The hint of a 400 that rejects the environment (rule R9). */
    public const CHECK_ENVIRONMENT = 'check the environment: "environment" or CVSM_ENVIRONMENT';
    /** The hint of a 404 that rejects the base URL or the team (rule R9). */
    public const CHECK_TEAM = 'check the base URL, which includes /api/v1, and the team: "base_url"/CVSM_BASE_URL, "team"/CVSM_TEAM';

    private const RETRY_STATUSES = \Cvsm\Rules::RETRYABLE_STATUSES;
    private const BACKOFF_BASE = \Cvsm\Rules::RETRY_BACKOFF_BASE_MS / 1000;
    private const MAX_MESSAGE = \Cvsm\Rules::MAX_SERVER_MESSAGE;
    private const MAX_REQUEST_ID = 200;
    private const REASONS = [
        300 => 'Multiple Choices', 301 => 'Moved Permanently', 302 => 'Found', 303 => 'See Other',
        304 => 'Not Modified', 307 => 'Temporary Redirect', 308 => 'Permanent Redirect',
        400 => 'Bad Request', 401 => 'Unauthorized', 403 => 'Forbidden', 404 => 'Not Found',
        405 => 'Method Not Allowed', 409 => 'Conflict', 410 => 'Gone', 413 => 'Payload Too Large',
        422 => 'Unprocessable Entity', 429 => 'Too Many Requests', 500 => 'Internal Server Error',
        502 => 'Bad Gateway', 503 => 'Service Unavailable', 504 => 'Gateway Timeout',
    ];
    private const MONTHS = [
        'Jan' => 1, 'Feb' => 2, 'Mar' => 3, 'Apr' => 4, 'May' => 5, 'Jun' => 6,
        'Jul' => 7, 'Aug' => 8, 'Sep' => 9, 'Oct' => 10, 'Nov' => 11, 'Dec' => 12,
    ];

    /** @var \Closure(float): void */
    private \Closure $sleep;

    /**
     * Builds a transport with a timeout per attempt (seconds), a retry budget and extra curl
     * options applied to every handle after the transport's own. $sleep receives the backoff in
     * seconds; it defaults to usleep. With $psr18, each attempt goes through the caller's PSR-18
     * client instead of curl, and the timeout and curl options do not apply.
     *
     * @param array<int, mixed> $curlOptions
     */
    public function __construct(
        private readonly int|float $timeout,
        private readonly int $maxRetries,
        private readonly array $curlOptions = [],
        ?callable $sleep = null,
        private readonly ?Psr18Sender $psr18 = null
    ) {
        $this->sleep = $sleep !== null ? \Closure::fromCallable($sleep) : static function (float $seconds): void {
            usleep((int) round($seconds * 1_000_000));
        };
    }

    /**
     * Builds the client's transport: the CA bundle of $config, the proxy the environment names
     * now (rule R7: read when the client is created), then $curlOptions; or, with $psr18, the
     * caller's PSR-18 client, which owns all of those.
     *
     * @param array<int, mixed> $curlOptions
     */
    public static function fromConfig(Config $config, #[\SensitiveParameter] array $curlOptions, ?Psr18Sender $psr18 = null): self
    {
        if ($psr18 !== null) {
            return new self($config->timeout, $config->maxRetries, [], null, $psr18);
        }

        return new self(
            $config->timeout,
            $config->maxRetries,
            array_replace(self::caOptions($config->caFile), self::proxyOptions($config->url()), $curlOptions)
        );
    }

    /**
     * Returns the curl options that trust the PEM bundle $caFile instead
     * of the system store, or none for null.
     *
     * @return array<int, mixed>
     */
    public static function caOptions(?string $caFile): array
    {
        if ($caFile === null) {
            return [];
        }
        $options = [CURLOPT_CAINFO => $caFile];
        // libcurl also searches its default CA directory (/etc/ssl/certs on Debian) next to
        // CURLOPT_CAINFO, and ext-curl cannot unset CURLOPT_CAPATH (null becomes ""), which
        // OpenSSL refuses. So the CA path is pointed at the bundle itself: a file, not a
        // directory, in which OpenSSL's hashed-directory lookup finds nothing.
        $ssl = (string) (curl_version()['ssl_version'] ?? '');
        if (preg_match('/^(OpenSSL|LibreSSL|BoringSSL|quictls)/i', $ssl)) {
            $options[CURLOPT_CAPATH] = $caFile;
        }

        return $options;
    }

    /**
     * Returns the proxy settings for requests to $baseUrl as the
     * process environment gives them now, in curl's own order: `http_proxy` (and `HTTP_PROXY`,
     * in the CLI only: elsewhere it may come from a request's Proxy header, "httpoxy") or
     * `https_proxy`/`HTTPS_PROXY`, then `all_proxy`/`ALL_PROXY`; hosts in `no_proxy`/`NO_PROXY`
     * are reached directly. They are set explicitly, so curl does not read the environment again
     * on each request.
     *
     * @return array<int, string>
     */
    public static function proxyOptions(string $baseUrl): array
    {
        $https = strtolower((string) parse_url($baseUrl, PHP_URL_SCHEME)) === 'https';
        $names = $https
            ? ['https_proxy', 'HTTPS_PROXY', 'all_proxy', 'ALL_PROXY']
            : (PHP_SAPI === 'cli'
                ? ['http_proxy', 'HTTP_PROXY', 'all_proxy', 'ALL_PROXY']
                : ['http_proxy', 'all_proxy', 'ALL_PROXY']);

        return [
            CURLOPT_PROXY => self::firstVariable($names), // "" means no proxy at all
            CURLOPT_NOPROXY => self::firstVariable(['no_proxy', 'NO_PROXY']),
        ];
    }

    /**
     * Performs GET $url with the bearer token, decodes the JSON answer and returns what
     * $read makes of it and of the answer's headers (lower-cased names, from curl or the PSR-18
     * client alike). $read throws UnreadableResponse when the answer is not the shape the
     * request promises; that is retried like a dropped connection. A status that is a key of
     * $misconfigured means the configuration is wrong (the base URL, team or environment, rule R9;
     * a token's key part on a team that is not end-to-end) and throws ConfigurationException, whose message ends with that key's hint. $label names the request in messages (a path, never a query or
     * token). $requestId receives the X-Request-Id of the answer that was read.
     *
     * @param (callable(mixed, array<string, string>): mixed)|null $read
     * @param array<int, string> $misconfigured status => hint
     * @throws CvsmException
     */
    public function getJson(
        string $url,
        string $label,
        #[\SensitiveParameter] string $token,
        ?callable $read = null,
        array $misconfigured = [],
        ?string &$requestId = null
    ): mixed {
        for ($attempt = 0; ; $attempt++) {
            $canRetry = $attempt < $this->maxRetries;
            try {
                [$status, $headers, $body] = $this->send($url, $label, $token);
            } catch (NetworkException $e) {
                if (!$canRetry) {
                    throw $this->spent($e, $attempt);
                }
                $this->backoff($attempt);
                continue;
            }
            $requestId = self::requestId($headers);

            if ($status >= 200 && $status < 300) {
                try {
                    $decoded = self::decode($body);
                    unset($body);

                    return $read === null ? $decoded : $read($decoded, $headers);
                } catch (UnreadableResponse $e) {
                    $error = new NetworkException(
                        sprintf('GET %s: unreadable response (HTTP %d, %s)', $label, $status, $e->getMessage()),
                        null,
                        null,
                        $requestId
                    );
                    if (!$canRetry) {
                        throw $this->spent($error, $attempt);
                    }
                    $this->backoff($attempt);
                    continue;
                }
            }

            if (in_array($status, self::RETRY_STATUSES, true) && $canRetry) {
                $this->backoff($attempt);
                continue;
            }

            throw $this->errorFor($status, $headers, $body, $token, $misconfigured[$status] ?? null);
        }
    }

    /**
     * Returns a curl handle, not started, for the change stream at $url (rule R16): the client's
     * CA bundle, proxy and curl options as every request has them, `Accept: text/event-stream`,
     * `Last-Event-ID` when $lastEventId is given, no limit on the whole transfer (the stream is
     * held open; the caller counts 45 s without a byte as lost) and $timeout to connect. $header
     * receives each header line, $write each piece of the body; either returns how many bytes it
     * took (fewer ends the transfer).
     *
     * @param \Closure(\CurlHandle, string): int $header
     * @param \Closure(\CurlHandle, string): int $write
     */
    public function streamHandle(string $url, #[\SensitiveParameter] string $token, ?string $lastEventId, \Closure $header, \Closure $write): \CurlHandle
    {
        $handle = curl_init();
        $timeoutMs = max(1, (int) ceil($this->timeout * 1000));
        curl_setopt_array($handle, array_replace([
            CURLOPT_CONNECTTIMEOUT_MS => $timeoutMs,
            CURLOPT_NOSIGNAL => true,
            CURLOPT_FORBID_REUSE => true,
        ], $this->curlOptions));
        $headers = ['Authorization: Bearer ' . $token, 'Accept: ' . \Cvsm\Rules::ACCEPT_EVENT_STREAM];
        if ($lastEventId !== null) {
            $headers[] = \Cvsm\Rules::HEADER_LAST_EVENT_ID . ': ' . $lastEventId;
        }
        curl_setopt_array($handle, [
            CURLOPT_URL => $url,
            CURLOPT_HTTPGET => true,
            CURLOPT_TIMEOUT_MS => 0,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_REDIR_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_USERAGENT => Client::USER_AGENT,
            CURLOPT_HTTPHEADER => $headers,
            CURLOPT_HEADERFUNCTION => $header,
            CURLOPT_WRITEFUNCTION => $write,
        ]);

        return $handle;
    }

    /**
     * Reads a Retry-After header as whole seconds (rule R4): a delay in
     * seconds as it is; an HTTP date as the seconds from now until then, rounded up, and 0 when
     * it is past; anything else, or no header, null.
     */
    public static function retryAfter(?string $value, ?float $now = null): ?int
    {
        $value = trim((string) $value);
        if (preg_match('/^[0-9]+$/D', $value)) {
            return strlen(ltrim($value, '0')) > 18 ? PHP_INT_MAX : (int) $value;
        }
        $when = self::httpDate($value);
        if ($when === null) {
            return null;
        }

        return (int) max(0, ceil($when - ($now ?? microtime(true))));
    }

    /**
     * Performs one attempt and returns [status, lower-cased headers, body]; a transport
     * failure throws NetworkException.
     *
     * @return array{0: int, 1: array<string, string>, 2: string}
     */
    private function send(string $url, string $label, #[\SensitiveParameter] string $token): array
    {
        if ($this->psr18 !== null) {
            return $this->psr18->send($url, $label, $token);
        }
        $headers = [];
        $handle = curl_init();
        // CURLOPT_TIMEOUT_MS bounds the whole transfer: connecting, sending, the status line, the
        // headers and the body (rule R1).
        $timeoutMs = max(1, (int) ceil($this->timeout * 1000));
        curl_setopt_array($handle, array_replace([
            CURLOPT_TIMEOUT_MS => $timeoutMs,
            CURLOPT_CONNECTTIMEOUT_MS => $timeoutMs,
            CURLOPT_NOSIGNAL => true,
            CURLOPT_FORBID_REUSE => true,
        ], $this->curlOptions));
        curl_setopt_array($handle, [
            CURLOPT_URL => $url,
            CURLOPT_HTTPGET => true,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_FOLLOWLOCATION => false, // rule R5: a 3xx is an ApiException, the token stays here
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_REDIR_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_USERAGENT => Client::USER_AGENT,
            CURLOPT_HTTPHEADER => [
                'Authorization: Bearer ' . $token,
                'Accept: ' . \Cvsm\Rules::ACCEPT_JSON,
            ],
            CURLOPT_HEADERFUNCTION => static function ($handle, string $line) use (&$headers): int {
                if (preg_match('#^HTTP/\S+\s+\d{3}#', $line)) {
                    $headers = []; // a new response (after 100 Continue or a proxy's CONNECT): keep the last
                } elseif (($colon = strpos($line, ':')) !== false) {
                    $headers[strtolower(trim(substr($line, 0, $colon)))] = trim(substr($line, $colon + 1));
                }

                return strlen($line);
            },
        ]);
        $body = curl_exec($handle);
        $errno = curl_errno($handle);
        $error = curl_error($handle);
        $status = (int) curl_getinfo($handle, CURLINFO_RESPONSE_CODE);
        unset($handle); // frees the handle and its connection (curl_close is a no-op since PHP 8.0)

        if ($body === false || $errno !== 0) {
            $reason = $errno === CURLE_OPERATION_TIMEDOUT
                ? sprintf('timed out after %s seconds', $this->timeout)
                : ($error !== '' ? $error : 'curl error ' . $errno);
            throw new NetworkException(sprintf('GET %s failed: %s', $label, self::redact($reason, $token)));
        }

        return [$status, $headers, (string) $body];
    }

    /**
     * Parses a JSON body, objects as stdClass so that {} and [] stay apart.
     *
     * @throws UnreadableResponse
     */
    private static function decode(string $body): mixed
    {
        try {
            return json_decode($body, false, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
        } catch (\JsonException $e) {
            throw new UnreadableResponse('the body is not JSON: ' . $e->getMessage());
        }
    }

    private function backoff(int $attempt): void
    {
        $ceiling = self::BACKOFF_BASE * (2 ** $attempt);
        ($this->sleep)($ceiling * (random_int(0, 1_000_000) / 1_000_000));
    }

    private function spent(NetworkException $error, int $attempt): NetworkException
    {
        if ($attempt === 0) {
            return $error;
        }

        return new NetworkException(
            sprintf('%s (after %d attempts)', $error->getMessage(), $attempt + 1),
            null,
            null,
            $error->getRequestId()
        );
    }

    /**
     * Turns a non-2xx response into the exception of its kind, with a message of the
     * status and the server's {"error": "..."} text, from which the token is removed. With a
     * $misconfigured hint, it is the ConfigurationException that ends with that hint.
     *
     * @param array<string, string> $headers
     */
    private function errorFor(
        int $status,
        array $headers,
        #[\SensitiveParameter] string $body,
        #[\SensitiveParameter] string $token,
        ?string $misconfigured
    ): CvsmException {
        $prefix = trim($status . ' ' . (self::REASONS[$status] ?? ''));
        $decoded = json_decode($body, true);
        $detail = is_array($decoded) && isset($decoded['error']) && is_string($decoded['error']) ? trim($decoded['error']) : '';
        if ($detail !== '') {
            $detail = preg_replace('/[\x00-\x1f\x7f]+/', ' ', $detail) ?? '';
            if (strlen($detail) > self::MAX_MESSAGE) {
                // Cut on a character boundary: drop a trailing, possibly partial, multi-byte sequence.
                $detail = preg_replace('/[\xC0-\xFF][\x80-\xBF]*$/', '', substr($detail, 0, self::MAX_MESSAGE)) . '...';
            }
        }
        $message = $detail === '' ? $prefix : $prefix . ': ' . $detail;
        if ($misconfigured !== null) {
            $message .= ' (' . $misconfigured . ')';
        } elseif ($status >= 300 && $status < 400) {
            $message .= ' (redirects are not followed: check the base URL)';
        }
        $message = self::redact($message, $token);
        $requestId = self::requestId($headers);

        return match (true) {
            $misconfigured !== null => new ConfigurationException($message, $status, null, $requestId),
            $status === 401 => new AuthenticationException($message, 401, null, $requestId),
            $status === 403 => new PermissionDeniedException($message, 403, null, $requestId),
            $status === 404 => new SecretNotFoundException($message, 404, null, null, null, $requestId),
            $status === 429 => new RateLimitException($message, self::retryAfter($headers['retry-after'] ?? null), null, $requestId),
            default => new ApiException($message, $status, null, $requestId),
        };
    }

    /**
     * Parses the three HTTP-date forms of RFC 9110 (IMF-fixdate, RFC 850, asctime) as a
     * Unix time, or returns null.
     */
    private static function httpDate(string $value): ?int
    {
        $month = '(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)';
        $time = '([0-9]{2}):([0-9]{2}):([0-9]{2})';
        if (preg_match('/^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) ' . $month . ' ([0-9]{4}) ' . $time . ' GMT$/D', $value, $m)) {
            [$day, $mon, $year, $h, $i, $s] = [(int) $m[1], $m[2], (int) $m[3], (int) $m[4], (int) $m[5], (int) $m[6]];
        } elseif (preg_match('/^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), ([0-9]{2})-' . $month . '-([0-9]{2}) ' . $time . ' GMT$/D', $value, $m)) {
            [$day, $mon, $year, $h, $i, $s] = [(int) $m[1], $m[2], (int) $m[3], (int) $m[4], (int) $m[5], (int) $m[6]];
            // A two-digit year more than 50 years in the future is in the past century (RFC 9110).
            $century = intdiv((int) gmdate('Y'), 100) * 100;
            $year += $century;
            if ($year > (int) gmdate('Y') + 50) {
                $year -= 100;
            }
        } elseif (preg_match('/^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ' . $month . ' ([ 0-9][0-9]) ' . $time . ' ([0-9]{4})$/D', $value, $m)) {
            [$mon, $day, $h, $i, $s, $year] = [$m[1], (int) trim($m[2]), (int) $m[3], (int) $m[4], (int) $m[5], (int) $m[6]];
        } else {
            return null;
        }
        if (!checkdate(self::MONTHS[$mon], $day, $year) || $h > 23 || $i > 59 || $s > 60) {
            return null;
        }

        return gmmktime($h, $i, $s, self::MONTHS[$mon], $day, $year);
    }

    /**
     * @param array<string, string> $headers
     */
    private static function requestId(array $headers): ?string
    {
        $id = $headers['x-request-id'] ?? '';
        if ($id === '') {
            return null;
        }
        $id = preg_replace('/[\x00-\x1f\x7f]/', '', $id) ?? '';

        return $id === '' ? null : substr($id, 0, self::MAX_REQUEST_ID);
    }

    /**
     * @param list<string> $names
     */
    private static function firstVariable(array $names): string
    {
        foreach ($names as $name) {
            $value = getenv($name, true);
            if (is_string($value) && trim($value) !== '') {
                return trim($value);
            }
        }

        return '';
    }

    /** Removes the token from a message, however it got there. */
    private static function redact(string $message, #[\SensitiveParameter] string $token): string
    {
        return $token === '' ? $message : str_replace($token, \Cvsm\Rules::REDACTED, $message);
    }
}
