<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown when a value of an end-to-end team does not open with the team key: its tag fails (the
 * value was altered, or sealed for another team, secret, version, environment or name), the
 * envelope is malformed, it was sealed under a key version the server does not give this token,
 * or the team key wrapped to the token does not open with the token's key part. It is thrown at
 * once, never retried and never answered with a stale value; getStatus() is null. The message
 * names the secret, never a value or a key. getRequestId() is the X-Request-Id of the answer that
 * carried the value (the read by name or the export), or of the team key's answer when the key
 * wrapped to the token does not open.
 */
class DecryptionException extends CvsmException
{
    private ?string $secretName;

    /**
     * Builds the exception with the name of the secret being read, when there is one, and the
     * request id of the answer that carried what did not open.
     */
    public function __construct(string $message, ?string $secretName = null, ?\Throwable $previous = null, ?string $requestId = null)
    {
        parent::__construct($message, null, $previous, $requestId);
        $this->secretName = $secretName;
    }

    /**
     * Returns the secret being read: the name get() asked for, or the first name of getAll()'s
     * answer that did not open; null when getAll() failed on the team key itself.
     */
    public function getSecretName(): ?string
    {
        return $this->secretName;
    }
}
