<?php

declare(strict_types=1);

namespace Cvsm\Internal;

/**
 * A live client's change stream (rule R16): one connection to
 * `GET {base_url}/teams/{team}/secrets/changes?environment={env}`, server-sent events of names
 * and versions, never values. A PHP process has no thread to follow it on, so it is a curl
 * handle on a curl multi handle that is driven without blocking: pump() sends, reads and applies
 * whatever has arrived, and waits for more only as long as it is told. The client pumps it before
 * each read (so a change that reached the process before the read is applied first) and from
 * Client::poll(), which a long-running worker calls from its loop.
 *
 * Its `snapshot` (on each connect) and each `change` tell the cache which values stopped being
 * current; the next read of such a name fetches it. While the stream is down (refused, dropped,
 * 45 s without a byte) the cache works as without live, and the stream is opened again, at the
 * first pump after a pause taken at random between half and all of min(30, 0.5 * 2**attempt)
 * seconds, at least Retry-After after a 429 and at least 300 s after a 401, 403 or 404. A 401
 * or 403, and an `end` event with status 401, 403 or 404, ask the client to empty its cache
 * (takeForget()). It holds the API token to send it; __debugInfo never shows it.
 *
 * @internal
 */
final class LiveStream
{
    /** Seconds without a byte after which the stream counts as lost (the server sends a comment every 15 s while idle). */
    public const READ_TIMEOUT = \Cvsm\Rules::LIVE_READ_TIMEOUT_SECONDS * 1.0;
    /** The longest pause before a reconnection, in seconds. */
    public const MAX_BACKOFF = \Cvsm\Rules::LIVE_MAX_BACKOFF_SECONDS * 1.0;
    /** The shortest pause after a refusal (401, 403, 404): a revoked token is not tried every few seconds, which would lock its prefix. */
    public const REFUSED_BACKOFF = \Cvsm\Rules::LIVE_REFUSED_BACKOFF_SECONDS * 1.0;
    /** A line longer than this (bytes) ends the connection: it is no change stream. */
    private const MAX_LINE = 1 << 20;
    private const REFUSED = \Cvsm\Rules::LIVE_REFUSED_STATUSES;

    private ?\CurlMultiHandle $multi = null;
    private ?\CurlHandle $handle = null;
    private SseDecoder $decoder;
    private string $buffer = '';
    /** The status of the answer being read (0 until its status line). */
    private int $status = 0;
    private ?int $retryAfter = null;
    /** Why the connection was ended from this side (an `end` event, a line too long), or null. */
    private ?string $ended = null;
    private ?string $lastEventId = null;
    private bool $connected = false;
    private bool $closed = false;
    private bool $forget = false;
    private int $attempt = 0;
    private float $nextAttempt = 0.0;
    private float $lastByte = 0.0;
    private bool $outageLogged = false;
    private int $applied = 0;
    private int $connections = 0;

    /** @var array<string, int>|null name => version, as the stream last said; null before a snapshot */
    private ?array $latest = null;

    /** @var \Closure(): float seconds on a monotonic clock */
    private \Closure $clock;

    /**
     * @param \Closure(string, string): void $log receives a level ("warning", "info") and a line
     *                                            naming the team and environment, never the token
     * @param (\Closure(): float)|null $clock monotonic seconds (hrtime by default)
     */
    public function __construct(
        private readonly HttpTransport $transport,
        private readonly string $url,
        #[\SensitiveParameter] private readonly string $token,
        private readonly Cache $cache,
        private readonly string $environment,
        private readonly string $describe,
        private readonly \Closure $log,
        ?\Closure $clock = null
    ) {
        $this->clock = $clock ?? static fn (): float => hrtime(true) / 1e9;
        $this->decoder = new SseDecoder();
    }

    /** Closes the connection, as close() does. */
    public function __destruct()
    {
        $this->close();
    }

    /**
     * Returns the pause before reconnection $attempt (0 for the first): 0.5 s doubling up to
     * 30 s, taken at random between half and all of it.
     */
    public static function reconnectDelay(int $attempt): float
    {
        $ceiling = min(self::MAX_BACKOFF, \Cvsm\Rules::LIVE_BACKOFF_BASE_MS / 1000 * (2 ** min(max($attempt, 0), 16)));

        return $ceiling * (0.5 + 0.5 * random_int(0, 1_000_000) / 1_000_000);
    }

    /**
     * Opens the stream when it is not open and its pause is over, then sends and reads what it
     * can and applies every complete event; with $wait above 0 it waits up to $wait seconds for
     * an event (returning after the first that arrives). Returns the number of events applied.
     */
    public function pump(float $wait = 0.0): int
    {
        $start = $this->applied;
        $deadline = hrtime(true) / 1e9 + max(0.0, $wait); // how long to wait is real time, whatever the clock says
        while (true) {
            if ($this->closed) {
                break;
            }
            if ($this->handle === null && ($this->clock)() >= $this->nextAttempt) {
                $this->open();
            }
            if ($this->handle !== null) {
                $this->drive();
            }
            $left = $deadline - hrtime(true) / 1e9;
            if ($this->applied > $start || $left <= 0) {
                break;
            }
            if ($this->handle !== null && $this->multi !== null) {
                if (curl_multi_select($this->multi, min($left, 1.0)) === -1) {
                    usleep((int) (min($left, 0.01) * 1e6)); // nothing to wait on yet (connecting)
                }
            } else {
                usleep((int) (max(0.001, min($left, $this->nextAttempt - ($this->clock)(), 0.1)) * 1e6));
            }
        }
        if ($this->closed && $wait > 0) {
            $left = $deadline - hrtime(true) / 1e9;
            if ($left > 0) {
                usleep((int) ($left * 1e6));
            }
        }

        return $this->applied - $start;
    }

