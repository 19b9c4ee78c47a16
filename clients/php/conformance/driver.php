<?php

declare(strict_types=1);

/*
 * driver.php is the PHP conformance driver: it reads one JSON request per line on stdin, runs it
 * against a Cvsm\Client and writes one JSON response per line on stdout, as
 * conformance/PROTOCOL.md specifies. Error kinds come from exception types, never messages.
 * Run from anywhere: `php clients/php/conformance/driver.php`.
 *
 * A live client's change stream is pumped while the driver waits for the next request (as a
 * long-running worker's loop does, PROTOCOL.md "Porting live and refresh", step 4), so its
 * events are taken as they arrive, not only at the next read.
 */

ini_set('display_errors', 'stderr');
ini_set('log_errors', '0');
error_reporting(E_ALL);

require dirname(__DIR__) . '/autoload.php';

use Cvsm\Client;
use Cvsm\Exception\ApiException;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;
use Cvsm\Exception\DecryptionException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\PermissionDeniedException;
use Cvsm\Exception\RateLimitException;
use Cvsm\Exception\SecretNotFoundException;

/** UnsupportedOp marks a request for an op this driver does not know. */
final class UnsupportedOp extends \Exception
{
}

/**
 * StaleSignal records what the SDK's own stale signal, the "on_stale" callback, said during one
 * op: the driver never guesses staleness from timing or values.
 */
final class StaleSignal
{
    public static bool $seen = false;
}

/** kindOf maps an exception to the protocol's error kind by its type. */
function kindOf(\Throwable $error): string
{
    return match (true) {
        $error instanceof ConfigurationException => 'configuration',
        $error instanceof AuthenticationException => 'authentication',
        $error instanceof PermissionDeniedException => 'permission_denied',
        $error instanceof SecretNotFoundException => 'not_found',
        $error instanceof RateLimitException => 'rate_limited',
        $error instanceof ApiException => 'api',
        $error instanceof NetworkException => 'network',
        $error instanceof DecryptionException => 'decryption',
        $error instanceof UnsupportedOp => 'unsupported',
        default => 'internal',
    };
}

/** setEnv sets or, for null, removes a variable in the process environment, $_ENV and $_SERVER. */
function setEnv(string $name, ?string $value): void
{
    if ($value === null) {
        putenv($name);
        unset($_ENV[$name], $_SERVER[$name]);

        return;
    }
    putenv($name . '=' . $value);
    $_ENV[$name] = $value;
    $_SERVER[$name] = $value;
}

/**
 * handle runs one op and returns its result object.
 *
 * @param array<string, mixed> $args
 * @return array<string, mixed>|\stdClass
 */
function handle(string $op, array $args, ?Client &$client): array|\stdClass
{
    $need = static function () use (&$client): Client {
        if ($client === null) {
            throw new \RuntimeException('no client: send new_client first');
        }

        return $client;
    };

    switch ($op) {
        case 'new_client':
            $client = null;
            $options = $args['options'] ?? [];
            if (!is_array($options)) {
                throw new \RuntimeException('options must be an object');
            }
            $options['on_stale'] = static function (): void {
                StaleSignal::$seen = true;
            };
            $client = new Client($options);

            return ['config' => $client->getConfig()];
        case 'get':
            StaleSignal::$seen = false;
            $result = ['value' => $need()->get((string) ($args['name'] ?? ''))];

            return StaleSignal::$seen ? $result + ['stale' => true] : $result;
        case 'get_all':
            StaleSignal::$seen = false;
            $result = ['values' => (object) $need()->getAll()];

            return StaleSignal::$seen ? $result + ['stale' => true] : $result;
        case 'refresh':
            $environment = $args['environment'] ?? null;

            return ['value' => $need()->refresh((string) ($args['name'] ?? ''), $environment === null ? null : (string) $environment)];
        case 'inject':
            return ['names' => $need()->inject((bool) ($args['overwrite'] ?? false))];
        case 'clear_cache':
            $need()->clearCache();

            return new \stdClass();
        case 'describe':
            return ['text' => print_r($need(), true)];
        case 'set_env':
            foreach ((array) ($args['set'] ?? []) as $name => $value) {
                setEnv((string) $name, (string) $value);
            }
            foreach ((array) ($args['unset'] ?? []) as $name) {
                setEnv((string) $name, null);
            }

            return new \stdClass();
        case 'capabilities':
            return ['capabilities' => \Cvsm\Rules::CAPABILITIES];
        case 'get_env':
            $values = [];
            foreach ((array) ($args['names'] ?? []) as $name) {
                $value = getenv((string) $name);
                $values[(string) $name] = $value === false ? null : $value;
            }

            return ['values' => (object) $values];
        case 'shutdown':
            return new \stdClass();
        default:
            throw new UnsupportedOp(sprintf('unsupported op "%s"', $op));
    }
}

/** respond writes one protocol line to stdout. */
function respond(array $response): void
{
    $line = json_encode($response, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE);
    if ($line === false) {
        $line = json_encode([
            'id' => $response['id'] ?? null,
            'ok' => false,
            'error' => [
                'kind' => 'internal', 'message' => 'cannot encode response: ' . json_last_error_msg(),
                'status' => null, 'retry_after' => null, 'request_id' => null, 'suggestion' => null,
            ],
        ]);
    }
    fwrite(STDOUT, $line . "\n");
    fflush(STDOUT);
}

/**
 * nextLine returns the next request line, or false at the end of input; while a live client
 * waits for it, the client's stream is pumped (20 ms at a time).
 */
function nextLine(?Client $client): string|false
{
    while ($client !== null && $client->isLive()) {
        $read = [STDIN];
        $none = null;
        if (stream_select($read, $none, $none, 0) !== 0) {
            break; // a line (or the end of input) is there, or select failed: fgets decides
        }
        $client->poll(0.02);
    }

    return fgets(STDIN);
}

$client = null;
while (($line = nextLine($client)) !== false) {
    if (trim($line) === '') {
        continue;
    }
    $request = json_decode($line, true);
    $id = is_array($request) ? ($request['id'] ?? null) : null;
    $op = is_array($request) && is_string($request['op'] ?? null) ? $request['op'] : '';
    $args = is_array($request) && is_array($request['args'] ?? null) ? $request['args'] : [];
    try {
        if (!is_array($request)) {
            throw new \RuntimeException('request is not a JSON object');
        }
        respond(['id' => $id, 'ok' => true, 'result' => handle($op, $args, $client)]);
    } catch (\Throwable $error) {
        respond(['id' => $id, 'ok' => false, 'error' => [
            'kind' => kindOf($error),
            'message' => $error->getMessage(),
            'status' => $error instanceof CvsmException ? $error->getStatus() : null,
            'retry_after' => $error instanceof RateLimitException ? $error->getRetryAfter() : null,
            'request_id' => $error instanceof CvsmException ? $error->getRequestId() : null,
            'suggestion' => $error instanceof SecretNotFoundException ? $error->getSuggestion() : null,
        ]]);
    }
    if ($op === 'shutdown') {
        break;
    }
}
exit(0);
