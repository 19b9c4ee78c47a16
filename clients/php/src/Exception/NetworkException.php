<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * NetworkException is thrown when the server could not be reached or its answer could not be
 * read: connection refused or dropped, timeout, unreadable response. It is thrown only once the
 * retries are spent.
 */
class NetworkException extends CvsmException
{
}
