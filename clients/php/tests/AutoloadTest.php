<?php

declare(strict_types=1);

namespace Cvsm\Tests;

/**
 * AutoloadTest proves that autoload.php and the composer.json PSR-4 map agree with the files.
 */
final class AutoloadTest extends \PHPUnit\Framework\TestCase
{
    public function testComposerMapsTheCvsmNamespaceToSrc(): void
    {
        $composer = json_decode((string) file_get_contents(dirname(__DIR__) . '/composer.json'), true);

        self::assertSame('cvsm/cvsm', $composer['name']);
        self::assertSame(['Cvsm\\' => 'src/'], $composer['autoload']['psr-4']);
        self::assertArrayNotHasKey('version', $composer, 'Cvsm\Client::VERSION is the one version source');
        self::assertSame('0.1.0', \Cvsm\Client::VERSION);
        self::assertSame('cvsm-php/' . \Cvsm\Client::VERSION, \Cvsm\Client::USER_AGENT);
    }

    public function testEverySourceFileDeclaresTheClassItsPathNames(): void
    {
        $src = dirname(__DIR__) . '/src';
        $files = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($src, \FilesystemIterator::SKIP_DOTS));
        $count = 0;
        foreach ($files as $file) {
            $relative = substr($file->getPathname(), strlen($src) + 1, -4);
            $class = 'Cvsm\\' . str_replace('/', '\\', $relative);
            self::assertTrue(class_exists($class) || interface_exists($class), $class . ' loads through autoload.php');
            $count++;
        }
        self::assertGreaterThanOrEqual(12, $count);
    }

    public function testAutoloadWorksInAFreshProcessWithoutComposer(): void
    {
        $autoload = dirname(__DIR__) . '/autoload.php';
        $code = sprintf(
            'require %s; $c = new Cvsm\Client(["token" => "t", "base_url" => "http://x/api/v1", "team" => "a"]); echo $c->getTeam(), class_exists("Composer\\\\Autoload\\\\ClassLoader", false) ? " composer" : "";',
            var_export($autoload, true)
        );
        $output = shell_exec(escapeshellarg(PHP_BINARY) . ' -n -d extension=curl.so -r ' . escapeshellarg($code) . ' 2>&1');

        self::assertSame('a', $output);
    }
}
