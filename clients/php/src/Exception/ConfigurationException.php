<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown when the client is misconfigured: a missing token, base URL or
 * team (the message names the environment variable to set), an invalid option or variable, an
 * unreadable ca_file, or the server saying that the base URL or team is wrong (404 to the
 * listing or export request; a team id or slug that is none of the caller's teams is one) or that
 * it rejects the environment (400 to the read by name, the listing or the export request), or
 * that the team is not end-to-end while the token carries a key part (400 to the team key's
 * request): then getStatus() says which.
 * inject() throws it, before setting anything, for a secret the environment cannot hold.
 */
class ConfigurationException extends CvsmException
{
}
