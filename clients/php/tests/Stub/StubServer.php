<?php

declare(strict_types=1);

namespace Cvsm\Tests\Stub;

/**
 * StubServer runs router.php under PHP's built-in web server for the whole test run and lets each
 * test script its responses and read the requests it received.
 */
final class StubServer
{
    private static ?self $instance = null;

    /** @var resource */
    private $process;

    private function __construct(public readonly int $port, public readonly string $dir)
    {
    }

    /**
     * start launches the built-in server on a free port and waits until it accepts connections.
     */
    public static function start(): self
    {
        if (self::$instance !== null) {
            return self::$instance;
        }
        $dir = sys_get_temp_dir() . '/cvsm-php-stub-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($dir, 0700, true);
        $port = self::freePort();
        $server = new self($port, $dir);
        $env = getenv() + [];
        $env['CVSM_STUB_DIR'] = $dir;
        $env['PHP_CLI_SERVER_WORKERS'] = '4';
        $process = proc_open(
            [PHP_BINARY, '-d', 'display_errors=stderr', '-S', '127.0.0.1:' . $port, __DIR__ . '/router.php'],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $dir . '/server.log', 'a'], 2 => ['file', $dir . '/server.log', 'a']],
            $pipes,
            $dir,
            $env
        );
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot start the stub server');
        }
        $server->process = $process;
        $deadline = microtime(true) + 10;
        while (true) {
            $socket = @fsockopen('127.0.0.1', $port, $errno, $errstr, 0.2);
            if ($socket !== false) {
                fclose($socket);
                break;
            }
            if (microtime(true) > $deadline || !proc_get_status($process)['running']) {
                throw new \RuntimeException('the stub server did not start: ' . @file_get_contents($dir . '/server.log'));
            }
            usleep(50_000);
        }
        register_shutdown_function([$server, 'stop']);

        return self::$instance = $server;
    }

    /** instance returns the running server. */
    public static function instance(): self
    {
        return self::$instance ?? self::start();
    }

    /** url returns the API root of the stub, like a real base URL. */
    public function url(): string
    {
        return 'http://127.0.0.1:' . $this->port . '/api/v1';
    }

    /** reset forgets every route and logged request. */
    public function reset(): void
    {
        foreach (['routes.json', 'hits.json', 'requests.jsonl'] as $file) {
            @unlink($this->dir . '/' . $file);
        }
    }

    /**
     * route makes "METHOD /path[?query]" (path under /api/v1) answer $responses in order, the last
     * one repeating. A response has status, headers, body (string, or data sent as JSON),
     * delay_ms, truncate (drop the connection mid-body), drip_ms (send the body one byte at a
     * time, sleeping that long before each).
     *
     * @param array{status?: int, headers?: array<string, string>, body?: mixed, delay_ms?: int, truncate?: bool, drip_ms?: int} ...$responses
     */
    public function route(string $route, array ...$responses): void
    {
        [$method, $target] = explode(' ', $route, 2);
        $file = $this->dir . '/routes.json';
        $routes = is_file($file) ? json_decode((string) file_get_contents($file), true) : [];
        foreach ($responses as &$response) {
            // Encode data here, so that {} and [] survive the trip through routes.json.
            if (array_key_exists('body', $response) && !is_string($response['body'])) {
                $response['body'] = json_encode($response['body']);
                $response['json'] = true;
            }
        }
        unset($response);
        $routes[$method . ' /api/v1' . $target] = $responses;
        file_put_contents($file, json_encode($routes));
    }

    /**
     * requests returns what the stub received, oldest first: method, path, query, headers
     * (lower-case names), proxied_for (the host of a request in absolute form, sent to the stub
     * as a proxy; else null).
     *
     * @return list<array{method: string, path: string, query: string, headers: array<string, string>, proxied_for: ?string}>
     */
    public function requests(): array
    {
        $file = $this->dir . '/requests.jsonl';
        if (!is_file($file)) {
            return [];
        }
        $lines = array_filter(explode("\n", (string) file_get_contents($file)));

        return array_values(array_map(static fn (string $line) => json_decode($line, true), $lines));
    }

    /** stop ends the server and removes its files. */
    public function stop(): void
    {
        if (is_resource($this->process)) {
            // With PHP_CLI_SERVER_WORKERS the server forks workers that outlive their parent, so
            // end the workers (children of the server process) first, by pid.
            $pid = proc_get_status($this->process)['pid'];
            foreach (self::childrenOf($pid) as $child) {
                function_exists('posix_kill') ? posix_kill($child, 15) : exec('kill ' . $child);
            }
            proc_terminate($this->process);
            proc_close($this->process);
        }
        foreach (glob($this->dir . '/*') ?: [] as $file) {
            @unlink($file);
        }
        @rmdir($this->dir);
    }

    /**
     * @return list<int>
     */
    private static function childrenOf(int $pid): array
    {
        $children = [];
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $statFile) {
            $stat = @file_get_contents($statFile);
            // The fields after the parenthesised command name: state, ppid, ...
            if ($stat !== false && preg_match('/\)\s+\S+\s+(\d+)/', $stat, $m) && (int) $m[1] === $pid) {
                $children[] = (int) basename(dirname($statFile));
            }
        }

        return $children;
    }

    private static function freePort(): int
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        if ($socket === false) {
            throw new \RuntimeException('cannot find a free port: ' . $errstr);
        }
        $name = (string) stream_socket_get_name($socket, false);
        fclose($socket);

        return (int) substr($name, strrpos($name, ':') + 1);
    }
}
