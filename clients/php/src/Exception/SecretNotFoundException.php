<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * Thrown when the requested name is absent from the environment
 * (status 404, with the request id of the read by name; when a secret differs only in case, the
 * message and getSuggestion() name it) or is not a valid secret name (status null, and no
 * request was made).
 */
class SecretNotFoundException extends CvsmException
{
    private ?string $secretName;
    private ?string $suggestion;

    /**
     * Builds the exception with the requested name and the suggested
     * existing name, when there are ones.
     */
    public function __construct(
        string $message,
        ?int $status = null,
        ?string $secretName = null,
        ?string $suggestion = null,
        ?\Throwable $previous = null,
        ?string $requestId = null
    ) {
        parent::__construct($message, $status, $previous, $requestId);
        $this->secretName = $secretName;
        $this->suggestion = $suggestion;
    }

    /**
     * Returns the name that was requested, or null when the 404 came from the server
     * for another reason (for example an unknown team).
     */
    public function getSecretName(): ?string
    {
        return $this->secretName;
    }

    /**
     * Returns the existing name that differs from the requested one only in case,
     * or null when there is none.
     */
    public function getSuggestion(): ?string
    {
        return $this->suggestion;
    }
}
