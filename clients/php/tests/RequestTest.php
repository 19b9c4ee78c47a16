<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ConfigurationException;

final class RequestTest extends TestCase
{
    public function testGetIsOneRequestByName(): void
    {
        $this->routeSecret('DATABASE_URL', 'postgres://db/app');

        $value = $this->client()->get('DATABASE_URL');

        self::assertSame('postgres://db/app', $value);
        $requests = $this->stub->requests();
        self::assertCount(1, $requests);
        self::assertSame('GET', $requests[0]['method']);
        self::assertSame('/api/v1/teams/' . self::TEAM_ID . '/secrets/by-name/DATABASE_URL', $requests[0]['path']);
        self::assertSame('environment=production', $requests[0]['query']);
    }

    public function testTheListingIsAskedOnlyAfterA404ToTheReadByName(): void
    {
        $this->routeMissing('GONE');

        try {
            $this->client()->get('GONE');
            self::fail('no SecretNotFoundException');
        } catch (\Cvsm\Exception\SecretNotFoundException) {
        }

        $requests = $this->stub->requests();
        self::assertSame(
            ['/api/v1/teams/' . self::TEAM_ID . '/secrets/by-name/GONE', '/api/v1/teams/' . self::TEAM_ID . '/secrets'],
            array_column($requests, 'path')
        );
        self::assertSame('environment=production&search=GONE', $requests[1]['query']);
    }

    public function testEveryRequestCarriesTokenAcceptAndUserAgent(): void
    {
        $this->routeSecret('API_KEY', 'k');
        $this->routeExport(['API_KEY' => 'k']);

        $this->routeMissing('NONE');

        $client = $this->client(['cache_ttl' => 0]);
        $client->get('API_KEY');
        $client->getAll();
        try {
            $client->get('NONE');
        } catch (\Cvsm\Exception\SecretNotFoundException) {
        }

        $requests = $this->stub->requests();
        self::assertCount(4, $requests);
        foreach ($requests as $request) {
            self::assertSame('Bearer ' . self::TOKEN, $request['headers']['authorization']);
            self::assertSame('application/json', $request['headers']['accept']);
            self::assertSame('cvsm-php/0.1.0', $request['headers']['user-agent']);
        }
        self::assertSame('cvsm-php/0.1.0', Client::USER_AGENT);
    }

    public function testEnvironmentOptionSelectsTheEnvironmentInQueries(): void
    {
        $this->routeSecret('TOKEN', 'stage-value', 'staging');
        $this->routeExport(['TOKEN' => 'stage-value'], 'staging');

        $client = $this->client(['environment' => 'staging', 'cache_ttl' => 0]);

        self::assertSame('stage-value', $client->get('TOKEN'));
        self::assertSame(['TOKEN' => 'stage-value'], $client->getAll());
        self::assertSame('environment=staging', $this->stub->requests()[0]['query']);
        self::assertSame('format=json&environment=staging', $this->stub->requests()[1]['query']);
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

    public function testATeamSlugGoesInThePathAsItIsWithoutAskingForTeams(): void
    {
        $this->routeSecret('A', '1', 'production', 'acme');
        $this->routeExport(['A' => '1'], 'production', 'acme');

        $client = $this->client(['team' => 'acme', 'cache_ttl' => 0]);
        self::assertSame('1', $client->get('A'));
        self::assertSame(['A' => '1'], $client->getAll());

        self::assertSame(
            ['/api/v1/teams/acme/secrets/by-name/A', '/api/v1/teams/acme/secrets/export'],
            array_column($this->stub->requests(), 'path')
        );
    }

    public function testTheTeamAndTheNameArePercentEncodedInThePath(): void
    {
        $this->routeSecret('A', '1', 'production', 'acme corp/ü');

        self::assertSame('1', $this->client(['team' => 'acme corp/ü'])->get('A'));

        self::assertSame('/api/v1/teams/acme%20corp%2F%C3%BC/secrets/by-name/A', $this->stub->requests()[0]['path']);
    }

    public function testAnUnknownTeamIsAConfigurationErrorFromTheListing(): void
    {
        $this->stub->route(self::byName('A', 'production', 'nope'), ['status' => 404, 'body' => ['error' => 'Tim tidak ditemukan']]);
        $this->stub->route(self::listing('A', 'production', 'nope'), ['status' => 404, 'headers' => ['X-Request-Id' => 'req-listing'], 'body' => ['error' => 'Tim tidak ditemukan']]);

        try {
            $this->client(['team' => 'nope'])->get('A');
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertSame(404, $e->getStatus());
            self::assertSame('req-listing', $e->getRequestId());
            self::assertStringContainsString('team', $e->getMessage());
        }
        self::assertSame(2, $this->requestCount());
    }

    public function testTheNameIsSentAsTheSearchQueryAfterA404(): void
    {
        $this->routeMissing('_Api_KEY_2', [], 'req-by-name', 'staging');

        try {
            $this->client(['environment' => 'staging'])->get('_Api_KEY_2');
            self::fail('no SecretNotFoundException');
        } catch (\Cvsm\Exception\SecretNotFoundException) {
        }

        self::assertSame('environment=staging', $this->stub->requests()[0]['query']);
        self::assertSame('environment=staging&search=_Api_KEY_2', $this->stub->requests()[1]['query']);
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
            self::assertStringContainsString('is not a valid secret name', $e->getMessage());
            self::assertStringNotContainsString("\0", $e->getMessage());
        }
        self::assertSame(0, $this->requestCount());
    }

    public function testTheLongestValidNameIsAsked(): void
    {
        $name = '_' . str_repeat('a', 254);
        $this->routeSecret($name, 'long');

        self::assertSame('long', $this->client()->get($name));
    }
}
