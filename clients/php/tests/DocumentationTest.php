<?php

declare(strict_types=1);

namespace Cvsm\Tests;

/**
 * DocumentationTest checks the PHPDoc of every class under src/: the class, each public or
 * protected method and each public constant it declares has a doc comment, and none opens in
 * Go's voice with its own name ("get returns ...", "Client reads ...").
 */
final class DocumentationTest extends TestCase
{
    public function testEveryPublicItemHasAPhpDocCommentInPhpsVoice(): void
    {
        $undocumented = [];
        $goVoice = [];
        $seen = 0;
        foreach (self::classes() as $class) {
            $reflection = new \ReflectionClass($class);
            $items = [$class => [$reflection->getShortName(), $reflection->getDocComment()]];
            foreach ($reflection->getMethods(\ReflectionMethod::IS_PUBLIC | \ReflectionMethod::IS_PROTECTED) as $method) {
                if ($method->getDeclaringClass()->getName() === $class) {
                    $items[$class . '::' . $method->getName() . '()'] = [$method->getName(), $method->getDocComment()];
                }
            }
            foreach ($reflection->getReflectionConstants(\ReflectionClassConstant::IS_PUBLIC) as $constant) {
                if ($constant->getDeclaringClass()->getName() === $class) {
                    $items[$class . '::' . $constant->getName()] = [$constant->getName(), $constant->getDocComment()];
                }
            }
            foreach ($items as $item => [$name, $doc]) {
                $seen++;
                if ($doc === false || trim($doc, "/* \n") === '') {
                    $undocumented[] = $item;
                } elseif (preg_match('/^\/\*\*\s*(\*\s*)?(?:\w+::)?' . preg_quote($name, '/') . '(\(\))? [a-z]+s?\b/', $doc)) {
                    $goVoice[] = $item;
                }
            }
        }

        self::assertSame([], $undocumented);
        self::assertSame([], $goVoice);
        self::assertGreaterThan(50, $seen);
    }

    /**
     * @return list<class-string>
     */
    private static function classes(): array
    {
        $src = dirname(__DIR__) . '/src';
        $classes = [];
        $files = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($src, \FilesystemIterator::SKIP_DOTS));
        foreach ($files as $file) {
            $relative = substr((string) $file, strlen($src) + 1, -strlen('.php'));
            $class = 'Cvsm\\' . str_replace('/', '\\', $relative);
            if (class_exists($class) || interface_exists($class)) {
                $classes[] = $class;
            }
        }
        sort($classes);

        return $classes;
    }
}
