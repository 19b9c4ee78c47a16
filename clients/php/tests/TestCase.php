<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;

/**
 * TestCase gives every test the shared stub API (conformance/stub.py, one for the whole run)
 * reset to know the test token and team, a process environment without CVSM_* variables, and
 * helpers to build a client and script secrets.
 */
abstract class TestCase extends \PHPUnit\Framework\TestCase
{
    protected const TOKEN = 'cvsm_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';
    protected const TEAM_ID = '6f1c2b9e-4d3a-4f5e-8a7b-1c2d3e4f5a6b';

    protected Stub $stub;

    private static ?Stub $shared = null;

    /** @var array<string, string|false> environment variables to restore after the test */
    private array $savedEnv = [];

    protected function setUp(): void
    {
        $this->stub = self::$shared ??= new Stub();
        $this->stub->reset(['token' => self::TOKEN, 'teams' => [['id' => self::TEAM_ID, 'slug' => 'acme']], 'secrets' => []]);
        foreach (array_keys(getenv()) as $name) {
            if (str_starts_with($name, 'CVSM_')) {
                $this->setEnv($name, null);
            }
        }
    }

    protected function tearDown(): void
    {
        foreach ($this->savedEnv as $name => $value) {
            $name = (string) $name; // "0" is an int key
            $value === false ? putenv($name) : putenv($name . '=' . $value);
            unset($_ENV[$name], $_SERVER[$name]);
        }
        $this->savedEnv = [];
    }

    /** setEnv sets (or, for null, unsets) a process variable for the duration of the test. */
    protected function setEnv(string $name, ?string $value): void
    {
        if (!array_key_exists($name, $this->savedEnv)) {
            $this->savedEnv[$name] = getenv($name);
        }
        $value === null ? putenv($name) : putenv($name . '=' . $value);
    }

    /**
     * client builds a client against the stub with the test token and team id; $options override.
     *
     * @param array<string, mixed> $options
     */
    protected function client(array $options = []): Client
    {
        $defaults = [
            'token' => self::TOKEN,
            'base_url' => $this->stub->url(),
            'team' => self::TEAM_ID,
        ];
        // A PSR-18 client owns its timeout (a "timeout" beside it is refused).
        if (!isset($options['http_client'])) {
            $defaults['timeout'] = 2;
        }

        return new Client($options + $defaults);
    }

    /**
     * routeSecret makes the stub answer the read by name of $name with $value.
     */
    protected function routeSecret(string $name, string $value, string $environment = 'production', string $team = self::TEAM_ID): void
    {
        $this->stub->route(
            self::byName($name, $environment, $team),
            ['body' => ['secret' => ['id' => 'id-' . strtolower($name), 'name' => $name, 'environment' => $environment, 'type' => 'credential'], 'value' => $value]]
        );
    }

    /**
     * routeMissing makes the read by name of $name answer 404 (with $requestId) and the listing
     * searched for $name answer the secrets named $listed.
     *
     * @param list<string> $listed
     */
    protected function routeMissing(string $name, array $listed = [], string $requestId = 'req-by-name', string $environment = 'production'): void
    {
        $this->stub->route(self::byName($name, $environment), ['status' => 404, 'headers' => ['X-Request-Id' => $requestId], 'body' => ['error' => 'Secret tidak ditemukan']]);
        $this->stub->route(self::listing($name, $environment), ['headers' => ['X-Request-Id' => 'req-listing'], 'body' => [
            'secrets' => array_map(static fn (string $listedName): array => ['id' => 'id-' . $listedName, 'name' => $listedName, 'environment' => $environment], $listed),
            'total' => count($listed),
        ]]);
    }

    /** byName returns the stub route of the read by name of $name. */
    protected static function byName(string $name, string $environment = 'production', string $team = self::TEAM_ID): string
    {
        return sprintf('GET /teams/%s/secrets/by-name/%s?environment=%s', rawurlencode($team), rawurlencode($name), $environment);
    }

    /** listing returns the stub route of the listing searched for $name. */
    protected static function listing(string $name, string $environment = 'production', string $team = self::TEAM_ID): string
    {
        return sprintf('GET /teams/%s/secrets?environment=%s&search=%s', rawurlencode($team), $environment, rawurlencode($name));
    }

    /**
     * routeExport makes the export endpoint answer $values.
     *
     * @param array<string, string> $values
     */
    protected function routeExport(array $values, string $environment = 'production', string $team = self::TEAM_ID): void
    {
        $this->stub->route(
            sprintf('GET /teams/%s/secrets/export?format=json&environment=%s', rawurlencode($team), $environment),
            ['body' => (object) $values]
        );
    }

    /** requestCount returns how many requests reached the stub. */
    protected function requestCount(): int
    {
        return count($this->stub->requests());
    }
}
