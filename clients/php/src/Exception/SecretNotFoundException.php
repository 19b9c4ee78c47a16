<?php

declare(strict_types=1);

namespace Cvsm\Exception;

/**
 * SecretNotFoundException is thrown when the requested name is absent from the environment
 * (status null; when a secret differs only in case, the message and getSuggestion() name it), is
 * not a valid secret name (status null, and no request was made), or when the server answers
 * HTTP 404 to the value request (status 404).
 */
class SecretNotFoundException extends CvsmException
{
    private ?string $secretName;
    private ?string $suggestion;

    /**
     * SecretNotFoundException builds the exception with the requested name and the suggested
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
     * getSecretName returns the name that was requested, or null when the 404 came from the server
     * for another reason (for example an unknown team).
     */
    public function getSecretName(): ?string
    {
        return $this->secretName;
    }

    /**
     * getSuggestion returns the existing name that differs from the requested one only in case,
     * or null when there is none.
     */
    public function getSuggestion(): ?string
    {
        return $this->suggestion;
    }
}
