<?php

declare(strict_types=1);

namespace Cvsm\Internal;

/**
 * Opens what the server of an end-to-end team serves, exactly as docs/e2e.md defines it (format
 * 2): it splits a token into its API token, key part and pin, unwraps the team key wrapped to
 * that key (`cvsm-wrap1.…`), walks the key versions' back-links (`cvsm-link1.…`) down to the
 * pinned version and checks its commitment, and opens sealed values (`cvsm-e2e1.…`). Every failure throws E2eError,
 * whose message never holds a key or a value.
 *
 * Primitives: X25519 from ext-sodium (sodium_crypto_scalarmult), HKDF-SHA256 from ext-hash
 * (hash_hkdf) and AES-256-GCM from ext-openssl (openssl_decrypt). It only opens: sealing is done
 * by the dashboard, `cvsm` and the SDKs that write.
 *
 * @internal
 */
final class E2e
{
    private const KEY = 32;
    private const NONCE = 12;
    private const TAG = 16;
    private const B64U = '[A-Za-z0-9_-]+';
    private const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
    private const NUMBER = '[1-9][0-9]{0,9}';

    /**
     * Splits a token into the API token the server knows (sent as the bearer) and, for a token of
     * an end-to-end team (`cvsm_<64 hex>.<private key>.<key version>.<commitment>`, format 2),
     * the X25519 private key after its first dot (32 raw bytes) and its pin: the key version that
     * was current when it was made and that key's commitment (32 raw bytes). A token without a
     * dot has no key part (nulls). Only an API token (`cvsm_…`) carries a key part: anything else
     * (a JWT has dots of its own) is returned whole.
     *
     * @return array{0: string, 1: ?string, 2: ?int, 3: ?string}
     * @throws E2eError when a `cvsm_` token has a dot but is not of that shape, a token of the
     *                  first format (`cvsm_<64 hex>.<key>`, no pin) included
     */
    public static function splitToken(#[\SensitiveParameter] string $token): array
    {
        if (!str_starts_with($token, 'cvsm_') || !str_contains($token, '.')) {
            return [$token, null, null, null];
        }
        $pattern = '/^(cvsm_[0-9a-f]{64})\.(' . self::B64U . ')\.(' . self::NUMBER . ')\.(' . self::B64U . ')$/D';
        if (!preg_match($pattern, $token, $m)) {
            if (preg_match('/^cvsm_[0-9a-f]{64}\.' . self::B64U . '$/D', $token)) {
                throw new E2eError(
                    \Cvsm\Rules::MESSAGE_FIRST_FORMAT_TOKEN . ' for the team and revoke this one (docs/e2e.md): '
                    . 'cvsm_<64 hex>.<key> was made before end-to-end tokens carried their pin; its key part must look like '
                    . 'cvsm_<64 hex>.<private key>.<key version>.<commitment>'
                );
            }
            throw new E2eError('a token with a key part must look like cvsm_<64 hex>.<private key>.<key version>.<commitment>');
        }

        return [
            $m[1],
            self::unb64u($m[2], self::KEY, 'the token\'s key part'),
            (int) $m[3],
            self::unb64u($m[4], self::KEY, 'the key commitment of the token\'s key part'),
        ];
    }

    /**
     * Returns C_v, the 32-byte commitment to team $teamId's key $teamKey of version $keyVersion
     * (docs/e2e.md, "Key commitment").
     */
    public static function commitment(#[\SensitiveParameter] string $teamKey, string $teamId, int $keyVersion): string
    {
        if (strlen($teamKey) !== self::KEY) {
            throw new E2eError('a team key is 32 bytes');
        }

        return hash_hkdf('sha256', $teamKey, self::KEY, 'cvsm-e2e:v2:commit:' . $teamId . ':' . $keyVersion, '');
    }

    /**
     * Returns the nonce (12 bytes) and ciphertext (48 bytes) of the link `cvsm-link1.<nonce>.<ct>`
     * stored with $keyVersion.
     *
     * @return array{0: string, 1: string}
     * @throws E2eError when the link is malformed (its text is never in the message)
     */
    public static function parseLink(string $link, int $keyVersion): array
    {
        if (!preg_match('/^cvsm-link1\.(' . self::B64U . ')\.(' . self::B64U . ')$/D', $link, $m)) {
            throw new E2eError(sprintf('the link of key version %d does not look like cvsm-link1.<nonce>.<ct>', $keyVersion));
        }

        return [
            self::unb64u($m[1], self::NONCE, sprintf('the nonce of the link of key version %d', $keyVersion)),
            self::unb64u($m[2], self::KEY + self::TAG, sprintf('the link of key version %d', $keyVersion)),
        ];
    }

    /**
     * Returns the team key of version $keyVersion - 1, opened from the back-link
     * (`cvsm-link1.<nonce>.<ct>`) stored with version $keyVersion, whose key is $teamKey.
     *
     * @throws E2eError when the link is malformed or does not open with $teamKey
     */
    public static function openLink(string $link, #[\SensitiveParameter] string $teamKey, string $teamId, int $keyVersion): string
    {
        [$nonce, $sealed] = self::parseLink($link, $keyVersion);

        return self::open($teamKey, $nonce, $sealed, 'cvsm-e2e:v2:link:' . $teamId . ':' . $keyVersion, sprintf('the link of key version %d', $keyVersion));
    }

    /**
     * Walks the chain (docs/e2e.md, "Walking a chain"): returns the team keys from
     * $currentVersion down to min($pinVersion, $downTo), by version, after checking that the
     * links lead from $currentKey down to the pinned version and that this key's commitment is
     * $pinCommitment (compared in constant time).
     *
     * @param array<int, string> $links key version => link
     * @return array<int, string> key version => team key
     * @throws E2eError when the current version is below the pin, a link is missing or does not
     *                  open, or the commitment differs
     */
    public static function verifyChain(
        #[\SensitiveParameter] string $currentKey,
        int $currentVersion,
        string $teamId,
        array $links,
        int $pinVersion,
        #[\SensitiveParameter] string $pinCommitment,
        ?int $downTo = null
    ): array {
        if ($currentVersion < $pinVersion) {
            throw new E2eError(sprintf('the team key is version %d, below the pinned version %d', $currentVersion, $pinVersion));
        }
        $lowest = $downTo === null ? $pinVersion : max(1, min($pinVersion, $downTo));
        $keys = [$currentVersion => $currentKey];
        $key = $currentKey;
        for ($version = $currentVersion; $version > $lowest; $version--) {
            if (!isset($links[$version])) {
                throw new E2eError(sprintf('the link of key version %d is missing', $version));
            }
            $key = self::openLink($links[$version], $key, $teamId, $version);
            $keys[$version - 1] = $key;
        }
        if (!hash_equals(self::commitment($keys[$pinVersion], $teamId, $pinVersion), $pinCommitment)) {
            throw new E2eError(sprintf('the team key does not match the pinned commitment of key version %d', $pinVersion));
        }

        return $keys;
    }

    /**
     * Returns the 32-byte team key in $wrapped (`cvsm-wrap1.<eph>.<nonce>.<ct>`), wrapped for
     * version $keyVersion of team $teamId to the X25519 public key of $privateKey.
     *
     * @throws E2eError when it is malformed or does not open with $privateKey
     */
    public static function unwrapTeamKey(
        string $wrapped,
        string $teamId,
        int $keyVersion,
        #[\SensitiveParameter] string $privateKey
    ): string {
        if (!preg_match('/^cvsm-wrap1\.(' . self::B64U . ')\.(' . self::B64U . ')\.(' . self::B64U . ')$/D', $wrapped, $m)) {
            throw new E2eError('the wrapped team key does not look like cvsm-wrap1.<eph>.<nonce>.<ct>');
        }
        $ephemeral = self::unb64u($m[1], self::KEY, 'the ephemeral key of the wrapped team key');
        $nonce = self::unb64u($m[2], self::NONCE, 'the nonce of the wrapped team key');
        $sealed = self::unb64u($m[3], self::KEY + self::TAG, 'the wrapped team key');
        if (strlen($privateKey) !== self::KEY) {
            throw new E2eError('an X25519 private key is 32 bytes');
        }
        try {
            $own = sodium_crypto_scalarmult_base($privateKey);
            $shared = sodium_crypto_scalarmult($privateKey, $ephemeral);
        } catch (\SodiumException) { // libsodium refuses an all-zero shared secret
            throw new E2eError('the ephemeral key of the wrapped team key is not usable (low order)');
        }
        if (hash_equals(str_repeat("\0", self::KEY), $shared)) {
            throw new E2eError('the ephemeral key of the wrapped team key is not usable (low order)');
        }
        $wrapping = hash_hkdf('sha256', $shared, self::KEY, 'cvsm-e2e:v1:wrap', $ephemeral . $own);

        return self::open($wrapping, $nonce, $sealed, 'cvsm-e2e:v1:team-key:' . $teamId . ':' . $keyVersion, 'the wrapped team key');
    }

    /**
     * Returns the key version a sealed value (`cvsm-e2e1.<key version>.…`) was sealed under.
     *
     * @throws E2eError when $envelope is not a sealed value
     */
    public static function keyVersion(string $envelope): int
    {
        return self::parse($envelope)[0];
    }

    /**
     * Returns the value sealed in $envelope under $teamKey, which must have been sealed for
     * $environment and $name in team $teamId: the associated data is built from those, the ones
     * the client asked for, so a server cannot serve one secret's value as another's.
     *
     * @throws E2eError when it is malformed, does not open, or is not UTF-8
     */
    public static function openValue(
        string $envelope,
        #[\SensitiveParameter] string $teamKey,
        string $teamId,
        string $environment,
        string $name
    ): string {
        [, $secretId, $version, $nonce, $sealed] = self::parse($envelope);
        $plain = self::open(
            $teamKey,
            $nonce,
            $sealed,
            'cvsm-e2e:v1:secret:' . $teamId . ':' . $secretId . ':' . $version . ':' . $environment . ':' . $name,
            'the sealed value'
        );
        if (preg_match('//u', $plain) !== 1) {
            throw new E2eError('the sealed value is not UTF-8');
        }

        return $plain;
    }

    /**
     * Splits a sealed value into key version, secret id, version, nonce and ciphertext (with its
     * tag).
     *
     * @return array{0: int, 1: string, 2: int, 3: string, 4: string}
     */
    private static function parse(string $envelope): array
    {
        $pattern = '/^cvsm-e2e1\.(' . self::NUMBER . ')\.(' . self::UUID . ')\.(' . self::NUMBER . ')\.(' . self::B64U . ')\.(' . self::B64U . ')$/D';
        if (!preg_match($pattern, $envelope, $m)) {
            throw new E2eError('the value is not a sealed value (cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ciphertext>)');
        }
        $sealed = self::unb64u($m[5], null, 'the ciphertext of the sealed value');
        if (strlen($sealed) < self::TAG) {
            throw new E2eError('the ciphertext of the sealed value is shorter than its tag');
        }

        return [(int) $m[1], $m[2], (int) $m[3], self::unb64u($m[4], self::NONCE, 'the nonce of the sealed value'), $sealed];
    }

    /**
     * Opens $sealed (ciphertext, then the 16-byte tag) with AES-256-GCM.
     */
    private static function open(#[\SensitiveParameter] string $key, string $nonce, string $sealed, string $aad, string $what): string
    {
        $plain = openssl_decrypt(
            substr($sealed, 0, -self::TAG),
            'aes-256-gcm',
            $key,
            OPENSSL_RAW_DATA,
            $nonce,
            substr($sealed, -self::TAG),
            $aad
        );
        if ($plain === false) {
            throw new E2eError($what . ' does not open with this key (it was sealed for another team, secret, version, environment or name, or was altered)');
        }

        return $plain;
    }

    /**
     * Decodes canonical base64url without padding (RFC 4648 section 5), of $size bytes when
     * $size is given.
     */
    private static function unb64u(string $text, ?int $size, string $what): string
    {
        $data = preg_match('/^' . self::B64U . '$/D', $text) && strlen($text) % 4 !== 1
            ? base64_decode(strtr($text, '-_', '+/'), true)
            : false;
        if ($data === false || rtrim(strtr(base64_encode($data), '+/', '-_'), '=') !== $text) {
            throw new E2eError($what . ' is not canonical base64url');
        }
        if ($size !== null && strlen($data) !== $size) {
            throw new E2eError(sprintf('%s must be %d bytes', $what, $size));
        }

        return $data;
    }
}
