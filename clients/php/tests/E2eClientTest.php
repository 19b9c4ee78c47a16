<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\DecryptionException;

/**
 * E2eClientTest reads an end-to-end team on the shared stub (TestCase::e2eTeam) with the vectors' token, which carries
 * its key part: a clone's own team key, a key answer for another team, and the key part never in
 * print. The wire rules (the requests, the key kept and fetched again, every error of the reads
 * and of the key request) are the conformance cases e2e_*.
 */
final class E2eClientTest extends TestCase
{
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
        $this->e2eTeam([['DATABASE_URL', 'production', $this->v['values'][0]['envelope']]]);
        $client = $this->e2eClient();
        $client->get('DATABASE_URL');

        $copy = clone $client;
        self::assertSame($this->v['values'][0]['value'], $copy->get('DATABASE_URL'));

        self::assertSame(4, $this->requestCount());
    }

    public function testAKeyAnswerForAnotherTeamDoesNotOpen(): void
    {
        $this->e2eTeam([['DATABASE_URL', 'production', $this->v['values'][0]['envelope']]], ['team_id' => '00000000-0000-4000-8000-000000000000']);

        $this->expectException(DecryptionException::class);
        $this->e2eClient()->get('DATABASE_URL');
    }

    public function testThePrintedClientShowsNeitherTheKeyPartNorTheTeamKeyNorAValue(): void
    {
        $this->e2eTeam([['DATABASE_URL', 'production', $this->v['values'][0]['envelope']]]);
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
}
