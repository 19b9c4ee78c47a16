<?php

declare(strict_types=1);

/*
 * autoload.php loads the Cvsm\ classes without Composer: `require 'path/to/cvsm/autoload.php';`.
 * With Composer, the PSR-4 mapping in composer.json does the same and this file is not needed.
 */

spl_autoload_register(static function (string $class): void {
    $prefix = 'Cvsm\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
