<?php

declare(strict_types=1);

namespace Cvsm\Tests;


final class InjectTest extends TestCase
{

    public function testAnEmptyVariableCountsAsSet(): void
    {
        $this->setEnv('CVSM_T_EMPTY', '');
        $this->secrets(['CVSM_T_EMPTY' => 'filled']);

        self::assertSame([], $this->client()->inject());
        self::assertSame('', getenv('CVSM_T_EMPTY'));
    }
}
