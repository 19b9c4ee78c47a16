<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown on HTTP 403: the token's user lacks the role for the
 * request, the request comes from an address outside the token's allowlist, or a quota is reached.
 */
class PermissionDeniedException extends CvsmException
{
    /**
     * Builds the exception; the status defaults to 403.
     */
    public function __construct(string $message, ?int $status = 403, ?\Throwable $previous = null, ?string $requestId = null)
    {
        parent::__construct($message, $status, $previous, $requestId);
    }
}
