<?php

declare(strict_types=1);

namespace Cvsm\Tests;

/**
 * Stub runs conformance/stub.py, the stub API every SDK's own tests share (python3, standard
 * library only), and drives it over HTTP: its data, scripted answers and faults, and the requests
 * it received (see the stub's docstring for the wire form of each).
 */
final class Stub
{
    /** @var resource */
    private $process;

    /** The port the stub listens on (127.0.0.1). */
    public readonly int $port;

    /** Starts the stub on a free port, speaking HTTPS when given a PEM certificate and its key. */
    public function __construct(private ?string $cert = null, ?string $key = null)
    {
        $portFile = sys_get_temp_dir() . '/cvsm-php-stub-' . getmypid() . '-' . bin2hex(random_bytes(4));
        $command = ['python3', dirname(__DIR__, 3) . '/conformance/stub.py', $portFile, ...($cert === null ? [] : [$cert, (string) $key])];
        $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot start conformance/stub.py');
        }
        $this->process = $process;
        $deadline = microtime(true) + 10;
        // The stub writes the port file whole (a rename); PHP caches stat results, hence clearstatcache.
        for (clearstatcache(); !is_file($portFile); clearstatcache()) {
            if (microtime(true) > $deadline || !proc_get_status($process)['running']) {
                throw new \RuntimeException('conformance/stub.py did not start (is python3 installed?)');
            }
            usleep(20_000);
        }
        $this->port = (int) file_get_contents($portFile);
        unlink($portFile);
    }

    /** Ends the stub. */
    public function __destruct()
    {
        proc_terminate($this->process);
        proc_close($this->process);
    }

    /** Returns the API root of the stub, like a real base URL. */
    public function url(): string
    {
        return ($this->cert === null ? 'http' : 'https') . '://127.0.0.1:' . $this->port . '/api/v1';
    }

    /**
     * Replaces the stub's data with $data (token, teams, secrets: what is not given stays; e2e:
     * off unless given) and forgets its scripted answers, faults and recorded requests.
     *
     * @param array<string, mixed> $data
     */
    public function reset(array $data = []): void
    {
        $this->call('/_stub/reset', (object) $data);
    }

    /**
     * Makes "METHOD /path[?query]" (path under /api/v1; a path without a query matches any) answer
     * $responses in order, the last one repeating: status (200), headers, body (a string, or data
     * sent as JSON). Only the headers given are sent: no X-Request-Id of the stub's own.
     *
     * @param array{status?: int, headers?: array<string, string>, body?: mixed} ...$responses
     */
    public function route(string $route, array ...$responses): void
    {
        $url = '/api/v1' . explode(' ', $route, 2)[1];
        $faults = [];
        foreach (array_values($responses) as $i => $response) {
            $body = $response['body'] ?? '';
            $faults[] = [
                'url' => $url,
                'count' => $i === count($responses) - 1 ? 1_000_000 : 1,
                'status' => $response['status'] ?? 200,
                'headers' => (object) ($response['headers'] ?? []),
                'body' => is_string($body) ? $body : json_encode($body),
                'no_request_id' => true,
            ];
        }
        $this->fault(...$faults);
    }

    /**
     * Queues faults (see the stub's docstring), e.g. ["url" => "/api/v1/...", "status" => 503].
     *
     * @param array<string, mixed> ...$faults
     */
    public function fault(array ...$faults): void
    {
        $this->call('/_stub/faults', $faults);
    }

    /**
     * Sends items to every open change stream (a change, {"raw": text} or {"close": true}).
     *
     * @param array<string, mixed> ...$items
     */
    public function changes(array ...$items): void
    {
        $this->call('/_stub/changes', $items);
    }

    /**
     * Returns the change streams open now and ended since the reset.
     *
     * @return array{open: int, closed: int}
     */
    public function streams(): array
    {
        return $this->call('/_stub/streams');
    }

    /**
     * Returns what the stub received, oldest first: method, path, query, headers (lower-case
     * names), proxied, host, body.
     *
     * @return list<array{method: string, path: string, query: string, headers: array<string, string>, proxied: bool, host: string, body: string}>
     */
    public function requests(): array
    {
        return $this->call('/_stub/requests');
    }

    /** Sends $data to the stub's $path (a GET without it), straight (never through a proxy). */
    private function call(string $path, mixed $data = null): mixed
    {
        $curl = curl_init(str_replace('/api/v1', $path, $this->url()));
        curl_setopt_array($curl, [
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_PROXY => '',
            CURLOPT_TIMEOUT => 10,
            // The test's own server on 127.0.0.1: its certificate is what TlsTest checks the client with.
            CURLOPT_SSL_VERIFYPEER => false,
            CURLOPT_SSL_VERIFYHOST => 0,
        ] + ($data === null ? [] : [CURLOPT_POSTFIELDS => json_encode($data)]));
        $answer = curl_exec($curl);
        if (!is_string($answer) || curl_getinfo($curl, CURLINFO_RESPONSE_CODE) !== 200) {
            throw new \RuntimeException('the stub did not answer ' . $path . ': ' . curl_error($curl));
        }

        return json_decode($answer, true);
    }
}
