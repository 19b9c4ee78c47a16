<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\ApiException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\NetworkException;
use Cvsm\Exception\SecretNotFoundException;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Middleware;
use GuzzleHttp\Psr7\HttpFactory;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestFactoryInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * Psr18Test drives the client through a PSR-18 client given as "http_client": Guzzle 7, the most
 * used one (Composer's guzzlehttp/guzzle, or Debian's php-guzzlehttp-guzzle), against the stub.
 * Every request goes through it, with the headers curl would send; its failures are network
 * errors, retried as curl's are, whose messages hold no token; the options that belong to the
 * built-in curl transport are refused beside it.
 */
final class Psr18Test extends TestCase
{
    /** @var list<array{request: RequestInterface}> what Guzzle's history middleware saw */
    private array $history = [];

    protected function setUp(): void
    {
        parent::setUp();
        if (!class_exists(Guzzle::class) || !interface_exists(ClientInterface::class)) {
            if (strtolower((string) getenv('CI')) === 'true') {
                self::fail('Guzzle and the PSR-18 interfaces are missing (CI=true: .ci/run installs php-guzzlehttp-guzzle)');
            }
            self::markTestSkipped('Guzzle is not installed (apt-get install php-guzzlehttp-guzzle, or composer install)');
        }
        $this->history = [];
    }

    public function testEveryRequestGoesThroughTheGivenClientWithTheClientsHeaders(): void
    {
        $this->secrets(['DATABASE_URL' => 'postgres://db', 'API_KEY' => 'k-1']);
        $client = $this->client(['http_client' => $this->guzzle(), 'request_factory' => new HttpFactory(), 'cache_ttl' => 0]);

        self::assertSame('postgres://db', $client->get('DATABASE_URL'));
        $all = $client->getAll();
        ksort($all);
        self::assertSame(['API_KEY' => 'k-1', 'DATABASE_URL' => 'postgres://db'], $all);

        self::assertCount(2, $this->history, 'both requests went through Guzzle');
        $requests = $this->stub->requests();
        self::assertCount(2, $requests);
        foreach ($requests as $request) {
            self::assertSame('GET', $request['method']);
            self::assertSame('Bearer ' . self::TOKEN, $request['headers']['authorization']);
            self::assertSame('application/json', $request['headers']['accept']);
            self::assertSame(Client::USER_AGENT, $request['headers']['user-agent']);
        }
    }

    public function testAUserAndPasswordInTheBaseUrlNeverReachTheGivenClient(): void
    {
        $this->secrets(['A' => 'v']);
        $withUserinfo = (string) preg_replace('#://#', '://cvsm-user:p4ss-must-not-show@', $this->stub->url(), 1);
        $client = $this->client(['http_client' => $this->guzzle(), 'request_factory' => new HttpFactory(), 'base_url' => $withUserinfo]);

        self::assertSame('v', $client->get('A'));
        self::assertCount(1, $this->history);
        self::assertSame('', $this->history[0]['request']->getUri()->getUserInfo());
        $requests = $this->stub->requests();
        self::assertCount(1, $requests);
        self::assertSame('Bearer ' . self::TOKEN, $requests[0]['headers']['authorization']);
    }

    public function testA503IsRetriedAndA404ReadsTheListingAsWithCurl(): void
    {
        $this->secrets(['A' => 'v', 'B' => 'x']);
        $this->stub->fault(['url' => '/api/v1/teams/' . self::TEAM_ID . '/secrets/by-name/A', 'status' => 503]);
        $client = $this->client(['http_client' => $this->guzzle(), 'request_factory' => new HttpFactory(), 'max_retries' => 1]);

        self::assertSame('v', $client->get('A'));
        try {
            $client->get('b');
            self::fail('no SecretNotFoundException');
        } catch (SecretNotFoundException $e) {
            self::assertSame('B', $e->getSuggestion());
            self::assertSame('req-3', $e->getRequestId(), 'headers are read from the PSR-7 answer');
        }
        self::assertCount(4, $this->history);
    }

    public function testTheEndToEndMarkOfTheExportIsReadFromThePsr7Answer(): void
    {
        // A token without its key part: an export the server marks end-to-end holds envelopes.
        $this->stub->route(
            sprintf('GET /teams/%s/secrets/export?format=json&environment=production', self::TEAM_ID),
            ['headers' => ['Cvsm-E2E' => '1'], 'body' => ['A' => 'cvsm-e2e1.1.x.1.y.z']]
        );
        $client = $this->client(['http_client' => $this->guzzle(), 'request_factory' => new HttpFactory()]);

        try {
            $client->getAll();
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertStringContainsString('this team is end-to-end: the token needs its key part', $e->getMessage());
        }
        self::assertCount(1, $this->history, 'not retried');
    }

    public function testAFailureOfTheGivenClientIsANetworkErrorAfterTheRetriesWithoutTheToken(): void
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        self::assertIsResource($socket);
        $port = (int) substr((string) strrchr((string) stream_socket_get_name($socket, false), ':'), 1);
        fclose($socket); // nothing listens there now: every attempt is refused
        $client = new Client([
            'token' => self::TOKEN,
            'base_url' => 'http://127.0.0.1:' . $port . '/api/v1',
            'team' => self::TEAM_ID,
            'max_retries' => 2,
            'http_client' => $this->guzzle(),
            'request_factory' => new HttpFactory(),
        ]);

