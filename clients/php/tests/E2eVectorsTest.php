<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\DecryptionException;
use Cvsm\Internal\E2e;
use Cvsm\Internal\E2eError;

/**
 * E2eVectorsTest opens every entry of the shared end-to-end vectors
 * (conformance/vectors/e2e.json, read from the repository as it is, made by
 * conformance/e2e_vectors.py), as every language does: each recipient's wrapped key opens to the
 * team key, each value opens (or fails with DecryptionException) through the client against the
 * stub, the token splits into its API token and key, and each bad token is a configuration error.
 */
final class E2eVectorsTest extends TestCase
{
    /** @var array<string, mixed>|null */
    private static ?array $vectors = null;

    /**
     * vectors returns conformance/vectors/e2e.json, decoded.
     *
     * @return array<string, mixed>
     */
    public static function vectors(): array
    {
        if (self::$vectors === null) {
            $file = dirname(__DIR__, 3) . '/conformance/vectors/e2e.json';
            self::$vectors = json_decode((string) file_get_contents($file), true, 512, JSON_THROW_ON_ERROR);
        }

        return self::$vectors;
    }

    /**
     * seal seals $value for $name in production under $teamKey of $keyVersion, as docs/e2e.md's
     * "Sealed value" says.
     */
    public static function seal(string $value, string $name, string $teamKey, int $keyVersion, string $teamId): string
    {
        $secretId = '3d6f0a4e-1b2c-4d5e-8f90-a1b2c3d4e5f6';
        $nonce = random_bytes(12);
        $aad = sprintf('cvsm-e2e:v1:secret:%s:%s:1:production:%s', $teamId, $secretId, $name);
        $ciphertext = openssl_encrypt($value, 'aes-256-gcm', $teamKey, OPENSSL_RAW_DATA, $nonce, $tag, $aad, 16);

        return sprintf(
            'cvsm-e2e1.%d.%s.1.%s.%s',
            $keyVersion,
            $secretId,
            rtrim(strtr(base64_encode($nonce), '+/', '-_'), '='),
            rtrim(strtr(base64_encode($ciphertext . $tag), '+/', '-_'), '=')
        );
    }

    /**
     * linksUpTo returns the chain's links of key versions up to $keyVersion, as a key answer
     * carries them (the vectors' token is pinned at version 1).
     *
     * @return list<array{key_version: int, link: string}>
     */
    public static function linksUpTo(int $keyVersion): array
    {
        return array_values(array_map(
            static fn (array $link): array => ['key_version' => $link['key_version'], 'link' => $link['link']],
            array_filter(self::vectors()['chain']['links'], static fn (array $link): bool => $link['key_version'] <= $keyVersion)
        ));
    }

    /** b64u decodes base64url without padding. */
    public static function unb64u(string $text): string
    {
        return (string) base64_decode(strtr($text, '-_', '+/'), true);
    }

    public function testTheVectorsAreTheOnesThisTestKnows(): void
    {
        $vectors = self::vectors();

        self::assertSame('cvsm end-to-end vectors, docs/e2e.md, version 2', $vectors['format']);
        self::assertContains('integrity', array_column($vectors['token_pins'], 'outcome'));
        self::assertContains('ok', array_column($vectors['token_pins'], 'outcome'));
        self::assertCount(2, $vectors['recipients']);
        self::assertGreaterThanOrEqual(4, count(array_filter($vectors['values'], static fn (array $v): bool => $v['opens'])));
        self::assertGreaterThanOrEqual(4, count(array_filter($vectors['values'], static fn (array $v): bool => !$v['opens'])));
    }

    public function testEveryRecipientsWrappedKeyOpensToTheTeamKey(): void
    {
        $vectors = self::vectors();
        foreach ($vectors['recipients'] as $recipient) {
            $private = self::unb64u($recipient['private_key']);
            self::assertSame(self::unb64u($recipient['public_key']), sodium_crypto_scalarmult_base($private), $recipient['what']);

            $teamKey = E2e::unwrapTeamKey($recipient['wrapped_key'], $vectors['team_id'], $vectors['key_version'], $private);

            self::assertSame(self::unb64u($vectors['team_key']), $teamKey, $recipient['what']);
        }
    }

