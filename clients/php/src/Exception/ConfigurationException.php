<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * ConfigurationException is thrown when the client is misconfigured: a missing token, base URL or
 * team (the message names the environment variable to set), an invalid option or variable, an
 * unreadable ca_file, a team slug that matches none of the caller's teams, or the server saying
 * that the base URL or team is wrong (404 to the teams, listing or export request) or that it
 * rejects the environment (400 to the listing or export request): then getStatus() says which.
 * inject() throws it, before setting anything, for a secret the environment cannot hold.
 */
class ConfigurationException extends CvsmException
{
}