    /** Returns the version the stream last announced for $name, or null when it does not know. */
    public function latestVersion(string $name): ?int
    {
        return $this->latest[$name] ?? null;
    }

    /** Tells whether the stream is up (its snapshot taken, not lost since). */
    public function isConnected(): bool
    {
        return $this->connected;
    }

    /** Returns how many connections got as far as their snapshot. */
    public function connections(): int
    {
        return $this->connections;
    }

    /** Returns, once, whether the stream asked the client to empty its cache (a refusal). */
    public function takeForget(): bool
    {
        $forget = $this->forget;
        $this->forget = false;

        return $forget;
    }

    /** Ends the stream for good: its connection is closed and never opened again. */
    public function close(): void
    {
        $this->closed = true;
        $this->connected = false;
        $this->release();
        $this->multi = null;
    }

    /**
     * Applies one event: a snapshot (every name's current version) drops each cached value whose
     * version is unknown or differs, a change the value of its name (unless it already holds the
     * announced version), both the getAll() result unless it is still current; an `end` with
     * status 401, 403 or 404 asks for the cache to be emptied, and ends the connection.
     */
    public function event(string $name, string $data): void
    {
        try {
            $payload = json_decode($data, true, 32, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return;
        }
        if (!is_array($payload)) {
            return;
        }
        if ($name === 'snapshot') {
            $versions = [];
            foreach (is_array($payload['secrets'] ?? null) ? $payload['secrets'] : [] as $secret => $item) {
                if (is_array($item) && is_int($item['version'] ?? null)) {
                    $versions[(string) $secret] = $item['version'];
                }
            }
            $dropped = $this->snapshot($versions);
            $this->applied++;
            $this->connections++;
            $this->attempt = 0;
            if ($this->outageLogged) {
                ($this->log)('info', sprintf('cvsm: live cache of %s: the change stream is back (%d cached value(s) changed meanwhile)', $this->describe, $dropped));
            }
            $this->outageLogged = false;
            $this->connected = true;
        } elseif ($name === 'change') {
            $secret = $payload['name'] ?? null;
            if (!is_string($secret)) {
                return;
            }
            $version = $payload['version'] ?? null;
            if (($payload['deleted'] ?? null) === true) {
                $this->change($secret, null);
            } elseif (is_int($version)) {
                $this->change($secret, $version);
            } else {
                return;
            }
            $this->applied++;
        } elseif ($name === 'end') {
            $status = $payload['status'] ?? null;
            if (in_array($status, self::REFUSED, true)) {
                $this->forget = true;
            }
            $reason = $payload['reason'] ?? $status;
            $this->ended = sprintf('the server ended it (%s)', is_scalar($reason) ? preg_replace('/[^\x21-\x7e ]/', '?', substr((string) $reason, 0, 40)) : 'end');
            $this->applied++;
        }
    }

    /**
     * Shows the stream's state, never the token.
     *
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return ['describe' => $this->describe, 'connected' => $this->connected, 'closed' => $this->closed, 'token' => '[redacted]'];
    }

    /** Starts a connection on the multi handle; reading it is drive()'s. */
    private function open(): void
    {
        $this->multi ??= curl_multi_init();
        $this->status = 0;
        $this->retryAfter = null;
        $this->ended = null;
        $this->buffer = '';
        $this->decoder = new SseDecoder();
        $this->lastByte = ($this->clock)();
        $this->handle = $this->transport->streamHandle(
            $this->url,
            $this->token,
            $this->lastEventId,
            function ($handle, string $line): int {
                $this->lastByte = ($this->clock)();
                if (preg_match('#^HTTP/\S+\s+(\d{3})#', $line, $m)) {
                    $this->status = (int) $m[1];
                    $this->retryAfter = null;
                } elseif (stripos($line, 'retry-after:') === 0) {
                    $this->retryAfter = HttpTransport::retryAfter(substr($line, 12));
                }

                return strlen($line);
            },
            function ($handle, string $piece): int {
                $this->lastByte = ($this->clock)();
                if ($this->status !== 200 || $this->ended !== null) {
                    return 0; // a refusal's body is not read; an ended stream is cut
                }
                $this->buffer .= $piece;
                $this->lines();

                return $this->ended !== null ? 0 : strlen($piece);
            }
        );
        curl_multi_add_handle($this->multi, $this->handle);
    }

    /** Runs the transfer as far as it goes without blocking, and notices its end or silence. */
    private function drive(): void
    {
        if ($this->multi === null || $this->handle === null) {
            return;
        }
        do {
            $code = curl_multi_exec($this->multi, $running);
        } while ($code === CURLM_CALL_MULTI_PERFORM);
        while (($info = curl_multi_info_read($this->multi)) !== false) {
            if ($this->handle !== null && ($info['handle'] ?? null) === $this->handle) {
                $this->finished((int) $info['result']);

                return;
            }
        }
        if ($this->handle !== null && ($this->clock)() - $this->lastByte >= self::READ_TIMEOUT) {
            $this->release();
            $this->lost(sprintf('no byte for %d s', (int) self::READ_TIMEOUT));
        }
    }

    /** Takes the end of a connection: a refusal, an end event, an error or a close. */
    private function finished(int $result): void
    {
        $status = $this->status;
        $ended = $this->ended;
        $error = $result !== CURLE_OK && $result !== CURLE_WRITE_ERROR ? curl_strerror($result) : null;
        $this->release();
        if ($status !== 0 && $status !== 200) {
            $this->refused($status, $this->retryAfter);
        } elseif ($ended !== null) {
            $this->lost($ended);
        } else {
            $this->lost($error ?? 'the server closed it');
        }
    }

    /** Frees the connection (not the stream's state). */
    private function release(): void
    {
        if ($this->handle !== null && $this->multi !== null) {
            curl_multi_remove_handle($this->multi, $this->handle);
        }
        $this->handle = null; // frees the easy handle and closes its connection
        $this->buffer = '';
    }

    /** Splits the buffer into lines (LF, CRLF or CR) and applies each event they complete. */
    private function lines(): void
    {
        while (preg_match('/\r\n|\r|\n/', $this->buffer, $m, PREG_OFFSET_CAPTURE)) {
            [$ending, $at] = $m[0];
            if ($ending === "\r" && $at === strlen($this->buffer) - 1) {
                break; // maybe the first half of a CRLF
            }
            $line = substr($this->buffer, 0, $at);
            $this->buffer = substr($this->buffer, $at + strlen($ending));
            $event = $this->decoder->line($line);
            if ($this->decoder->lastId !== null) {
                $this->lastEventId = $this->decoder->lastId;
            }
            if ($event !== null) {
                $this->event($event[0], $event[1]);
            }
            if ($this->ended !== null) {
                return;
            }
        }
        if (strlen($this->buffer) > self::MAX_LINE) {
            $this->ended = 'a line longer than 1 MiB';
        }
    }

    /** @param array<string, int> $versions */
    private function snapshot(array $versions): int
    {
        $this->latest = $versions;
        $prefix = Cache::valueKey($this->environment, '');
        $dropped = [];
        foreach ($this->cache->keys() as $key) {
            if (!str_starts_with($key, $prefix)) {
                continue;
            }
            $secret = substr($key, strlen($prefix));
            $held = $this->cache->version($key);
            if ($held === null || $held !== ($versions[$secret] ?? null)) {
                $this->cache->drop($key);
                $dropped[$secret] = true;
            }
        }
        $allKey = Cache::allKey($this->environment);
        $all = $this->cache->fresh($allKey);
        if (is_array($all)) {
            $names = array_map('strval', array_keys($all));
            $current = array_keys($versions);
            sort($names, SORT_STRING);
            sort($current, SORT_STRING);
            if ($names !== $current || array_intersect_key($all, $dropped) !== []) {
                $this->cache->drop($allKey);
            }
        }

        return count($dropped);
    }

    private function change(string $name, ?int $version): void
    {
        if ($this->latest !== null) {
            if ($version === null) {
                unset($this->latest[$name]);
            } else {
                $this->latest[$name] = $version;
            }
        }
        $this->cache->drop(Cache::allKey($this->environment));
        $key = Cache::valueKey($this->environment, $name);
        if ($version !== null && $this->cache->version($key) === $version) {
            return; // it already holds the announced version
        }
        $this->cache->drop($key);
    }

    /** Notes that the stream is down ($reason names no token, no value) and schedules the next attempt. */
    private function lost(string $reason, float $atLeast = 0.0): void
    {
        $this->connected = false;
        $this->latest = null;
        if (!$this->outageLogged) {
            ($this->log)('warning', sprintf(
                'cvsm: live cache of %s: the change stream is down (%s); values are cached for cache_ttl until it is back; reconnecting',
                $this->describe,
                $reason
            ));
            $this->outageLogged = true;
        }
        $delay = max(self::reconnectDelay($this->attempt), $atLeast);
        $this->attempt++;
        $this->nextAttempt = ($this->clock)() + $delay;
    }

    private function refused(int $status, ?int $retryAfter): void
    {
        if ($status === 401 || $status === 403) {
            $this->forget = true; // as a refused read does
        }
        $atLeast = in_array($status, self::REFUSED, true) ? self::REFUSED_BACKOFF : 0.0;
        if ($retryAfter !== null) {
            $atLeast = max($atLeast, (float) $retryAfter);
        }
        $this->lost(sprintf('the change stream answered HTTP %d', $status), $atLeast);
    }
}
