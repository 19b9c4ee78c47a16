<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\DecryptionException;

/**
 * E2eClientTest reads an end-to-end team through the stub with the vectors' token, which carries
 * its key part: a clone's own team key, a key answer for another team, and the key part never in
 * print. The wire rules (the requests, the key kept and fetched again, every error of the reads
 * and of the key request) are the conformance cases e2e_*.
 */
final class E2eClientTest extends TestCase
{
    private const SECRET_ID = '3d6f0a4e-1b2c-4d5e-8f90-a1b2c3d4e5f6';

    /** @var array<string, mixed> */
    private array $v;
    private string $teamId;
    private string $teamKey;

    protected function setUp(): void
    {
        parent::setUp();
        $this->v = E2eVectorsTest::vectors();
        $this->teamId = $this->v['team_id'];
        $this->teamKey = E2eVectorsTest::unb64u($this->v['team_key']);
    }

    public function testACloneFetchesTheTeamKeyItself(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $this->routeKey();
        $client = $this->e2eClient();
        $client->get('DATABASE_URL');

        $copy = clone $client;
        self::assertSame($this->v['values'][0]['value'], $copy->get('DATABASE_URL'));

        self::assertSame(4, $this->requestCount());
    }

    public function testAKeyAnswerForAnotherTeamDoesNotOpen(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $this->routeKey(['team_id' => '00000000-0000-4000-8000-000000000000', 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']]);

        $this->expectException(DecryptionException::class);
        $this->e2eClient()->get('DATABASE_URL');
    }

    public function testThePrintedClientShowsNeitherTheKeyPartNorTheTeamKeyNorAValue(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $this->routeKey();
        $client = $this->e2eClient();
        $client->get('DATABASE_URL');

        ob_start();
        var_dump($client);
        $forms = [
            'var_dump' => (string) ob_get_clean(),
            'print_r' => print_r($client, true),
            'var_export' => var_export($client, true),
            'json_encode' => (string) json_encode($client),
            'array cast' => print_r((array) $client, true),
        ];
        $secrets = [
            $this->v['token']['private_key'], E2eVectorsTest::unb64u($this->v['token']['private_key']),
            $this->v['token']['api_token'], $this->v['team_key'], $this->teamKey, $this->v['values'][0]['value'],
        ];
        foreach ($forms as $form => $text) {
            foreach ($secrets as $secret) {
                self::assertStringNotContainsString($secret, $text, $form);
            }
        }
    }

    /**
     * e2eClient builds a client of the vectors' team with the vectors' token (its key part
     * included); $options override.
     *
     * @param array<string, mixed> $options
     */
    private function e2eClient(array $options = []): Client
    {
        return $this->client($options + ['token' => $this->v['token']['token'], 'team' => $this->teamId]);
    }

    /**
     * routeSealed makes the read by name of $name answer the sealed $envelope, as an end-to-end
     * team does, with $headers.
     *
     * @param array<string, string> $headers
     */
    private function routeSealed(string $name, string $envelope, array $headers = []): void
    {
        $this->stub->route(
            self::byName($name, 'production', $this->teamId),
            ['headers' => $headers, 'body' => ['secret' => ['id' => self::SECRET_ID, 'name' => $name, 'environment' => 'production', 'e2e' => true], 'value' => $envelope]]
        );
    }

    /**
     * routeKey makes GET /teams/{team}/e2e/key answer $responses in order (a response or a key
     * answer's body); by default the vectors' key version 2 wrapped to the token. A body without
     * "links" gets the chain's links up to version 2.
     *
     * @param array<string, mixed> ...$responses
     */
    private function routeKey(array ...$responses): void
    {
        if ($responses === []) {
            $responses = [['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']]];
        }
        $responses = array_map(
            static fn (array $response): array => isset($response['body']) || isset($response['status']) ? $response : ['body' => $response],
            $responses
        );
        // A key answer carries the team's links: by default those that chain version 2 to the token's pin (version 1).
        foreach ($responses as &$response) {
            if (is_array($response['body'] ?? null) && !array_key_exists('links', $response['body'])) {
                $response['body']['links'] = E2eVectorsTest::linksUpTo(2);
            }
        }
        unset($response);
        $this->stub->route(sprintf('GET /teams/%s/e2e/key', $this->teamId), ...$responses);
    }
}
