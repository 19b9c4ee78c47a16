<?php

declare(strict_types=1);

/*
 * bootstrap.php loads the SDK through its Composer-free autoload.php and the PSR interfaces it
 * types against, and the test helpers (tests/TestCase.php starts the shared stub API).
 */

require dirname(__DIR__) . '/autoload.php';

// The PSR interfaces composer.json requires (psr/log, psr/http-client, psr/http-message,
// psr/http-factory) and Guzzle, the PSR-18 client the tests pass as "http_client": Composer's
// vendor/ when `composer install` has run, else Debian's packages (php-psr-log,
// php-psr-http-client, php-psr-http-message, php-psr-http-factory, php-guzzlehttp-guzzle),
// found on the include path (/usr/share/php).
if (is_file(dirname(__DIR__) . '/vendor/autoload.php')) {
    require dirname(__DIR__) . '/vendor/autoload.php';
} else {
    foreach (['Psr/Log/autoload.php', 'Psr/Http/Message/autoload.php', 'Psr/Http/Message/factory-autoload.php', 'Psr/Http/Client/autoload.php', 'GuzzleHttp/autoload.php'] as $file) {
        if (stream_resolve_include_path($file) !== false) {
            require_once $file;
        }
    }
}

spl_autoload_register(static function (string $class): void {
    $prefix = 'Cvsm\\Tests\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
