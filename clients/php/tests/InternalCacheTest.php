<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Internal\Cache;

/**
 * The cache's clock, driven by hand: fresh for cache_ttl, kept stale_if_error longer, then gone.
 */
final class InternalCacheTest extends \PHPUnit\Framework\TestCase
{
    private int $now = 1_000_000_000_000;

    public function testAnEntryIsFreshForTheTtlThenKeptForStaleIfErrorThenGone(): void
    {
        $cache = $this->cache(30, 60);
        $cache->put('k', 'v');

        $this->advance(29.9);
        self::assertSame('v', $cache->fresh('k'));
        self::assertSame('v', $cache->kept('k')[0] ?? null);

        $this->advance(0.1);
        self::assertNull($cache->fresh('k'), 'no longer fresh at cache_ttl');
        self::assertSame(['v', 30.0], $cache->kept('k'));

        $this->advance(59.9);
        self::assertSame('v', $cache->kept('k')[0] ?? null, 'kept until cache_ttl + stale_if_error');

        $this->advance(0.1);
        self::assertNull($cache->kept('k'), 'gone at cache_ttl + stale_if_error');
        self::assertSame(0, $cache->count(), 'and dropped');
    }

    public function testWithoutStaleIfErrorAnEntryIsGoneWhenItStopsBeingFresh(): void
    {
        $cache = $this->cache(30, 0);
        $cache->put('k', 'v');

        $this->advance(30);

        self::assertNull($cache->fresh('k'));
        self::assertNull($cache->kept('k'));
    }

    public function testWithTtlZeroNothingIsFreshButEntriesAreKeptForStaleIfError(): void
    {
        $cache = $this->cache(0, 5);
        $cache->put('k', ['A' => '1']);

        self::assertNull($cache->fresh('k'));
        self::assertSame([['A' => '1'], 0.0], $cache->kept('k'));
        $this->advance(5);
        self::assertNull($cache->kept('k'));
    }

    public function testWithTtlZeroAndNoStaleIfErrorNothingIsStored(): void
    {
        $cache = $this->cache(0, 0);
        $cache->put('k', 'v');

        self::assertSame(0, $cache->count());
        self::assertNull($cache->kept('k'));
    }

    public function testAPutRestartsTheClockOfItsEntry(): void
    {
        $cache = $this->cache(1, 1);
        $cache->put('k', 'old');
        $this->advance(1.5);
        $cache->put('k', 'new');
        $this->advance(0.5);

        self::assertSame('new', $cache->fresh('k'));
    }

    public function testClearForgetsEverything(): void
    {
        $cache = $this->cache(30, 60);
        $cache->put('a', '1');
        $cache->put('b', '2');

        $cache->clear();

        self::assertNull($cache->kept('a'));
        self::assertNull($cache->kept('b'));
        self::assertSame(0, $cache->count());
    }

    public function testAnEmptyValueIsAValue(): void
    {
        $cache = $this->cache(30, 0);
        $cache->put('s', '');
        $cache->put('a', []);

        self::assertSame('', $cache->fresh('s'));
        self::assertSame([], $cache->fresh('a'));
    }

    public function testPrintingTheCacheShowsNoValue(): void
    {
        $cache = $this->cache(30, 60);
        $cache->put('k', 'value-that-must-not-show');

        self::assertStringNotContainsString('value-that-must-not-show', print_r($cache, true));
        self::assertStringContainsString('[entries] => 1', print_r($cache, true));
    }

    private function cache(int $ttl, int $staleIfError): Cache
    {
        return new Cache($ttl, $staleIfError, fn (): int => $this->now);
    }

    private function advance(float $seconds): void
    {
        $this->now += (int) round($seconds * 1_000_000_000);
    }
}