    public function testAWrapOpensOnlyForItsTeamKeyVersionAndRecipient(): void
    {
        $vectors = self::vectors();
        [$member, $token] = $vectors['recipients'];
        $attempts = [
            'another team' => [$token['wrapped_key'], '00000000-0000-4000-8000-000000000000', $vectors['key_version'], $token['private_key']],
            'another key version' => [$token['wrapped_key'], $vectors['team_id'], $vectors['key_version'] + 1, $token['private_key']],
            'another recipient' => [$member['wrapped_key'], $vectors['team_id'], $vectors['key_version'], $token['private_key']],
            'malformed' => ['cvsm-wrap1.AA.AA.AA', $vectors['team_id'], $vectors['key_version'], $token['private_key']],
            'a low-order ephemeral key' => [
                'cvsm-wrap1.' . str_repeat('A', 43) . substr($token['wrapped_key'], strlen('cvsm-wrap1.') + 43),
                $vectors['team_id'],
                $vectors['key_version'],
                $token['private_key'],
            ],
        ];
        foreach ($attempts as $what => [$wrapped, $teamId, $version, $private]) {
            try {
                E2e::unwrapTeamKey($wrapped, $teamId, $version, self::unb64u($private));
                self::fail($what . ' opened');
            } catch (E2eError $e) {
                self::assertStringNotContainsString($private, $e->getMessage(), $what);
            }
        }
    }

    public function testTheTokenSplitsIntoItsApiTokenAndItsKey(): void
    {
        $token = self::vectors()['token'];

        self::assertSame(
            [$token['api_token'], self::unb64u($token['private_key']), $token['key_version'], self::unb64u($token['commitment'])],
            E2e::splitToken($token['token'])
        );
        self::assertSame([$token['api_token'], null, null, null], E2e::splitToken($token['api_token']));
        $jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl';
        self::assertSame([$jwt, null, null, null], E2e::splitToken($jwt), 'a JWT has dots of its own and no key part');
    }

    public function testEveryKeyOfTheChainHasItsCommitmentAndEveryLinkOpensToTheKeyBelow(): void
    {
        $chain = self::vectors()['chain'];
        $keys = [];
        foreach ($chain['keys'] as $key) {
            $keys[$key['key_version']] = self::unb64u($key['team_key']);
            self::assertSame(self::unb64u($key['commitment']), E2e::commitment($keys[$key['key_version']], $chain['team_id'], $key['key_version']));
            self::assertNotSame(
                self::unb64u($key['commitment']),
                E2e::commitment($keys[$key['key_version']], '00000000-0000-4000-8000-000000000000', $key['key_version']),
                'a commitment names its team'
            );
        }
        foreach ($chain['links'] as $link) {
            self::assertSame(
                self::unb64u($link['opens_to']),
                E2e::openLink($link['link'], $keys[$link['key_version']], $chain['team_id'], $link['key_version'])
            );
        }
    }

    public function testNoBadLinkOpens(): void
    {
        $chain = self::vectors()['chain'];
        foreach ($chain['bad_links'] as $bad) {
            try {
                E2e::openLink($bad['link'], self::unb64u($bad['key']), $chain['team_id'], $bad['key_version']);
                self::fail($bad['why'] . ' opened');
            } catch (E2eError $e) {
                self::assertStringNotContainsString($bad['key'], $e->getMessage(), $bad['why']);
            }
        }
    }

    /**
     * @return array<string, array{0: array<string, mixed>}>
     */
    public static function tokenPins(): array
    {
        $cases = [];
        foreach (self::vectors()['token_pins'] as $i => $pin) {
            $cases[sprintf('pin %d: %s (%s)', $i, $pin['why'], $pin['outcome'])] = [$pin];
        }

        return $cases;
    }

    /**
     * Each token_pins entry through E2e alone: the token parses, its wrap opens, and the chain
     * from the answer's key version verifies to the pin (ok) or is refused (integrity).
     *
     * @dataProvider tokenPins
     * @param array<string, mixed> $pin
     */
    public function testEveryTokenPinVerifiesOrIsRefused(array $pin): void
    {
        $answer = $pin['key_answer'];
        $links = array_column($answer['links'], 'link', 'key_version');
        [, $private, $pinVersion, $commitment] = E2e::splitToken($pin['token']);
        try {
            $key = E2e::unwrapTeamKey($answer['wrapped_key'], $answer['team_id'], $answer['key_version'], (string) $private);
            $keys = E2e::verifyChain($key, $answer['key_version'], $answer['team_id'], $links, (int) $pinVersion, (string) $commitment);
            self::assertSame('ok', $pin['outcome'], $pin['why']);
            $chain = array_column(self::vectors()['chain']['keys'], 'team_key', 'key_version');
            foreach ($keys as $version => $verified) {
                self::assertSame(self::unb64u($chain[$version]), $verified, $pin['why']);
            }
            self::assertSame(range($answer['key_version'], (int) $pinVersion), array_keys($keys));
        } catch (E2eError $e) {
            self::assertSame('integrity', $pin['outcome'], $pin['why'] . ': ' . $e->getMessage());
        }
    }