        try {
            $client->get('A');
            self::fail('no NetworkException');
        } catch (NetworkException $e) {
            self::assertNull($e->getStatus());
            self::assertNull($e->getPrevious(), 'the failure is not chained: it holds the request and its token');
            self::assertStringContainsString('after 3 attempts', $e->getMessage());
            self::assertStringNotContainsString(self::TOKEN, $e->getMessage());
            self::assertStringNotContainsString(self::TOKEN, (string) $e);
        }
        self::assertCount(3, $this->history);
    }

    public function testARedirectIsAnApiErrorAndIsNotFollowed(): void
    {
        $this->stub->route(self::byName('A'), ['status' => 302, 'headers' => ['Location' => 'http://elsewhere.invalid/']]);
        $client = $this->client(['http_client' => $this->guzzle(), 'request_factory' => new HttpFactory()]);

        $this->expectException(ApiException::class);
        $this->expectExceptionMessage('302');
        $client->get('A');
    }

    public function testAClientThatIsItsOwnRequestFactoryNeedsNoOther(): void
    {
        $this->secrets(['A' => 'v']);
        $both = new class ($this->guzzle(), new HttpFactory()) implements ClientInterface, RequestFactoryInterface {
            public function __construct(private ClientInterface $client, private RequestFactoryInterface $factory)
            {
            }

            public function sendRequest(RequestInterface $request): ResponseInterface
            {
                return $this->client->sendRequest($request);
            }

            public function createRequest(string $method, $uri): RequestInterface
            {
                return $this->factory->createRequest($method, $uri);
            }
        };

        self::assertSame('v', $this->client(['http_client' => $both])->get('A'));
        self::assertCount(1, $this->history);
    }

    public function testTheGivenClientIsNeverPrinted(): void
    {
        $client = $this->client(['http_client' => $this->guzzle(), 'request_factory' => new HttpFactory()]);

        self::assertStringNotContainsString('Guzzle', print_r($client, true) . var_export($client, true) . json_encode($client));
    }

    /**
     * @return iterable<string, array{0: array<string, mixed>, 1: string, 2?: array<string, string>}>
     */
    public static function refusedOptions(): iterable
    {
        yield 'an http_client that is not PSR-18' => [['http_client' => new \stdClass()], 'Psr\\Http\\Client\\ClientInterface'];
        yield 'a request_factory that is not PSR-17' => [['http_client' => new Guzzle(), 'request_factory' => new \stdClass()], 'Psr\\Http\\Message\\RequestFactoryInterface'];
        yield 'no request_factory for a client that is not one' => [['http_client' => new Guzzle()], '"request_factory"'];
        yield 'a request_factory without http_client' => [['request_factory' => new HttpFactory()], 'only used with "http_client"'];
        yield 'curl_options beside http_client' => [['http_client' => new Guzzle(), 'request_factory' => new HttpFactory(), 'curl_options' => [CURLOPT_VERBOSE => false]], 'curl_options'];
        yield 'a timeout beside http_client' => [['http_client' => new Guzzle(), 'request_factory' => new HttpFactory(), 'timeout' => 3], 'timeout cannot be used with option "http_client"'];
        yield 'a ca_file beside http_client' => [['http_client' => new Guzzle(), 'request_factory' => new HttpFactory(), 'ca_file' => 'CA'], 'ca_file cannot be used with option "http_client"'];
        yield 'CVSM_TIMEOUT beside http_client' => [['http_client' => new Guzzle(), 'request_factory' => new HttpFactory()], 'CVSM_TIMEOUT cannot be used with option "http_client"', ['CVSM_TIMEOUT' => '3']];
        yield 'CVSM_CA_FILE beside http_client' => [['http_client' => new Guzzle(), 'request_factory' => new HttpFactory()], 'CVSM_CA_FILE cannot be used with option "http_client"', ['CVSM_CA_FILE' => 'CA']];
    }

    /**
     * @dataProvider refusedOptions
     * @param array<string, mixed> $options
     * @param array<string, string> $env
     */
    public function testOptionsThatCannotWorkWithHttpClientAreAConfigurationError(array $options, string $named, array $env = []): void
    {
        // "CA" stands for a usable CA file.
        $usable = fn (array $values): array => array_map(fn (mixed $value): mixed => $value === 'CA' ? $this->caFile() : $value, $values);
        foreach ($usable($env) as $name => $value) {
            $this->setEnv($name, $value);
        }

        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage($named);
        $this->client($usable($options));
    }

    /** Returns a Guzzle client whose history middleware records into $this->history. */
    private function guzzle(): Guzzle
    {
        $stack = HandlerStack::create();
        $stack->push(Middleware::history($this->history));

        return new Guzzle(['handler' => $stack, 'timeout' => 2]);
    }

    /** Returns the path of a PEM bundle with one certificate, in the test's temporary directory. */
    private function caFile(): string
    {
        $key = openssl_pkey_new(['private_key_bits' => 2048, 'private_key_type' => OPENSSL_KEYTYPE_RSA]);
        self::assertNotFalse($key);
        $csr = openssl_csr_new(['commonName' => 'cvsm test CA'], $key);
        self::assertNotFalse($csr);
        $certificate = openssl_csr_sign($csr, null, $key, 1);
        self::assertNotFalse($certificate);
        self::assertTrue(openssl_x509_export($certificate, $pem));
        $path = sys_get_temp_dir() . '/cvsm-psr18-ca-' . getmypid() . '.pem';
        file_put_contents($path, $pem);

        return $path;
    }
}
