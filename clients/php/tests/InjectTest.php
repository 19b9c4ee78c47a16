<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;

final class InjectTest extends TestCase
{
    public function testInjectSetsEveryNameAndReturnsThemSorted(): void
    {
        $this->setEnv('CVSM_T_ZETA', null);
        $this->setEnv('CVSM_T_ALPHA', null);
        $this->routeExport(['CVSM_T_ZETA' => 'z', 'CVSM_T_ALPHA' => 'a=b c']);

        $names = $this->client()->inject();

        self::assertSame(['CVSM_T_ALPHA', 'CVSM_T_ZETA'], $names);
        self::assertSame('a=b c', getenv('CVSM_T_ALPHA'));
        self::assertSame('z', getenv('CVSM_T_ZETA'));
        self::assertSame('a=b c', $_ENV['CVSM_T_ALPHA']);
        self::assertSame('a=b c', $_SERVER['CVSM_T_ALPHA']);
    }

    public function testInjectKeepsVariablesThatAreAlreadySet(): void
    {
        $this->setEnv('CVSM_T_KEPT', 'local');
        $this->setEnv('CVSM_T_NEW', null);
        $this->routeExport(['CVSM_T_KEPT' => 'remote', 'CVSM_T_NEW' => 'fresh']);

        $names = $this->client()->inject();

        self::assertSame(['CVSM_T_NEW'], $names);
        self::assertSame('local', getenv('CVSM_T_KEPT'));
        self::assertSame('fresh', getenv('CVSM_T_NEW'));
    }

    public function testInjectWithOverwriteReplacesExistingVariables(): void
    {
        $this->setEnv('CVSM_T_KEPT', 'local');
        $this->setEnv('CVSM_T_EMPTY', '');
        $this->routeExport(['CVSM_T_KEPT' => 'remote', 'CVSM_T_EMPTY' => 'filled']);

        $names = $this->client()->inject(true);

        self::assertSame(['CVSM_T_EMPTY', 'CVSM_T_KEPT'], $names);
        self::assertSame('remote', getenv('CVSM_T_KEPT'));
        self::assertSame('remote', $_ENV['CVSM_T_KEPT']);
        self::assertSame('filled', getenv('CVSM_T_EMPTY'));
    }

    public function testAnEmptyVariableCountsAsSet(): void
    {
        $this->setEnv('CVSM_T_EMPTY', '');
        $this->routeExport(['CVSM_T_EMPTY' => 'filled']);

        self::assertSame([], $this->client()->inject());
        self::assertSame('', getenv('CVSM_T_EMPTY'));
    }

    /**
     * @return iterable<string, array{0: array<string, string>, 1: string}>
     */
    public static function uninjectable(): iterable
    {
        yield 'a NUL in a value' => [['CVSM_T_BAD' => "before\0after"], 'secret "CVSM_T_BAD"'];
        yield 'a name with a dash' => [['CVSM-T-BAD' => 'v'], 'secret "CVSM-T-BAD"'];
        yield 'a name with a leading digit' => [['1CVSM_T_BAD' => 'v'], 'secret "1CVSM_T_BAD"'];
        yield 'a name with "="' => [['CVSM_T=BAD' => 'v'], 'secret "CVSM_T=BAD"'];
        yield 'a number as name' => [['0' => 'v'], 'secret "0"'];
    }

    /**
     * @dataProvider uninjectable
     * @param array<string, string> $bad
     */
    public function testInjectIsAllOrNothing(array $bad, string $named): void
    {
        $this->setEnv('CVSM_T_AAA', null);
        $this->setEnv('CVSM_T_ZZZ', null);
        foreach (array_keys($bad) as $name) {
            if (!str_contains((string) $name, '=')) {
                $this->setEnv((string) $name, null);
            }
        }
        $this->routeExport(['CVSM_T_AAA' => 'first', 'CVSM_T_ZZZ' => 'last'] + $bad);

        try {
            $this->client(['cache_ttl' => 0])->inject(true);
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertStringContainsString($named, $e->getMessage());
            self::assertStringContainsString('nothing was set', $e->getMessage());
            self::assertStringNotContainsString('before', $e->getMessage(), 'never the value');
            self::assertNull($e->getStatus());
        }
        self::assertFalse(getenv('CVSM_T_AAA'), 'nothing is set, not even the names before the bad one');
        self::assertFalse(getenv('CVSM_T_ZZZ'));
        self::assertArrayNotHasKey('CVSM_T_AAA', $_ENV);
        foreach (array_keys($bad) as $name) {
            self::assertFalse(getenv((string) $name));
        }
        self::assertFalse(getenv('CVSM_T'), 'no "CVSM_T=BAD" assignment either');
    }

    public function testInjectUsesGetAllAndItsCache(): void
    {
        $this->setEnv('CVSM_T_ONE', null);
        $this->routeExport(['CVSM_T_ONE' => '1']);
        $client = $this->client();

        $client->getAll();
        $client->inject();

        self::assertSame(1, $this->requestCount());
        self::assertSame('1', getenv('CVSM_T_ONE'));
    }
}
