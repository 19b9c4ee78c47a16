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
     * secrets gives the stub's team these secrets of production (name => value), to read by name,
     * list and export; it forgets what was scripted and received before.
     *
     * @param array<string, string> $values
     */
    protected function secrets(array $values): void
    {
        $secrets = array_map(static fn (string $name, string $value): array => ['id' => 'id-' . $name, 'name' => $name, 'environment' => 'production', 'value' => $value], array_keys($values), $values);
        $this->stub->reset(['secrets' => $secrets]);
    }

    /** byName returns the stub route of the read by name of $name. */
    protected static function byName(string $name, string $environment = 'production', string $team = self::TEAM_ID): string
    {
        return sprintf('GET /teams/%s/secrets/by-name/%s?environment=%s', rawurlencode($team), rawurlencode($name), $environment);
    }

    /** requestCount returns how many requests reached the stub. */
    protected function requestCount(): int
    {
        return count($this->stub->requests());
    }
}
