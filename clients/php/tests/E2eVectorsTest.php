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

    /** b64u decodes base64url without padding. */
    public static function unb64u(string $text): string
    {
        return (string) base64_decode(strtr($text, '-_', '+/'), true);
    }

    public function testTheVectorsAreTheOnesThisTestKnows(): void
    {
        $vectors = self::vectors();

        self::assertSame('cvsm end-to-end vectors, docs/e2e.md, version 1', $vectors['format']);
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

        self::assertSame([$token['api_token'], self::unb64u($token['private_key'])], E2e::splitToken($token['token']));
        self::assertSame([$token['api_token'], null], E2e::splitToken($token['api_token']));
        $jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl';
        self::assertSame([$jwt, null], E2e::splitToken($jwt), 'a JWT has dots of its own and no key part');
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
        $this->stub->route(
            self::byName($value['name'], $value['environment'], $vectors['team_id']),
            ['body' => ['secret' => ['id' => 'x', 'name' => $value['name'], 'e2e' => true], 'value' => $value['envelope']]]
        );
        $this->stub->route(
            sprintf('GET /teams/%s/e2e/key', $vectors['team_id']),
            ['body' => ['team_id' => $vectors['team_id'], 'key_version' => $vectors['key_version'], 'wrapped_key' => $vectors['recipients'][1]['wrapped_key']]]
        );
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
