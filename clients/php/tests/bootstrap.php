<?php

declare(strict_types=1);

/*
 * bootstrap.php loads the SDK through its Composer-free autoload.php, loads the test helpers and
 * starts the stub server (tests/Stub/router.php under `php -S`) for the whole run.
 */

require dirname(__DIR__) . '/autoload.php';

spl_autoload_register(static function (string $class): void {
    $prefix = 'Cvsm\\Tests\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

Cvsm\Tests\Stub\StubServer::start();
