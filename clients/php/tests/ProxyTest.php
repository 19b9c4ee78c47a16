<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\NetworkException;
use Cvsm\Internal\HttpTransport;

/**
 * ProxyTest checks rule R7's proxy variables: the stub server stands in for the proxy, and the
 * client talks to a host that does not resolve, so only a proxied request can arrive.
 */
final class ProxyTest extends TestCase
{
    private const VARIABLES = ['http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'all_proxy', 'ALL_PROXY', 'no_proxy', 'NO_PROXY'];
    private const HOST = 'cvsm.invalid';

    protected function setUp(): void
    {
        parent::setUp();
        foreach (self::VARIABLES as $name) {
            $this->setEnv($name, null);
        }
        $this->secrets(['VIA' => 'proxy']);
    }

    /**
     * @return iterable<string, array{0: string, 1: string}>
     */
    public static function noProxyForms(): iterable
    {
        // A host, a list and NO_PROXY alone are the conformance cases proxy_from_environment and
        // proxy_variable_forms (which also show https_proxy is not for http), as is a no_proxy
        // naming only other hosts.
        yield 'domain suffix' => ['no_proxy', '.invalid'];
        yield 'everything' => ['no_proxy', '*'];
    }

    /**
     * @dataProvider noProxyForms
     */
    public function testHostsInNoProxyAreReachedDirectly(string $variable, string $value): void
    {
        $this->setEnv('http_proxy', $this->proxy());
        $this->setEnv($variable, $value);

        try {
            $this->remoteClient()->getAll();
            self::fail('no NetworkException: the request went through the proxy');
        } catch (NetworkException $e) {
            self::assertStringContainsString('resolve', $e->getMessage());
        }
        self::assertSame(0, $this->requestCount());
    }

    public function testTheEnvironmentIsReadWhenTheClientIsCreated(): void
    {
        $before = $this->remoteClient();
        $this->setEnv('http_proxy', $this->proxy());
        $proxied = $this->remoteClient();

        try {
            $before->getAll();
            self::fail('a client created before http_proxy was set used it');
        } catch (NetworkException) {
        }
        $this->setEnv('http_proxy', null);
        self::assertSame(['VIA' => 'proxy'], $proxied->getAll(), 'the proxy stays after the variable is gone');
        self::assertSame(1, $this->requestCount());
    }

    public function testHttpProxyInUpperCaseIsIgnoredOutsideTheCli(): void
    {
        // Under a web server HTTP_PROXY may come from a request's Proxy header ("httpoxy"), so
        // only the CLI trusts it; curl itself never reads it.
        $this->setEnv('HTTP_PROXY', 'http://attacker.invalid:1');
        $options = HttpTransport::proxyOptions('http://' . self::HOST . '/api/v1');

        self::assertSame(PHP_SAPI === 'cli' ? 'http://attacker.invalid:1' : '', $options[CURLOPT_PROXY]);
    }

    public function testCurlOptionsOverrideTheEnvironment(): void
    {
        $this->setEnv('http_proxy', 'http://127.0.0.1:1');

        $client = $this->remoteClient(['curl_options' => [CURLOPT_PROXY => $this->proxy()]]);

        self::assertSame(['VIA' => 'proxy'], $client->getAll());
    }

    private function proxy(): string
    {
        return 'http://127.0.0.1:' . $this->stub->port;
    }

    /**
     * @param array<string, mixed> $options
     */
    private function remoteClient(array $options = []): \Cvsm\Client
    {
        return $this->client($options + ['base_url' => 'http://' . self::HOST . '/api/v1', 'max_retries' => 0]);
    }
}
