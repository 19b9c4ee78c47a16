<?php

declare(strict_types=1);

namespace Cvsm\Tests;

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
