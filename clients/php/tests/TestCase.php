<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Tests\Stub\StubServer;

/**
 * TestCase gives every test a clean stub server and a process environment without CVSM_*
 * variables, plus helpers to build a client and script secrets.
 */
abstract class TestCase extends \PHPUnit\Framework\TestCase
{
    protected const TOKEN = 'cvsm_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';
    protected const TEAM_ID = '6f1c2b9e-4d3a-4f5e-8a7b-1c2d3e4f5a6b';

    protected StubServer $stub;

    /** @var array<string, string|false> environment variables to restore after the test */
    private array $savedEnv = [];

    protected function setUp(): void
    {
        $this->stub = StubServer::instance();
        $this->stub->reset();
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
        return new Client($options + [
            'token' => self::TOKEN,
            'base_url' => $this->stub->url(),
            'team' => self::TEAM_ID,
            'timeout' => 2,
        ]);
    }

    /**
     * routeSecret makes the stub list $name (searched exactly as $name) and answer its value by id.
     */
    protected function routeSecret(string $name, string $value, string $id, string $environment = 'production', string $team = self::TEAM_ID): void
    {
        $this->stub->route(
            sprintf('GET /teams/%s/secrets?environment=%s&search=%s', $team, $environment, rawurlencode($name)),
            ['body' => ['secrets' => [['id' => $id, 'name' => $name, 'environment' => $environment, 'type' => 'credential']], 'total' => 1]]
        );
        $this->stub->route(
            sprintf('GET /teams/%s/secrets/%s', $team, $id),
            ['body' => ['secret' => ['id' => $id, 'name' => $name, 'environment' => $environment], 'value' => $value]]
        );
    }

    /**
     * routeExport makes the export endpoint answer $values.
     *
     * @param array<string, string> $values
     */
    protected function routeExport(array $values, string $environment = 'production'): void
    {
        $this->stub->route(
            sprintf('GET /teams/%s/secrets/export?format=json&environment=%s', self::TEAM_ID, $environment),
            ['body' => (object) $values]
        );
    }

    /** requestCount returns how many requests reached the stub. */
    protected function requestCount(): int
    {
        return count($this->stub->requests());
    }
}
