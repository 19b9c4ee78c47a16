<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\CvsmExceptionInterface;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;

final class ErrorTest extends TestCase
{
    public function testRedirectIsNotFollowedEvenWhenCurlOptionsAsk(): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('CURLOPT_FOLLOWLOCATION');
        $this->client(['curl_options' => [CURLOPT_FOLLOWLOCATION => true]]);
    }

    public function testEveryExceptionSharesTheBaseClassAndInterface(): void
    {
        foreach ([
            ConfigurationException::class, AuthenticationException::class, PermissionDeniedException::class,
            SecretNotFoundException::class, RateLimitException::class, ApiException::class, NetworkException::class,
        ] as $class) {
            self::assertTrue(is_subclass_of($class, CvsmException::class), $class);
            self::assertTrue(is_subclass_of($class, CvsmExceptionInterface::class), $class);
        }
    }
}
