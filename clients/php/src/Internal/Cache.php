<?php

declare(strict_types=1);

namespace Cvsm\Internal;

/**
 * Holds what a client read, each entry with the moment it was fetched. An entry is fresh
 * for $ttl seconds, and is then kept $staleIfError seconds longer (rule R14), to stand in for a
 * refresh that fails; past that bound it is gone. With $ttl 0 nothing is ever fresh, and entries
 * are kept only when $staleIfError is above 0. It lives in memory only: nothing is written to
 * disk.
 *
 * A live client (rule R16) also tells it what its change stream says: drop() makes an entry stop
 * being fresh at once (it is still kept for stale-if-error), and each entry may remember the
 * version of the secret it holds (a read by name says it), so that a reconnection's snapshot
 * drops only what changed meanwhile.
 *
 * Time comes from a monotonic clock (hrtime), so a change of the wall clock neither expires nor
 * revives an entry.
 *
 * @internal
 */
final class Cache
{
    /** @var array<string, array{0: mixed, 1: int}> key => [value, fetched at (ns)] */
    private array $entries = [];

    /** @var array<string, int> key => the version of the secret its entry holds, when known */
    private array $versions = [];

    /** @var array<string, true> keys whose entry is no longer fresh (a change), kept for stale-if-error */
    private array $dropped = [];

    /** @var \Closure(): int the time in nanoseconds, from an arbitrary origin */
    private \Closure $clock;

    /**
     * @param (callable(): int)|null $clock nanoseconds from an arbitrary origin (hrtime by default)
     */
    public function __construct(private readonly int $ttl, private readonly int $staleIfError, ?callable $clock = null)
    {
        $this->clock = $clock !== null ? \Closure::fromCallable($clock) : static fn (): int => (int) hrtime(true);
    }

    /** Names the entry of one secret: per environment and name. */
    public static function valueKey(string $environment, string $name): string
    {
        return 'get' . "\0" . $environment . "\0" . $name;
    }

    /** Names the entry of getAll()'s whole result for an environment. */
    public static function allKey(string $environment): string
    {
        return 'all' . "\0" . $environment;
    }

    /**
     * Returns the value under $key while it is fresh, else null.
     */
    public function fresh(string $key): mixed
    {
        if (isset($this->dropped[$key])) {
            return null;
        }
        $entry = $this->entry($key);

        return $entry !== null && $entry[1] < $this->ttl ? $entry[0] : null;
    }

    /**
     * Returns [value, age in seconds] for the value under $key, fresh or not, while it is
     * younger than ttl + stale_if_error; else null.
     *
     * @return array{0: mixed, 1: float}|null
     */
    public function kept(string $key): ?array
    {
        return $this->entry($key);
    }

    /**
     * Stores $value under $key, fetched now, holding $version of its secret when that is known;
     * it stores nothing when neither the ttl nor stale_if_error would ever use it.
     */
    public function put(string $key, #[\SensitiveParameter] mixed $value, ?int $version = null): void
    {
        if ($this->ttl + $this->staleIfError === 0) {
            return;
        }
        $this->entries[$key] = [$value, ($this->clock)()];
        unset($this->dropped[$key]);
        if ($version !== null) {
            $this->versions[$key] = $version;
        } else {
            unset($this->versions[$key]);
        }
    }

    /** Returns the version of the secret the entry under $key holds, when it is known. */
    public function version(string $key): ?int
    {
        return isset($this->entries[$key]) ? ($this->versions[$key] ?? null) : null;
    }

    /**
     * Makes the entry under $key stop being fresh at once (its secret changed); it is still kept
     * for stale-if-error. Returns whether there was a fresh-able entry to drop.
     */
    public function drop(string $key): bool
    {
        unset($this->versions[$key]);
        if (!isset($this->entries[$key]) || isset($this->dropped[$key])) {
            return false;
        }
        $this->dropped[$key] = true;

        return true;
    }

    /**
     * Lists the keys of the entries that may still be fresh (not dropped).
     *
     * @return list<string>
     */
    public function keys(): array
    {
        return array_values(array_filter(array_map('strval', array_keys($this->entries)), fn (string $key): bool => !isset($this->dropped[$key])));
    }

    /** Forgets every entry. */
    public function clear(): void
    {
        $this->entries = [];
        $this->versions = [];
        $this->dropped = [];
    }

    /** Returns how many entries are held, expired ones not yet swept included. */
    public function count(): int
    {
        return count($this->entries);
    }

    /**
     * Shows how many entries are held, never their values.
     *
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return ['ttl' => $this->ttl, 'stale_if_error' => $this->staleIfError, 'entries' => count($this->entries)];
    }

    /**
     * Returns [value, age in seconds] under $key, or null when there is none or it is past
     * the bound (then it is dropped).
     *
     * @return array{0: mixed, 1: float}|null
     */
    private function entry(string $key): ?array
    {
        if (!isset($this->entries[$key])) {
            return null;
        }
        [$value, $fetched] = $this->entries[$key];
        $age = (($this->clock)() - $fetched) / 1e9;
        if ($age >= $this->ttl + $this->staleIfError) {
            unset($this->entries[$key], $this->versions[$key], $this->dropped[$key]);

            return null;
        }

        return [$value, $age];
    }
}
