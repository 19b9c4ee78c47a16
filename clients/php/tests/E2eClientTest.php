<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\DecryptionException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;

/**
 * E2eClientTest reads an end-to-end team through the stub with the vectors' token, which carries
 * its key part: the read, then the team key fetched once and kept until clearCache(), the opened
 * values cached, the decryption error, and the key part never on the wire or in print. Values
 * beyond the vectors are sealed here, with the primitives of docs/e2e.md.
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

    public function testADecryptionErrorIsNeverAnsweredWithAStaleValue(): void
    {
        $this->stub->route(
            self::byName('DATABASE_URL', 'production', $this->teamId),
            ['body' => ['secret' => ['id' => self::SECRET_ID, 'e2e' => true], 'value' => $this->v['values'][0]['envelope']]],
            ['body' => ['secret' => ['id' => self::SECRET_ID, 'e2e' => true], 'value' => $this->v['values'][6]['envelope']]]
        );
        $this->routeKey();
        $client = $this->e2eClient(['cache_ttl' => 0, 'stale_if_error' => 300, 'on_stale' => static function (): void {
            self::fail('a stale value was served');
        }]);

        self::assertSame($this->v['values'][0]['value'], $client->get('DATABASE_URL'));
        $this->expectException(DecryptionException::class);
        $client->get('DATABASE_URL');
    }

    public function testANewKeyVersionIsFetchedOnceMore(): void
    {
        $newKey = random_bytes(32);
        $this->stub->route(
            self::byName('DATABASE_URL', 'production', $this->teamId),
            ['body' => ['secret' => ['id' => self::SECRET_ID, 'e2e' => true], 'value' => $this->v['values'][0]['envelope']]],
            ['body' => ['secret' => ['id' => self::SECRET_ID, 'e2e' => true], 'value' => $this->seal('re-keyed', 'DATABASE_URL', $newKey, 3, 2)]]
        );
        $this->routeKey(
            ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']],
            ['team_id' => $this->teamId, 'key_version' => 3, 'wrapped_key' => $this->wrap($newKey, 3), 'links' => [
                ...E2eVectorsTest::linksUpTo(2),
                ['key_version' => 3, 'link' => $this->link($newKey, $this->teamKey, 3)],
            ]]
        );
        $client = $this->e2eClient(['cache_ttl' => 0]);

        self::assertSame($this->v['values'][0]['value'], $client->get('DATABASE_URL'));
        self::assertSame('re-keyed', $client->get('DATABASE_URL'));
        self::assertSame('re-keyed', $client->get('DATABASE_URL'));

        self::assertSame(['by-name', 'e2e', 'by-name', 'e2e', 'by-name'], array_map(
            static fn (array $request): string => str_ends_with($request['path'], '/e2e/key') ? 'e2e' : 'by-name',
            $this->stub->requests()
        ));
    }

    public function testAKeyVersionTheServerDoesNotGiveIsADecryptionErrorAfterOneFetch(): void
    {
        $this->routeSealed('DATABASE_URL', $this->seal('future', 'DATABASE_URL', random_bytes(32), 3), ['X-Request-Id' => 'req-read']);
        $this->routeKey(['body' => ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']], 'headers' => ['X-Request-Id' => 'req-key']]);

        try {
            $this->e2eClient()->get('DATABASE_URL');
            self::fail('no DecryptionException');
        } catch (DecryptionException $e) {
            self::assertStringContainsString('key version 3', $e->getMessage());
            self::assertSame('req-read', $e->getRequestId());
        }
        self::assertSame(2, $this->requestCount());
    }

    public function testAWrapThatDoesNotOpenWithTheTokensKeyIsADecryptionError(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope'], ['X-Request-Id' => 'req-read']);
        // The member's wrap: the right team key, wrapped to another key pair.
        $this->routeKey(['body' => ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][0]['wrapped_key']], 'headers' => ['X-Request-Id' => 'req-key']]);

        try {
            $this->e2eClient()->get('DATABASE_URL');
            self::fail('no DecryptionException');
        } catch (DecryptionException $e) {
            self::assertSame('DATABASE_URL', $e->getSecretName());
            self::assertSame('req-key', $e->getRequestId(), "the key answer's, which carried the wrap");
            self::assertStringContainsString('team key wrapped to this token', $e->getMessage());
            self::assertStringNotContainsString($this->v['recipients'][0]['wrapped_key'], $e->getMessage());
        }
    }

    public function testAKeyAnswerForAnotherTeamDoesNotOpen(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $this->routeKey(['team_id' => '00000000-0000-4000-8000-000000000000', 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']]);

        $this->expectException(DecryptionException::class);
        $this->e2eClient()->get('DATABASE_URL');
    }

    public function testAnExportWithoutTheMarkIsReadAsTodayByATokenWithoutItsKeyPart(): void
    {
        $this->routeSealedExport(['A' => 'plain-a', 'B' => 'plain-b']);

        self::assertSame(['A' => 'plain-a', 'B' => 'plain-b'], $this->e2eClient(['token' => $this->v['token']['api_token']])->getAll());
        self::assertSame(1, $this->requestCount());
    }

    public function testAPlainAnswerToATokenWithItsKeyIsNotTrusted(): void
    {
        // A server that drops "e2e" and serves a value in clear cannot pass it off as the team's.
        $this->stub->route(
            self::byName('DATABASE_URL', 'production', $this->teamId),
            ['body' => ['secret' => ['id' => self::SECRET_ID], 'value' => 'forged']]
        );
        $this->routeKey();

        $this->expectException(DecryptionException::class);
        $this->e2eClient()->get('DATABASE_URL');
    }

    public function testAValueBelowThePinOpensThroughTheLinksAndAMissingOneIsADecryptionError(): void
    {
        $chain = array_map([E2eVectorsTest::class, 'unb64u'], array_column($this->v['chain']['keys'], 'team_key', 'key_version'));
        $this->routeSealed('OLD', $this->seal('sealed under version 1', 'OLD', $chain[1], 1));
        // The token pins version 1: verifying the key of version 2 walked link 2, so version 1 is held.
        $this->routeKey();
        self::assertSame('sealed under version 1', $this->e2eClient()->get('OLD'));

        // A token pinned at version 2 (its commitment from the vectors) reads a version-1 value:
        // the answer carries no link of version 2, so version 1 cannot be reached.
        $this->stub->reset();
        $this->routeSealed('OLD', $this->seal('sealed under version 1', 'OLD', $chain[1], 1));
        $this->routeKey(['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key'], 'links' => []]);
        $token = $this->v['token']['api_token'] . '.' . $this->v['token']['private_key'] . '.2.' . $this->v['chain']['keys'][1]['commitment'];
        try {
            $this->e2eClient(['token' => $token])->get('OLD');
            self::fail('no DecryptionException');
        } catch (DecryptionException $e) {
            self::assertSame('OLD', $e->getSecretName());
            self::assertStringContainsString('the link of key version 2 is missing', $e->getMessage());
        }
    }

    public function testTheKeyRequestFailsWithTheUsualErrorTypes(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $cases = [
            [PermissionDeniedException::class, ['status' => 403, 'body' => ['error' => 'Token ini tidak memegang kunci tim']]],
            [ConfigurationException::class, ['status' => 404, 'body' => ['error' => 'Tim tidak ditemukan']]],
            [ConfigurationException::class, ['status' => 400, 'body' => ['error' => 'Tim ini tidak end-to-end']]],
            [NetworkException::class, ['body' => ['team_id' => $this->teamId, 'key_version' => '2', 'wrapped_key' => 'x']]],
            [NetworkException::class, ['body' => ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key'], 'links' => 'cvsm-link1.x']]],
            [NetworkException::class, ['body' => ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key'], 'links' => [['key_version' => '2', 'link' => 'x']]]]],
        ];
        foreach ($cases as [$type, $response]) {
            $this->stub->reset();
            $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
            $this->routeKey($response);
            try {
                $this->e2eClient(['max_retries' => 0])->get('DATABASE_URL');
                self::fail('no ' . $type);
            } catch (\Exception $e) {
                self::assertInstanceOf($type, $e);
            }
        }
    }

    public function testA400ToTheKeyRequestIsAConfigurationErrorAboutTheKeyPart(): void
    {
        // The token carries a key part, and the team is plain: the server refuses the key route.
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $this->routeKey(['status' => 400, 'headers' => ['X-Request-Id' => 'req-key'], 'body' => ['error' => 'Tim ini tidak end-to-end']]);

        try {
            $this->e2eClient(['max_retries' => 2])->get('DATABASE_URL');
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertSame(400, $e->getStatus());
            self::assertSame('req-key', $e->getRequestId());
            self::assertStringContainsString('Tim ini tidak end-to-end', $e->getMessage());
            self::assertStringContainsString('the team is not end-to-end, but the token carries a key part', $e->getMessage());
            self::assertStringNotContainsString('check the environment', $e->getMessage());
            self::assertStringNotContainsString($this->v['token']['private_key'], $e->getMessage());
        }
        self::assertSame(2, $this->requestCount(), 'read and key, no retry');
    }

    public function testAPermissionErrorOnTheKeyEmptiesTheCache(): void
    {
        $this->routeSealed('DATABASE_URL', $this->v['values'][0]['envelope']);
        $this->routeSealed('OTHER', $this->seal('x', 'OTHER', $this->teamKey, 3));
        $this->routeKey(
            ['body' => ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']]],
            ['status' => 403, 'body' => ['error' => 'Akses ditolak']],
            ['body' => ['team_id' => $this->teamId, 'key_version' => 2, 'wrapped_key' => $this->v['recipients'][1]['wrapped_key']]]
        );
        $client = $this->e2eClient();
        $client->get('DATABASE_URL');

        try {
            $client->get('OTHER'); // key version 3: the key is asked for again, and refused
            self::fail('no PermissionDeniedException');
        } catch (PermissionDeniedException) {
        }
        $client->get('DATABASE_URL');

        self::assertSame(6, $this->requestCount(), 'the value and the key went with the cache');
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
     * routeSealedExport makes the JSON export of production answer $values with $headers.
     *
     * @param array<string, string> $values
     * @param array<string, string> $headers
     */
    private function routeSealedExport(array $values, array $headers = []): void
    {
        $this->stub->route(
            sprintf('GET /teams/%s/secrets/export?format=json&environment=production', $this->teamId),
            ['headers' => $headers, 'body' => (object) $values]
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

    /** assertTheKeyPartNeverWentOut checks every request: the bearer is the API token, and the key part is nowhere. */
    private function assertTheKeyPartNeverWentOut(): void
    {
        $requests = $this->stub->requests();
        self::assertNotEmpty($requests);
        foreach ($requests as $request) {
            self::assertSame('Bearer ' . $this->v['token']['api_token'], $request['headers']['authorization']);
            self::assertStringNotContainsString($this->v['token']['private_key'], (string) json_encode($request, JSON_UNESCAPED_SLASHES));
        }
    }

    /**
     * seal seals $value for $name in production, as docs/e2e.md's "Sealed value" says, under
     * $teamKey (default: the vectors' key) of $keyVersion.
     */
    private function seal(string $value, string $name, ?string $teamKey = null, int $keyVersion = 2, int $version = 1): string
    {
        $nonce = random_bytes(12);
        $aad = sprintf('cvsm-e2e:v1:secret:%s:%s:%d:%s:%s', $this->teamId, self::SECRET_ID, $version, 'production', $name);
        $ciphertext = openssl_encrypt($value, 'aes-256-gcm', $teamKey ?? $this->teamKey, OPENSSL_RAW_DATA, $nonce, $tag, $aad, 16);

        return sprintf('cvsm-e2e1.%d.%s.%d.%s.%s', $keyVersion, self::SECRET_ID, $version, self::b64u($nonce), self::b64u($ciphertext . $tag));
    }

    /** wrap wraps $teamKey of $keyVersion to the vectors' token, as docs/e2e.md's "Wrapped team key" says. */
    private function wrap(string $teamKey, int $keyVersion): string
    {
        $recipient = E2eVectorsTest::unb64u($this->v['recipients'][1]['public_key']);
        $ephemeral = random_bytes(32);
        $ephemeralPublic = sodium_crypto_scalarmult_base($ephemeral);
        $wrapping = hash_hkdf('sha256', sodium_crypto_scalarmult($ephemeral, $recipient), 32, 'cvsm-e2e:v1:wrap', $ephemeralPublic . $recipient);
        $nonce = random_bytes(12);
        $aad = sprintf('cvsm-e2e:v1:team-key:%s:%d', $this->teamId, $keyVersion);
        $ciphertext = openssl_encrypt($teamKey, 'aes-256-gcm', $wrapping, OPENSSL_RAW_DATA, $nonce, $tag, $aad, 16);

        return sprintf('cvsm-wrap1.%s.%s.%s', self::b64u($ephemeralPublic), self::b64u($nonce), self::b64u($ciphertext . $tag));
    }

    /** link seals $oldKey under $newKey of $newVersion, as docs/e2e.md's "Back-link" says. */
    private function link(string $newKey, string $oldKey, int $newVersion): string
    {
        $nonce = random_bytes(12);
        $ciphertext = openssl_encrypt($oldKey, 'aes-256-gcm', $newKey, OPENSSL_RAW_DATA, $nonce, $tag, sprintf('cvsm-e2e:v2:link:%s:%d', $this->teamId, $newVersion), 16);

        return sprintf('cvsm-link1.%s.%s', self::b64u($nonce), self::b64u($ciphertext . $tag));
    }

    private static function b64u(string $bytes): string
    {
        return rtrim(strtr(base64_encode($bytes), '+/', '-_'), '=');
    }
}
