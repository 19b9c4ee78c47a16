<?php

declare(strict_types=1);

namespace Cvsm\Tests\Stub;

/**
 * TlsServer makes a private CA with ext-openssl, a certificate it signs for 127.0.0.1, and runs
 * tls_server.php with it: an HTTPS server that answers every request with a fixed JSON export.
 * A second CA (that signed nothing) is there to be trusted by mistake.
 */
final class TlsServer
{
    /** @var resource */
    private $process;

    private function __construct(
        public readonly string $dir,
        public readonly int $port,
        public readonly string $caFile,
        public readonly string $otherCaFile
    ) {
    }

    /** start makes the certificates and starts the server on a free port. */
    public static function start(): self
    {
        $dir = sys_get_temp_dir() . '/cvsm-php-tls-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($dir, 0700, true);
        $config = $dir . '/openssl.cnf';
        file_put_contents($config, implode("\n", [
            '[req]', 'distinguished_name = dn', '[dn]',
            '[ca]', 'basicConstraints = critical, CA:TRUE', 'keyUsage = critical, keyCertSign, cRLSign',
            '[server]', 'basicConstraints = CA:FALSE', 'subjectAltName = IP:127.0.0.1, DNS:localhost',
            'extendedKeyUsage = serverAuth', '',
        ]));
        $options = static fn (string $section): array => [
            'config' => $config, 'digest_alg' => 'sha256', 'x509_extensions' => $section,
            'private_key_bits' => 2048, 'private_key_type' => OPENSSL_KEYTYPE_RSA,
        ];

        [$caKey, $ca] = self::selfSigned('cvsm test CA', $options('ca'));
        [, $other] = self::selfSigned('cvsm other CA', $options('ca'));
        $serverKey = openssl_pkey_new($options('server'));
        $csr = openssl_csr_new(['commonName' => '127.0.0.1'], $serverKey, $options('server'));
        $server = openssl_csr_sign($csr, $ca, $caKey, 2, $options('server'), random_int(1, PHP_INT_MAX));
        if ($server === false) {
            throw new \RuntimeException('cannot sign the server certificate: ' . openssl_error_string());
        }
        openssl_x509_export($ca, $caPem);
        openssl_x509_export($other, $otherPem);
        openssl_x509_export($server, $serverPem);
        openssl_pkey_export($serverKey, $serverKeyPem, null, $options('server'));
        file_put_contents($dir . '/ca.pem', $caPem);
        file_put_contents($dir . '/other-ca.pem', $otherPem);
        file_put_contents($dir . '/server.pem', $serverPem . $serverKeyPem);

        $portFile = $dir . '/port';
        $process = proc_open(
            [PHP_BINARY, __DIR__ . '/tls_server.php', $dir . '/server.pem', $portFile],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $dir . '/server.log', 'a'], 2 => ['file', $dir . '/server.log', 'a']],
            $pipes
        );
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot start the TLS server');
        }
        $deadline = microtime(true) + 10;
        // PHP caches stat results: a port file seen empty once would stay empty to filesize().
        while (clearstatcache(true, $portFile) || !is_file($portFile) || filesize($portFile) === 0) {
            if (microtime(true) > $deadline || !proc_get_status($process)['running']) {
                throw new \RuntimeException('the TLS server did not start: ' . @file_get_contents($dir . '/server.log'));
            }
            usleep(20_000);
        }
        $tls = new self($dir, (int) file_get_contents($portFile), $dir . '/ca.pem', $dir . '/other-ca.pem');
        $tls->process = $process;

        return $tls;
    }

    /** url returns the API root of the server. */
    public function url(): string
    {
        return 'https://127.0.0.1:' . $this->port . '/api/v1';
    }

    /** stop ends the server and removes its files. */
    public function stop(): void
    {
        if (is_resource($this->process)) {
            proc_terminate($this->process);
            proc_close($this->process);
        }
        foreach (glob($this->dir . '/*') ?: [] as $file) {
            @unlink($file);
        }
        @rmdir($this->dir);
    }

    /**
     * @param array<string, mixed> $options
     * @return array{0: \OpenSSLAsymmetricKey, 1: \OpenSSLCertificate}
     */
    private static function selfSigned(string $name, array $options): array
    {
        $key = openssl_pkey_new($options);
        $csr = openssl_csr_new(['commonName' => $name], $key, $options);
        $cert = openssl_csr_sign($csr, null, $key, 2, $options, random_int(1, PHP_INT_MAX));
        if ($key === false || $cert === false) {
            throw new \RuntimeException('cannot make a CA: ' . openssl_error_string());
        }

        return [$key, $cert];
    }
}