    /**
     * Each token_pins entry through the client against the stub: an "ok" answer opens a value
     * sealed under the answer's key version and one under version 1 (reached through the links),
     * an "integrity" one is a DecryptionException for the secret read, nothing is kept, and the
     * next read fetches the key again (never served from a cache).
     *
     * @dataProvider tokenPins
     * @param array<string, mixed> $pin
     */
    public function testEveryTokenPinThroughTheClient(array $pin): void
    {
        $answer = $pin['key_answer'];
        $chain = array_column(self::vectors()['chain']['keys'], 'team_key', 'key_version');
        $current = self::seal('current', 'CURRENT', self::unb64u($chain[3]), 3, $answer['team_id']);
        $oldest = self::seal('oldest', 'OLDEST', self::unb64u($chain[1]), 1, $answer['team_id']);
        foreach (['CURRENT' => $current, 'OLDEST' => $oldest] as $name => $envelope) {
            $this->stub->route(
                self::byName($name, 'production', $answer['team_id']),
                ['body' => ['secret' => ['id' => 'x', 'name' => $name, 'e2e' => true], 'value' => $envelope]]
            );
        }
        $this->stub->route(sprintf('GET /teams/%s/e2e/key', $answer['team_id']), ['body' => $answer]);
        $client = $this->client(['token' => $pin['token'], 'team' => $answer['team_id']]);

        if ($pin['outcome'] === 'ok') {
            self::assertSame('current', $client->get('CURRENT'));
            self::assertSame('oldest', $client->get('OLDEST'));
            self::assertSame(3, $this->requestCount(), 'the key is fetched once');

            return;
        }
        foreach ([1, 2] as $attempt) {
            try {
                $client->get('CURRENT');
                self::fail('no DecryptionException: ' . $pin['why']);
            } catch (DecryptionException $e) {
                self::assertSame('CURRENT', $e->getSecretName());
                self::assertStringNotContainsString($answer['wrapped_key'], $e->getMessage());
            }
            self::assertSame(2 * $attempt, $this->requestCount(), 'neither retried nor cached: ' . $pin['why']);
        }
    }

    /**
     * @return array<string, array{0: string}>
     */
    public static function badTokens(): array
    {
        $cases = [];
        foreach (self::vectors()['bad_tokens'] as $i => $token) {
            $cases['bad token ' . $i] = [$token];
        }

        return $cases;
    }

    /**
     * @dataProvider badTokens
     */
    public function testEveryBadTokenIsAConfigurationErrorThatNeverQuotesIt(string $token): void
    {
        $previous = ini_set('zend.exception_ignore_args', '0');
        try {
            $this->client(['token' => $token]);
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            $keyPart = substr($token, (int) strpos($token, '.') + 1);
            self::assertStringContainsString('key part', $e->getMessage());
            self::assertStringNotContainsString($token, (string) $e);
            $sdkFrames = array_filter(
                $e->getTrace(),
                static fn (array $frame): bool => str_starts_with($frame['class'] ?? '', 'Cvsm\\') && !str_starts_with($frame['class'] ?? '', 'Cvsm\\Tests\\')
            );
            self::assertArrayHasKey('args', reset($sdkFrames), 'the trace keeps arguments');
            if (strlen($keyPart) > 4) {
                self::assertStringNotContainsString($keyPart, $e->getMessage());
                self::assertStringNotContainsString($keyPart, print_r($sdkFrames, true));
            }
        } finally {
            ini_set('zend.exception_ignore_args', (string) $previous);
        }
        self::assertSame(0, $this->requestCount());
    }

    /**
     * @return array<string, array{0: array<string, mixed>}>
     */
    public static function sealedValues(): array
    {
        $cases = [];
        foreach (self::vectors()['values'] as $i => $value) {
            $cases[sprintf('value %d: %s', $i, $value['opens'] ? 'opens' : $value['why'])] = [$value];
        }

        return $cases;
    }

    /**
     * @dataProvider sealedValues
     * @param array<string, mixed> $value
     */
    public function testEveryValueOpensThroughTheClientOrIsADecryptionError(array $value): void
    {
        $vectors = self::vectors();
        $this->e2eTeam([[$value['name'], $value['environment'], $value['envelope']]]);
        $client = new Client([
            'token' => $vectors['token']['token'],
            'base_url' => $this->stub->url(),
            'team' => $vectors['team_id'],
            'environment' => $value['environment'],
            'timeout' => 2,
        ]);

        if ($value['opens']) {
            self::assertSame($value['value'], $client->get($value['name']));
            self::assertSame($value['value'], E2e::openValue(
                $value['envelope'],
                self::unb64u($vectors['team_key']),
                $vectors['team_id'],
                $value['environment'],
                $value['name']
            ));

            return;
        }
        try {
            $client->get($value['name']);
            self::fail('no DecryptionException: ' . $value['why']);
        } catch (DecryptionException $e) {
            self::assertSame($value['name'], $e->getSecretName());
            self::assertNull($e->getStatus());
            self::assertStringContainsString(sprintf('secret "%s"', $value['name']), $e->getMessage());
        }
        $this->expectException(E2eError::class);
        E2e::openValue($value['envelope'], self::unb64u($vectors['team_key']), $vectors['team_id'], $value['environment'], $value['name']);
    }
}
