<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown for any other non-2xx answer (a redirect, which is never followed; 409;
 * 500; 502/503/504 once the retries are spent); getStatus() returns the HTTP status.
 */
class ApiException extends CvsmException
{
    /**
     * Builds the exception with its HTTP status.
     */
    public function __construct(string $message, int $status, ?\Throwable $previous = null, ?string $requestId = null)
    {
        parent::__construct($message, $status, $previous, $requestId);
    }

    /**
     * Returns the HTTP status of the failed response.
     */
    public function getStatus(): int
    {
        return (int) parent::getStatus();
    }
}
