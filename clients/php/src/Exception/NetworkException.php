<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown when the server could not be reached or its answer could not be
 * read: connection refused or dropped, timeout, TLS failure, or an unreadable answer (a 2xx whose
 * body is not the JSON its request promises; getRequestId() then names that answer). It is
 * thrown only once the retries are spent; getStatus() is null.
 */
class NetworkException extends CvsmException
{
}
