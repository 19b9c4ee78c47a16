<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\SecretNotFoundException;

/**
 * RefreshTest covers what the conformance case of refresh() (rule R17) does not: the arguments it
 * refuses without a request, and that the value it reads is the one get() then serves.
 */
final class RefreshTest extends TestCase
{
    public function testAnEmptyEnvironmentOrAnInvalidNameIsRefusedWithoutARequest(): void
    {
        $client = $this->client();
        try {
            $client->refresh('DB_PASSWORD', '');
            self::fail('an empty environment was accepted');
        } catch (ConfigurationException $e) {
            self::assertStringContainsString('environment', $e->getMessage());
        }
        try {
            $client->refresh('DB-PASSWORD');
            self::fail('an invalid name was read');
        } catch (SecretNotFoundException $e) {
            self::assertNull($e->getStatus());
        }
        self::assertSame(0, $this->requestCount());
    }
}
