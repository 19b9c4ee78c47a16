<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;
use Cvsm\Internal\HttpTransport;
use Cvsm\Tests\Stub\TlsServer;

/**
 * TlsTest checks ca_file and CVSM_CA_FILE against an HTTPS server whose certificate a private CA
 * signed: that CA is trusted only when named, and then instead of the system store.
 */
final class TlsTest extends TestCase
{
    private static ?TlsServer $tls = null;

    public static function setUpBeforeClass(): void
    {
        self::$tls = TlsServer::start();
    }

    public static function tearDownAfterClass(): void
    {
        self::$tls?->stop();
        self::$tls = null;
    }

    public function testTheOptionWinsOverTheVariable(): void
    {
        $this->setEnv('CVSM_CA_FILE', self::$tls->otherCaFile);

        self::assertSame(['TLS' => 'trusted'], $this->client(['base_url' => self::$tls->url(), 'ca_file' => self::$tls->caFile])->getAll());
    }

    // Without a CA file, or with another CA's, the server is not trusted: the conformance case
    // private_ca_trusted_through_ca_file.

    public function testTheCaFileReplacesTheSystemStore(): void
    {
        // curl's verbose log names the trust it loads: the bundle, and no system CA directory.
        $log = fopen('php://memory', 'w+');
        $client = $this->client([
            'base_url' => self::$tls->url(),
            'ca_file' => self::$tls->caFile,
            'curl_options' => [CURLOPT_VERBOSE => true, CURLOPT_STDERR => $log],
        ]);
        $client->getAll();
        rewind($log);
        $verbose = (string) stream_get_contents($log);

        self::assertStringContainsString('CAfile: ' . self::$tls->caFile, $verbose);
        self::assertStringNotContainsString('/etc/ssl/certs', $verbose);
        self::assertSame([CURLOPT_CAINFO => 'x.pem', CURLOPT_CAPATH => 'x.pem'], HttpTransport::caOptions('x.pem'));
        self::assertSame([], HttpTransport::caOptions(null));
    }

    /**
     * @return iterable<string, array{0: string}>
     */
    public static function unusableFiles(): iterable
    {
        yield 'missing' => ['/nonexistent/cvsm-ca.pem'];
        yield 'a directory' => [sys_get_temp_dir()];
        yield 'not PEM' => [__FILE__];
    }

    /**
     * @dataProvider unusableFiles
     */
    public function testAnUnusableCaFileIsAConfigurationErrorAtConstruction(string $path): void
    {
        try {
            $this->client(['ca_file' => $path]);
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertStringStartsWith('ca_file "', $e->getMessage());
        }
        $this->setEnv('CVSM_CA_FILE', $path);
        try {
            $this->client();
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertStringStartsWith('CVSM_CA_FILE "', $e->getMessage());
        }
        self::assertSame(0, $this->requestCount());
    }
}
