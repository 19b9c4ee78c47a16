<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ConfigurationException;
use Cvsm\Internal\HttpTransport;

/**
 * TlsTest checks ca_file and CVSM_CA_FILE against the stub API speaking HTTPS with a certificate
 * a private CA signed: that CA is trusted only when named, and then instead of the system store.
 */
final class TlsTest extends TestCase
{
    private static ?Stub $tls = null;
    private static string $dir;

    public static function setUpBeforeClass(): void
    {
        self::$dir = sys_get_temp_dir() . '/cvsm-php-tls-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir(self::$dir, 0700, true);
        $config = self::$dir . '/openssl.cnf';
        file_put_contents($config, "[req]\ndistinguished_name = dn\n[dn]\n[ca]\nbasicConstraints = critical, CA:TRUE\n"
            . "keyUsage = critical, keyCertSign, cRLSign\n[server]\nbasicConstraints = CA:FALSE\n"
            . "subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth\n");
        $options = static fn (string $section): array => ['config' => $config, 'digest_alg' => 'sha256', 'x509_extensions' => $section, 'private_key_bits' => 2048];
        foreach (['ca', 'other-ca', 'server'] as $name) {
            $key = openssl_pkey_new($options($name === 'server' ? 'server' : 'ca'));
            $csr = openssl_csr_new(['commonName' => 'cvsm test ' . $name], $key, $options('ca'));
            // The CA signs the server's certificate; the other CA (trusted by mistake) signs nothing.
            $certificate = $name === 'server'
                ? openssl_csr_sign($csr, 'file://' . self::$dir . '/ca.pem', $caKey, 2, $options('server'), random_int(1, PHP_INT_MAX))
                : openssl_csr_sign($csr, null, $key, 2, $options('ca'), random_int(1, PHP_INT_MAX));
            self::assertNotFalse($certificate, (string) openssl_error_string());
            openssl_x509_export_to_file($certificate, self::$dir . '/' . $name . '.pem');
            $caKey ??= $key;
        }
        openssl_pkey_export_to_file($key, self::$dir . '/server-key.pem', null, $options('server'));
        self::$tls = new Stub(self::$dir . '/server.pem', self::$dir . '/server-key.pem');
        self::$tls->reset(['token' => self::TOKEN, 'teams' => [['id' => self::TEAM_ID]], 'secrets' => [['id' => 's', 'name' => 'TLS', 'environment' => 'production', 'value' => 'trusted']]]);
    }

    public static function tearDownAfterClass(): void
    {
        self::$tls = null;
        exec('rm -rf ' . escapeshellarg(self::$dir));
    }

    public function testTheOptionWinsOverTheVariable(): void
    {
        $this->setEnv('CVSM_CA_FILE', self::$dir . '/other-ca.pem');

        self::assertSame(['TLS' => 'trusted'], $this->client(['base_url' => self::$tls->url(), 'ca_file' => self::$dir . '/ca.pem'])->getAll());
    }

    // Without a CA file, or with another CA's, the server is not trusted: the conformance case
    // private_ca_trusted_through_ca_file.

    public function testTheCaFileReplacesTheSystemStore(): void
    {
        // curl's verbose log names the trust it loads: the bundle, and no system CA directory.
        $log = fopen('php://memory', 'w+');
        $client = $this->client([
            'base_url' => self::$tls->url(),
            'ca_file' => self::$dir . '/ca.pem',
            'curl_options' => [CURLOPT_VERBOSE => true, CURLOPT_STDERR => $log],
        ]);
        $client->getAll();
        rewind($log);
        $verbose = (string) stream_get_contents($log);

        self::assertStringContainsString('CAfile: ' . self::$dir . '/ca.pem', $verbose);
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
