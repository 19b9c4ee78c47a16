<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * ConfigurationException is thrown when the client is misconfigured: a missing token, base URL or
 * team (the message names the environment variable to set), an invalid option or CVSM_CACHE_TTL,
 * or a team slug that matches none of the caller's teams.
 */
class ConfigurationException extends CvsmException
{
}
