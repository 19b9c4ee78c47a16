<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\PermissionDeniedException;

final class CacheTest extends TestCase
{
    public function testSecondGetIsServedFromTheCache(): void
    {
        $this->routeSecret('A', 'one');
        $client = $this->client();

        self::assertSame('one', $client->get('A'));
        self::assertSame('one', $client->get('A'));

        self::assertSame(1, $this->requestCount());
    }

    public function testCachedValueExpiresAfterTheTtl(): void
    {
        $this->routeSecret('A', 'one');
        $client = $this->client(['cache_ttl' => 1]);

        $client->get('A');
        $client->get('A');
        self::assertSame(1, $this->requestCount());

        usleep(1_100_000);
        $client->get('A');
        self::assertSame(2, $this->requestCount());
    }

    public function testZeroTtlDisablesTheCache(): void
    {
        $this->routeSecret('A', 'one');
        $this->routeExport(['A' => 'one']);
        $client = $this->client(['cache_ttl' => 0]);

        $client->get('A');
        $client->get('A');
        $client->getAll();
        $client->getAll();
        $client->get('A');

        self::assertSame(5, $this->requestCount());
    }

    public function testClearCacheMakesTheNextGetAskTheServer(): void
    {
        $this->routeSecret('A', 'one');
        $client = $this->client();

        $client->get('A');
        $client->clearCache();
        $client->get('A');

        self::assertSame(2, $this->requestCount());
    }

    public function testGetAllIsCachedAndFillsTheNameCache(): void
    {
        $this->routeExport(['A' => 'one', 'B' => 'two']);
        $client = $this->client();

        self::assertSame(['A' => 'one', 'B' => 'two'], $client->getAll());
        self::assertSame(['A' => 'one', 'B' => 'two'], $client->getAll());
        self::assertSame('two', $client->get('B'));

        self::assertSame(1, $this->requestCount());
    }

    public function testCacheServesTheCachedValueEvenWhenTheServerChanged(): void
    {
        $this->stub->route(
            self::byName('A'),
            ['body' => ['secret' => ['id' => 'id-a'], 'value' => 'old']],
            ['body' => ['secret' => ['id' => 'id-a'], 'value' => 'new']]
        );
        $client = $this->client();

        self::assertSame('old', $client->get('A'));
        self::assertSame('old', $client->get('A'));
        $client->clearCache();
        self::assertSame('new', $client->get('A'));
    }

    public function testErrorsAreNotCached(): void
    {
        $this->stub->route(
            'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production',
            ['status' => 403, 'body' => ['error' => 'akses ditolak']],
            ['body' => ['A' => 'one']]
        );
        $client = $this->client();

        try {
            $client->getAll();
            self::fail('no PermissionDeniedException');
        } catch (PermissionDeniedException) {
        }
        self::assertSame(['A' => 'one'], $client->getAll());
        self::assertSame(2, $this->requestCount());
    }

    public function testAuthenticationErrorEmptiesTheCache(): void
    {
        $this->routeSecret('A', 'one');
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['status' => 401, 'body' => ['error' => 'token tidak valid']]);
        $client = $this->client();

        $client->get('A');
        try {
            $client->getAll();
            self::fail('no AuthenticationException');
        } catch (AuthenticationException) {
        }
        $client->get('A');

        self::assertSame(3, $this->requestCount(), 'the cached A was dropped by the 401');
    }

    public function testPermissionErrorEmptiesTheCache(): void
    {
        $this->routeExport(['A' => 'one', 'B' => 'two']);
        $this->routeSecret('A', 'one');
        $this->stub->route(self::byName('C'), ['status' => 403, 'body' => ['error' => 'akses ditolak']]);
        $client = $this->client();

        $client->getAll();
        try {
            $client->get('C');
            self::fail('no PermissionDeniedException');
        } catch (PermissionDeniedException) {
        }
        $client->get('A');
        $client->getAll();

        self::assertSame(4, $this->requestCount(), 'the 403 dropped both the cached A and the cached export');
    }

    public function testCacheIsPerClient(): void
    {
        $this->routeSecret('A', 'one');

        $this->client()->get('A');
        $this->client()->get('A');

        self::assertSame(2, $this->requestCount());
    }
}
