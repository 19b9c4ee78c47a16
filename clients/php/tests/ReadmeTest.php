<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;

/**
 * ReadmeTest proves what README.md prints: its first example runs exactly as printed, its
 * install lines install the package from this folder (where Composer is installed), and the
 * PHP version it names is the one composer.json requires.
 */
final class ReadmeTest extends TestCase
{
    private const DATABASE_URL = 'postgres://app:pw@db.internal/app';

    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = sys_get_temp_dir() . '/cvsm-php-readme-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir . '/app', 0700, true);
    }

    protected function tearDown(): void
    {
        exec('rm -rf ' . escapeshellarg($this->dir));
        parent::tearDown();
    }

    public function testTheFirstExampleRunsAsPrinted(): void
    {
        // A vendor/autoload.php like Composer's, by way of the Composer-free autoload.php.
        mkdir($this->dir . '/app/vendor');
        file_put_contents($this->dir . '/app/vendor/autoload.php', '<?php require ' . var_export(self::root() . '/autoload.php', true) . ';');

        $this->assertTheExampleRuns($this->dir . '/app');
    }

    public function testTheInstallLinesInstallThePackageFromAClone(): void
    {
        if (trim((string) shell_exec('command -v composer')) === '') {
            if (strtolower((string) getenv('CI')) === 'true') {
                self::fail('composer is not installed (CI=true: .ci/run installs it)');
            }
            self::markTestSkipped('composer is not installed');
        }
        // The README's layout: the clone at ../cvsm next to the project, which has a composer.json.
        symlink(dirname(self::root(), 2), $this->dir . '/cvsm');
        $app = $this->dir . '/app';
        file_put_contents($app . '/composer.json', "{}\n");
        $env = ['COMPOSER_HOME' => $this->dir . '/composer-home', 'COMPOSER_NO_INTERACTION' => '1', 'COMPOSER_NO_AUDIT' => '1'];
        // Offline, Packagist is unreachable; the path repository needs nothing from it.
        $this->shell('composer config repositories.packagist false', $app, $env);

        $lines = self::installLines();
        self::assertSame(['composer config repositories.cvsm path ../cvsm/clients/php', 'composer require cvsm/cvsm:@dev'], $lines);
        foreach ($lines as $line) {
            $this->shell($line, $app, $env);
        }

        self::assertFileExists($app . '/vendor/cvsm/cvsm/src/Client.php');
        $this->assertTheExampleRuns($app);
    }

    public function testTheRequiredPhpVersionIsTheOneTheReadmeNames(): void
    {
        $composer = json_decode((string) file_get_contents(self::root() . '/composer.json'), true);
        $required = $composer['require']['php'];

        self::assertSame('>=8.2', $required, '#[\SensitiveParameter] needs 8.2');
        self::assertStringContainsString('PHP ' . substr($required, 2) . ' or later', self::readme());
        self::assertGreaterThanOrEqual(80200, PHP_VERSION_ID);
    }

    private function assertTheExampleRuns(string $project): void
    {
        $this->stub->route('GET /teams', ['body' => ['teams' => [['id' => self::TEAM_ID, 'slug' => 'acme', 'name' => 'Acme']]]]);
        $this->routeSecret('DATABASE_URL', self::DATABASE_URL, 'id-db');
        $this->routeExport(['DATABASE_URL' => self::DATABASE_URL, 'REDIS_URL' => 'redis://cache']);
        file_put_contents($project . '/quickstart.php', self::firstExample());

        $output = $this->shell(escapeshellarg(PHP_BINARY) . ' quickstart.php', $project, [
            'CVSM_TOKEN' => self::TOKEN,
            'CVSM_BASE_URL' => $this->stub->url(),
        ]);

        self::assertSame("DATABASE_URL has 33 bytes; 2 secrets; injected DATABASE_URL, REDIS_URL\n", $output);
        $user = array_unique(array_column(array_column($this->stub->requests(), 'headers'), 'user-agent'));
        self::assertSame([Client::USER_AGENT], array_values($user));
    }

    /**
     * shell runs a shell command in $cwd with the test's environment, less the variables the
     * example would read, plus $env; it fails the test unless the command succeeds.
     *
     * @param array<string, string> $env
     */
    private function shell(string $command, string $cwd, array $env): string
    {
        $environment = array_filter(
            getenv(),
            static fn (string $name): bool => !str_starts_with($name, 'CVSM_') && !in_array($name, ['DATABASE_URL', 'REDIS_URL'], true),
            ARRAY_FILTER_USE_KEY
        );
        $process = proc_open($command, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, $cwd, $env + $environment);
        self::assertIsResource($process);
        $stdout = (string) stream_get_contents($pipes[1]);
        $stderr = (string) stream_get_contents($pipes[2]);
        $status = proc_close($process);
        self::assertSame(0, $status, $command . ' failed: ' . $stdout . $stderr);

        return $stdout;
    }

    private static function firstExample(): string
    {
        self::assertSame(1, preg_match('/```php\n(.*?)```/s', self::readme(), $m));
        self::assertStringStartsWith("<?php\n", $m[1]);

        return $m[1];
    }

    /**
     * @return list<string>
     */
    private static function installLines(): array
    {
        $installation = explode('## Installation', self::readme(), 2)[1];
        self::assertSame(1, preg_match('/```sh\n(.*?)```/s', $installation, $m));

        return array_values(array_filter(explode("\n", $m[1])));
    }

    private static function readme(): string
    {
        return (string) file_get_contents(self::root() . '/README.md');
    }

    private static function root(): string
    {
        return dirname(__DIR__);
    }
}
