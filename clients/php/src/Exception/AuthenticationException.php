<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown on HTTP 401: the token is invalid, expired, revoked or
 * locked. The client empties its cache when it happens.
 */
class AuthenticationException extends CvsmException
{
    /**
     * Builds the exception; the status defaults to 401.
     */
    public function __construct(string $message, ?int $status = 401, ?\Throwable $previous = null, ?string $requestId = null)
    {
        parent::__construct($message, $status, $previous, $requestId);
    }
}
