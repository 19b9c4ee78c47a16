<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;

/**
 * ReadmeTest proves what README.md prints: its first example and its service-token section run
 * exactly as printed, against the stub, and the PHP version it names is the one composer.json
 * requires. (The install lines, then the example, run against the real server in
 * server/tests/test_sdk_readmes.py.)
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
