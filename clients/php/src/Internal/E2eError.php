<?php

declare(strict_types=1);

namespace Cvsm\Internal;

/**
 * What E2e throws when a token's key part, a wrapped team key or a sealed value is malformed, or
 * a ciphertext does not open with the key given. Its message never holds a key or a value. The
 * client turns it into a ConfigurationException (a token) or a DecryptionException naming the
 * secret (a wrapped key, a sealed value); it never leaves the SDK.
 *
 * @internal
 */
final class E2eError extends \RuntimeException
{
}
