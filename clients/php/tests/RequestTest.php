<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ConfigurationException;

final class RequestTest extends TestCase
{
    public function testGetListsByEnvironmentAndNameThenReadsTheValueById(): void
    {
        $this->routeSecret('DATABASE_URL', 'postgres://db/app', 'a1b2c3d4-0000-4000-8000-000000000001');

        $value = $this->client()->get('DATABASE_URL');

        self::assertSame('postgres://db/app', $value);
        $requests = $this->stub->requests();
        self::assertCount(2, $requests);
        self::assertSame('GET', $requests[0]['method']);
        self::assertSame('/api/v1/teams/' . self::TEAM_ID . '/secrets', $requests[0]['path']);
        self::assertSame('environment=production&search=DATABASE_URL', $requests[0]['query']);
        self::assertSame('/api/v1/teams/' . self::TEAM_ID . '/secrets/a1b2c3d4-0000-4000-8000-000000000001', $requests[1]['path']);
        self::assertSame('', $requests[1]['query']);
    }

    public function testEveryRequestCarriesTokenAcceptAndUserAgent(): void
    {
        $this->routeSecret('API_KEY', 'k', 'id-1');
        $this->routeExport(['API_KEY' => 'k']);

        $client = $this->client(['cache_ttl' => 0]);
        $client->get('API_KEY');
        $client->getAll();

        $requests = $this->stub->requests();
        self::assertCount(3, $requests);
        foreach ($requests as $request) {
            self::assertSame('Bearer ' . self::TOKEN, $request['headers']['authorization']);
            self::assertSame('application/json', $request['headers']['accept']);
            self::assertSame('cvsm-php/0.1.0', $request['headers']['user-agent']);
        }
        self::assertSame('cvsm-php/0.1.0', Client::USER_AGENT);
    }

    public function testGetPicksTheExactNameAmongCaseInsensitiveMatches(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets?environment=production&search=api_key', ['body' => [
            'secrets' => [
                ['id' => 'upper', 'name' => 'API_KEY', 'environment' => 'production'],
                ['id' => 'lower', 'name' => 'api_key', 'environment' => 'production'],
            ],
            'total' => 2,
        ]]);
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/lower', ['body' => ['secret' => ['id' => 'lower'], 'value' => 'the-lower-one']]);

        self::assertSame('the-lower-one', $this->client()->get('api_key'));
    }

    public function testEnvironmentOptionSelectsTheEnvironmentInQueries(): void
    {
        $this->routeSecret('TOKEN', 'stage-value', 'id-s', 'staging');
        $this->routeExport(['TOKEN' => 'stage-value'], 'staging');

        $client = $this->client(['environment' => 'staging', 'cache_ttl' => 0]);

        self::assertSame('stage-value', $client->get('TOKEN'));
        self::assertSame(['TOKEN' => 'stage-value'], $client->getAll());
        self::assertSame('format=json&environment=staging', $this->stub->requests()[2]['query']);
    }

    public function testGetAllUsesTheJsonExport(): void
    {
        $this->routeExport(['B' => '2', 'A' => '1']);

        $values = $this->client()->getAll();

        self::assertSame(['A' => '1', 'B' => '2'], $values);
        $request = $this->stub->requests()[0];
        self::assertSame('/api/v1/teams/' . self::TEAM_ID . '/secrets/export', $request['path']);
        self::assertSame('format=json&environment=production', $request['query']);
    }

    public function testGetAllOfAnEmptyEnvironmentIsAnEmptyArray(): void
    {
        $this->routeExport([]);

        self::assertSame([], $this->client()->getAll());
    }

    public function testTeamSlugIsResolvedOnceThroughTeams(): void
    {
        $this->stub->route('GET /teams', ['body' => ['teams' => [
            ['id' => '11111111-1111-4111-8111-111111111111', 'slug' => 'other', 'name' => 'Other'],
            ['id' => self::TEAM_ID, 'slug' => 'acme', 'name' => 'Acme'],
        ]]]);
        $this->routeSecret('A', '1', 'id-a');
        $this->routeSecret('B', '2', 'id-b');

        $client = $this->client(['team' => 'acme']);
        $client->get('A');
        $client->get('B');
        $client->clearCache();
        $client->get('A');

        $paths = array_column($this->stub->requests(), 'path');
        self::assertSame(1, count(array_keys($paths, '/api/v1/teams', true)), 'GET /teams exactly once');
        self::assertSame('/api/v1/teams', $paths[0]);
        self::assertCount(7, $paths);
    }

    public function testTeamIdIsUsedWithoutAskingForTeams(): void
    {
        $this->routeSecret('A', '1', 'id-a');

        $this->client(['team' => self::TEAM_ID])->get('A');

        self::assertNotContains('/api/v1/teams', array_column($this->stub->requests(), 'path'));
    }

    public function testTeamSlugThatMatchesNoTeamIsAConfigurationError(): void
    {
        $this->stub->route('GET /teams', ['body' => ['teams' => [['id' => self::TEAM_ID, 'slug' => 'acme', 'name' => 'Acme']]]]);

        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('"nope"');
        $this->client(['team' => 'nope'])->get('A');
    }

    public function testTheNameIsSentAsTheSearchQuery(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets', ['body' => ['secrets' => [], 'total' => 0]]);

        try {
            $this->client(['environment' => 'staging'])->get('_Api_KEY_2');
            self::fail('no SecretNotFoundException');
        } catch (\Cvsm\Exception\SecretNotFoundException) {
        }

        self::assertSame('environment=staging&search=_Api_KEY_2', $this->stub->requests()[0]['query']);
    }

    /**
     * @return iterable<string, array{0: string}>
     */
    public static function invalidNames(): iterable
    {
        yield 'empty' => [''];
        yield 'space and ampersand' => ['A B&c'];
        yield 'leading digit' => ['1ABC'];
        yield 'dash' => ['API-KEY'];
        yield 'dot' => ['a.b'];
        yield 'trailing newline' => ["API_KEY\n"];
        yield 'NUL' => ["API\0KEY"];
        yield 'non-ASCII' => ['KLÜCZ'];
        yield 'path' => ['../export'];
        yield '256 characters' => [str_repeat('A', 256)];
    }

    /**
     * @dataProvider invalidNames
     */
    public function testAnInvalidNameIsNotFoundWithoutARequest(string $name): void
    {
        $client = $this->client(['team' => 'acme']);

        try {
            $client->get($name);
            self::fail('no SecretNotFoundException');
        } catch (\Cvsm\Exception\SecretNotFoundException $e) {
            self::assertNull($e->getStatus());
            self::assertNull($e->getRequestId());
            self::assertNull($e->getSuggestion());
            self::assertSame($name, $e->getSecretName());
            self::assertStringContainsString('is not valid', $e->getMessage());
            self::assertStringNotContainsString("\0", $e->getMessage());
        }
        self::assertSame(0, $this->requestCount());
    }

    public function testTheLongestValidNameIsAsked(): void
    {
        $name = '_' . str_repeat('a', 254);
        $this->routeSecret($name, 'long', 'id-long');

        self::assertSame('long', $this->client()->get($name));
    }
}
