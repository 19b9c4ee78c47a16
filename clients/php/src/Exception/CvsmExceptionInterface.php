<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Marks every exception the cvsm client throws, so one catch block
 * (`catch (CvsmExceptionInterface $e)`) handles them all.
 */
interface CvsmExceptionInterface extends \Throwable
{
    /**
     * Returns the HTTP status code behind the error, or null when there was no HTTP
     * response (configuration and network errors, a name that is not a valid secret name).
     */
    public function getStatus(): ?int;

    /**
     * Returns the X-Request-Id header of the answer the error came from, or null
     * when there was no answer (configuration and network errors) or the answer had none.
     */
    public function getRequestId(): ?string;
}
