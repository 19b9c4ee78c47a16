<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;

/**
 * ReadmeTest proves what README.md prints: its first example runs exactly as printed, its
 * install lines install the package from this folder into an empty project folder (where
 * Composer is installed), and the PHP version it names is the one composer.json requires.
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
        $this->secrets(['DATABASE_URL' => self::DATABASE_URL, 'REDIS_URL' => 'redis://cache']);
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

    public function testTheInstallLinesInstallThePackageFromACloneIntoAnEmptyFolder(): void
    {
        foreach (['composer' => 'composer is not installed', 'mirror' => 'Debian\'s PSR interfaces are not installed (php-psr-log, php-psr-http-client, php-psr-http-message)'] as $need => $why) {
            $missing = $need === 'composer' ? trim((string) shell_exec('command -v composer')) === '' : self::debianPsr() === [];
            if ($missing) {
                if (strtolower((string) getenv('CI')) === 'true') {
                    self::fail($why . ' (CI=true: .ci/run installs it)');
                }
                self::markTestSkipped($why);
            }
        }
        // The README's layout: the clone at ../cvsm next to the project, an empty folder.
        symlink(dirname(self::root(), 2), $this->dir . '/cvsm');
        $app = $this->dir . '/app';
        self::assertSame([], array_diff((array) scandir($app), ['.', '..']));
        $env = ['COMPOSER_HOME' => $this->dir . '/composer-home', 'COMPOSER_NO_INTERACTION' => '1', 'COMPOSER_NO_AUDIT' => '1'];
        self::writePackagistStandIn($this->dir, $env['COMPOSER_HOME']);

        $lines = self::installLines();
        self::assertSame([
            'composer init --no-interaction --name=acme/app',
            'composer config repositories.cvsm path ../cvsm/clients/php',
            'composer require cvsm/cvsm:@dev',
        ], $lines);
        foreach ($lines as $line) {
            $this->shell($line, $app, $env);
        }

        self::assertFileExists($app . '/vendor/cvsm/cvsm/src/Client.php');
        self::assertFileExists($app . '/vendor/psr/log/LoggerInterface.php', 'the PSR interfaces came with it');
        $this->assertTheExampleRuns($app);
    }

    /**
     * Writes a stand-in for Packagist, which cannot be reached here, into Composer's global
     * configuration in $home: Packagist off, and a path repository per PSR package that
     * composer.json requires, made of Debian's copy of its interfaces. The README's lines then
     * run as printed and resolve the PSR requirements from it.
     */
    public static function writePackagistStandIn(string $dir, string $home): void
    {
        $repositories = [['packagist.org' => false]];
        foreach (self::debianPsr() as $name => [$version, $namespace, $files]) {
            $package = $dir . '/packagist-stand-in/' . str_replace('/', '-', $name);
            mkdir($package, 0700, true);
            foreach ($files as $file) {
                copy($file, $package . '/' . basename($file));
            }
            file_put_contents($package . '/composer.json', json_encode(
                ['name' => $name, 'version' => $version, 'autoload' => ['psr-4' => [$namespace => '']]],
                JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES
            ));
            $repositories[] = ['type' => 'path', 'url' => $package, 'options' => ['symlink' => false]];
        }
        mkdir($home, 0700, true);
        file_put_contents($home . '/config.json', json_encode(['repositories' => $repositories], JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
    }

    /**
     * Returns Debian's copies of the PSR packages composer.json requires, as name => [version,
     * namespace, files], or [] when one is not installed.
     *
     * @return array<string, array{0: string, 1: string, 2: list<string>}>
     */
    private static function debianPsr(): array
    {
        $message = '/usr/share/php/Psr/Http/Message';
        $packages = [
            'psr/log' => ['1.1.4', 'Psr\\Log\\', array_values(array_diff(glob('/usr/share/php/Psr/Log/*.php') ?: [], ['/usr/share/php/Psr/Log/autoload.php']))],
            'psr/http-client' => ['1.0.1', 'Psr\\Http\\Client\\', glob('/usr/share/php/Psr/Http/Client/*Interface.php') ?: []],
            'psr/http-message' => ['1.0.1', 'Psr\\Http\\Message\\', array_values(array_filter(
                glob($message . '/*Interface.php') ?: [],
                static fn (string $file): bool => !str_ends_with($file, 'FactoryInterface.php')
            ))],
            'psr/http-factory' => ['1.0.1', 'Psr\\Http\\Message\\', glob($message . '/*FactoryInterface.php') ?: []],
        ];
        foreach ($packages as [, , $files]) {
            if ($files === []) {
                return [];
            }
        }

        return $packages;
    }

    public function testTheServiceTokenSectionRunsAsPrinted(): void
    {
        foreach (['bash', 'curl', 'jq'] as $tool) {
            if (trim((string) shell_exec('command -v ' . $tool)) === '') {
                if (strtolower((string) getenv('CI')) === 'true') {
                    self::fail($tool . ' is not installed (CI=true: .ci/run installs it)');
                }
                self::markTestSkipped($tool . ' is not installed');
            }
        }
        $jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl';
        $this->stub->route('POST /auth/login', ['body' => ['token' => $jwt, 'user' => ['username' => 'alice']]]);
        $this->stub->route('POST /tokens', ['status' => 201, 'body' => ['api_token' => ['id' => 'tok-1', 'name' => 'billing-app'], 'token' => self::TOKEN]]);
        $app = $this->dir . '/app';
        mkdir($app . '/vendor');
        file_put_contents($app . '/vendor/autoload.php', '<?php require ' . var_export(self::root() . '/autoload.php', true) . ';');
        $blocks = self::serviceTokenBlocks();
        self::assertCount(2, $blocks);

        $this->assertTheExampleRuns($app, 'bash -euo pipefail -c ' . escapeshellarg(implode("\n", $blocks)), [
            'CVSM_BASE_URL' => $this->stub->url(),
            'PATH' => dirname(PHP_BINARY) . ':' . getenv('PATH'),
        ]);

        $requests = $this->stub->requests();
        self::assertSame(
            ['POST /api/v1/auth/login', 'POST /api/v1/tokens', 'GET /api/v1/teams/acme/secrets/by-name/DATABASE_URL', 'GET /api/v1/teams/acme/secrets/export'],
            array_map(static fn (array $r): string => $r['method'] . ' ' . $r['path'], $requests)
        );
        self::assertSame(['identifier' => 'alice', 'password' => 'correct horse battery'], json_decode($requests[0]['body'], true));
        self::assertSame('Bearer ' . $jwt, $requests[1]['headers']['authorization']);
        self::assertSame(
            ['name' => 'billing-app', 'team_id' => 'acme', 'environments' => ['production'], 'read_only' => true],
            json_decode($requests[1]['body'], true),
            'the request docs/API.md describes: a read-only token for one team and environment'
        );
        self::assertSame('Bearer ' . self::TOKEN, $requests[2]['headers']['authorization'], 'the example reads with the new token');
    }

    public function testTheRequiredPhpVersionIsTheOneTheReadmeNames(): void
    {
        $composer = json_decode((string) file_get_contents(self::root() . '/composer.json'), true);
        $required = $composer['require']['php'];

        self::assertSame('>=8.2', $required, '#[\SensitiveParameter] needs 8.2');
        self::assertStringContainsString('PHP ' . substr($required, 2) . ' or later', self::readme());
        self::assertGreaterThanOrEqual(80200, PHP_VERSION_ID);
    }

    /**
     * assertTheExampleRuns writes the first example into $project as quickstart.php and runs
     * $command there (by default the example itself, with the token and base URL in the
     * environment), which must print what the example prints against the stub.
     *
     * @param array<string, string>|null $env
     */
    private function assertTheExampleRuns(string $project, ?string $command = null, ?array $env = null): void
    {
        file_put_contents($project . '/quickstart.php', self::firstExample());

        $output = $this->shell($command ?? escapeshellarg(PHP_BINARY) . ' quickstart.php', $project, $env ?? [
            'CVSM_TOKEN' => self::TOKEN,
            'CVSM_BASE_URL' => $this->stub->url(),
            'CVSM_TEAM' => 'acme',
        ]);

        self::assertSame("DATABASE_URL has 33 bytes; 2 secrets; injected DATABASE_URL, REDIS_URL\n", $output);
        $reads = array_filter($this->stub->requests(), static fn (array $request): bool => $request['method'] === 'GET');
        self::assertCount(2, $reads, 'get() is one request, getAll() another, and inject() reads the cache');
        $user = array_unique(array_column(array_column($reads, 'headers'), 'user-agent'));
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

    /**
     * serviceTokenBlocks returns the shell blocks of the README's "Service token" section.
     *
     * @return list<string>
     */
    private static function serviceTokenBlocks(): array
    {
        $section = explode("\n## ", explode("\n## Service token\n", self::readme(), 2)[1] ?? '', 2)[0];
        preg_match_all('/```sh\n(.*?)```/s', $section, $m);

        return $m[1];
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
