<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown on HTTP 429, at once and without retrying; getRetryAfter() says
 * how many seconds the server asks the caller to wait.
 */
class RateLimitException extends CvsmException
{
    private ?int $retryAfter;

    /**
     * Builds the exception with the Retry-After value in whole seconds, or null
     * when the server sent none.
     */
    public function __construct(string $message, ?int $retryAfter = null, ?\Throwable $previous = null, ?string $requestId = null)
    {
        parent::__construct($message, 429, $previous, $requestId);
        $this->retryAfter = $retryAfter;
    }

    /**
     * Returns the seconds to wait before trying again (the Retry-After header), or
     * null when the server did not say.
     */
    public function getRetryAfter(): ?int
    {
        return $this->retryAfter;
    }
}
