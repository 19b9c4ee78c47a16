<?php

declare(strict_types=1);

namespace Cvsm;

use Cvsm\Exception\CvsmException;

/**
 * Tells the "on_stale" callback that get() or getAll() returned a kept value instead of
 * the error a refresh ended with (stale-if-error, rule R14). It names what was served and why,
 * never the value itself, so it can be logged or sent to metrics as it is.
 *
 *     $cvsm = new Cvsm\Client([
 *         'team' => 'acme',
 *         'stale_if_error' => 300,
 *         'on_stale' => function (Cvsm\StaleRead $read): void {
 *             $metrics->increment('cvsm.stale', ['error' => $read->error::class]);
 *         },
 *     ]);
 */
final class StaleRead
{
    /**
     * @param ?string       $name        the secret get() was asked for; null when getAll() served
     *                                   every secret of the environment
     * @param string        $environment the environment read
     * @param CvsmException $error       the error the kept value stands in for: a NetworkException,
     *                                   an ApiException with a 5xx status or a RateLimitException
     * @param float         $age         seconds since the kept value was fetched
     */
    public function __construct(
        public readonly ?string $name,
        public readonly string $environment,
        public readonly CvsmException $error,
        public readonly float $age
    ) {
    }
}
