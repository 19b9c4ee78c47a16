<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * CvsmException is the base class of every cvsm client exception. Catch a subclass to branch on
 * the kind of failure; never parse the message. Messages never contain a token or secret value.
 */
class CvsmException extends \RuntimeException implements CvsmExceptionInterface
{
    private ?int $status;

    /**
     * CvsmException builds an exception with a message and the HTTP status, when there is one.
     */
    public function __construct(string $message, ?int $status = null, ?\Throwable $previous = null)
    {
        parent::__construct($message, $status ?? 0, $previous);
        $this->status = $status;
    }

    /**
     * getStatus returns the HTTP status code behind the error, or null when there was none.
     */
    public function getStatus(): ?int
    {
        return $this->status;
    }
}
