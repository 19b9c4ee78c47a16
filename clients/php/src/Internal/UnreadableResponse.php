<?php

declare(strict_types=1);

namespace Cvsm\Internal;

/**
 * What a reader passed to HttpTransport::getJson() throws when a 2xx answer
 * is not the shape its request promises (rule R3). The transport retries it like a dropped
 * connection and, once the retries are spent, throws a NetworkException with its message. It
 * never leaves the SDK.
 *
 * @internal
 */
final class UnreadableResponse extends \RuntimeException
{
}
