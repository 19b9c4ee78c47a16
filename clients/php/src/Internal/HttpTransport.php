<?php

declare(strict_types=1);

namespace Cvsm\Internal;

use Cvsm\Client;
use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;

/**
 * HttpTransport owns the wire: one authenticated GET over ext-curl, with the timeout per attempt,
 * the retries (network errors and 502/503/504, full-jitter backoff, never after a 4xx), the JSON
 * decoding and the mapping of HTTP statuses to exception types. It keeps no token: the caller
 * passes it on each call.
 *
 * @internal
 */
final class HttpTransport
{
    private const RETRY_STATUSES = [502, 503, 504];
    private const BACKOFF_BASE = 0.1;
    private const MAX_MESSAGE = 300;
    private const REASONS = [
        400 => 'Bad Request', 401 => 'Unauthorized', 403 => 'Forbidden', 404 => 'Not Found',
        405 => 'Method Not Allowed', 409 => 'Conflict', 410 => 'Gone', 413 => 'Payload Too Large',
        422 => 'Unprocessable Entity', 429 => 'Too Many Requests', 500 => 'Internal Server Error',
        502 => 'Bad Gateway', 503 => 'Service Unavailable', 504 => 'Gateway Timeout',
    ];

    /** @var callable(float): void */
    private $sleep;

    /**
     * HttpTransport builds a transport with a timeout per attempt (seconds) and a retry budget.
     * $sleep receives the backoff in seconds; it defaults to usleep.
     */
    public function __construct(
        private readonly int|float $timeout,
        private readonly int $maxRetries,
        ?callable $sleep = null
    ) {
        $this->sleep = $sleep ?? static function (float $seconds): void {
            usleep((int) round($seconds * 1_000_000));
        };
    }

    /**
     * getJson performs GET $url with the bearer token and returns the decoded JSON body. $label
     * names the request in error messages (a path, never a query or token).
     *
     * @return array<mixed>
     * @throws CvsmException
     */
    public function getJson(string $url, string $label, #[\SensitiveParameter] string $token): array
    {
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

            if ($status >= 200 && $status < 300) {
                $decoded = json_decode($body, true);
                if (is_array($decoded)) {
                    return $decoded;
                }
                $error = new NetworkException(sprintf('GET %s: unreadable response (HTTP %d with a body that is not a JSON object)', $label, $status));
                if (!$canRetry) {
                    throw $this->spent($error, $attempt);
                }
                $this->backoff($attempt);
                continue;
            }

            if (in_array($status, self::RETRY_STATUSES, true) && $canRetry) {
                $this->backoff($attempt);
                continue;
            }

            throw $this->errorFor($status, $headers, $body, $token);
        }
    }

    /**
     * send performs one attempt and returns [status, lower-cased headers, body]; a transport
     * failure throws NetworkException.
     *
     * @return array{0: int, 1: array<string, string>, 2: string}
     */
    private function send(string $url, string $label, #[\SensitiveParameter] string $token): array
    {
        $headers = [];
        $handle = curl_init();
        $timeoutMs = max(1, (int) ceil($this->timeout * 1000));
        curl_setopt_array($handle, [
            CURLOPT_URL => $url,
            CURLOPT_HTTPGET => true,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_TIMEOUT_MS => $timeoutMs,
            CURLOPT_CONNECTTIMEOUT_MS => $timeoutMs,
            CURLOPT_NOSIGNAL => true,
            CURLOPT_FORBID_REUSE => true,
            CURLOPT_USERAGENT => Client::USER_AGENT,
            CURLOPT_HTTPHEADER => [
                'Authorization: Bearer ' . $token,
                'Accept: application/json',
            ],
            CURLOPT_HEADERFUNCTION => static function ($handle, string $line) use (&$headers): int {
                if (preg_match('#^HTTP/\S+\s+\d{3}#', $line)) {
                    $headers = []; // a new response (after 100 Continue): keep only the last one
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

        return new NetworkException(sprintf('%s (after %d attempts)', $error->getMessage(), $attempt + 1));
    }

    /**
     * errorFor turns a non-2xx response into the exception of its kind, with a message of the
     * status and the server's {"error": "..."} text, from which the token is removed.
     *
     * @param array<string, string> $headers
     */
    private function errorFor(int $status, array $headers, #[\SensitiveParameter] string $body, #[\SensitiveParameter] string $token): CvsmException
    {
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
        $message = self::redact($detail === '' ? $prefix : $prefix . ': ' . $detail, $token);

        return match (true) {
            $status === 401 => new AuthenticationException($message, 401),
            $status === 403 => new PermissionDeniedException($message, 403),
            $status === 404 => new SecretNotFoundException($message, 404),
            $status === 429 => new RateLimitException($message, self::retryAfter($headers['retry-after'] ?? null)),
            default => new ApiException($message, $status),
        };
    }

    /** retryAfter reads a Retry-After header (delta seconds or an HTTP date) as whole seconds. */
    private static function retryAfter(?string $value): ?int
    {
        if ($value === null || $value === '') {
            return null;
        }
        if (preg_match('/^\d{1,10}$/', $value)) {
            return (int) $value;
        }
        $when = strtotime($value);

        return $when === false ? null : max(0, $when - time());
    }

    /** redact removes the token from a message, however it got there. */
    private static function redact(string $message, #[\SensitiveParameter] string $token): string
    {
        return $token === '' ? $message : str_replace($token, '[redacted]', $message);
    }
}
