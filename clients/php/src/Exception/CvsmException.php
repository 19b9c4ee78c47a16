<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * The base class of every cvsm client exception. Catch a subclass to branch on
 * the kind of failure; never parse the message. Messages never contain a token or secret value.
 */
class CvsmException extends \RuntimeException implements CvsmExceptionInterface
{
    private ?int $status;
    private ?string $requestId;

    /**
     * Builds an exception with a message, the HTTP status and the server's request
     * id (its X-Request-Id header), when there was an answer.
     */
    public function __construct(string $message, ?int $status = null, ?\Throwable $previous = null, ?string $requestId = null)
    {
        parent::__construct($message, $status ?? 0, $previous);
        $this->status = $status;
        $this->requestId = $requestId;
    }

    /**
     * Returns the HTTP status code behind the error, or null when there was none.
     */
    public function getStatus(): ?int
    {
        return $this->status;
    }

    /**
     * Returns the X-Request-Id header of the answer the error came from (for a name
     * absent from the environment, the read by name's), or null when there was no answer or no
     * header.
     * Quote it when you report a problem to the server's operators.
     */
    public function getRequestId(): ?string
    {
        return $this->requestId;
    }
}
