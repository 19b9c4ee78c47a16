<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Exception\ApiException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Internal\HttpTransport;

/**
 * TransportTest checks the transport: the backoff schedule, Retry-After, the timeout over the
 * whole answer, and the curl_options seam.
 */
final class TransportTest extends TestCase
{
    private const EXPORT = 'GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';

    public function testBackoffIsFullJitterThatDoublesEachAttempt(): void
    {
        $this->stub->route(self::EXPORT, ['status' => 503, 'body' => ['error' => 'sibuk']]);
        $sleeps = [];
        $transport = new HttpTransport(2, 3, [], static function (float $seconds) use (&$sleeps): void {
            $sleeps[] = $seconds;
        });

        try {
            $transport->getJson($this->exportUrl(), '/export', self::TOKEN);
            self::fail('no ApiException');
        } catch (ApiException $e) {
            self::assertSame(503, $e->getStatus());
        }

        self::assertCount(3, $sleeps, 'one sleep before each of the 3 retries');
        foreach ($sleeps as $attempt => $seconds) {
            self::assertGreaterThanOrEqual(0.0, $seconds);
            self::assertLessThanOrEqual(0.1 * 2 ** $attempt, $seconds, 'attempt ' . $attempt);
        }
        self::assertSame(4, $this->requestCount());
    }

    /**
     * @return iterable<string, array{0: string, 1: ?int}>
     */
    public static function retryAfterForms(): iterable
    {
        $now = 1_700_000_000;
        // 0, seconds, a date ahead or past, words and no header are the conformance case retry_after_forms.
        yield 'leading zeros' => ['007', 7];
        yield 'surrounding spaces' => [' 5 ', 5];
        yield 'huge' => ['99999999999999999999999', PHP_INT_MAX];
        yield 'IMF-fixdate now' => [gmdate('D, d M Y H:i:s', $now) . ' GMT', 0];
        yield 'RFC 850 ahead' => [gmdate('l, d-M-y H:i:s', $now + 60) . ' GMT', 60];
        yield 'asctime ahead' => [gmdate('D M j H:i:s Y', $now + 30), 30];
        yield 'asctime, one-digit day' => ['Wed Nov  1 00:00:00 2023', 0];
        yield 'empty' => ['', null];
        yield 'negative' => ['-5', null];
        yield 'fraction' => ['1.5', null];
        yield 'relative date' => ['+1 day', null];
        yield 'date without zone' => [gmdate('D, d M Y H:i:s', $now + 120), null];
        yield 'impossible date' => ['Mon, 31 Feb 2030 00:00:00 GMT', null];
        yield 'ISO 8601' => [gmdate('Y-m-d\\TH:i:s\\Z', $now + 120), null];
    }

    /**
     * @dataProvider retryAfterForms
     */
    public function testRetryAfterForms(string $header, ?int $seconds): void
    {
        self::assertSame($seconds, HttpTransport::retryAfter($header, 1_700_000_000.0));
    }

    public function testRetryAfterOfAnHttpDateIsRoundedUp(): void
    {
        $date = gmdate('D, d M Y H:i:s', 1_700_000_100) . ' GMT';

        self::assertSame(100, HttpTransport::retryAfter($date, 1_700_000_000.0));
        self::assertSame(100, HttpTransport::retryAfter($date, 1_700_000_000.2), '99.8 s rounds up');
        self::assertSame(1, HttpTransport::retryAfter($date, 1_700_000_099.9));
        self::assertNull(HttpTransport::retryAfter(null));
    }

    public function testCurlOptionsReachEveryRequest(): void
    {
        // CURLOPT_RESOLVE sends the made-up host to the stub: it only works if the option is applied.
        $this->stub->route(self::EXPORT, ['body' => ['SEAM' => 'curl']]);
        $client = $this->client([
            'base_url' => 'http://cvsm.invalid:' . $this->stub->port . '/api/v1',
            'curl_options' => [CURLOPT_RESOLVE => ['cvsm.invalid:' . $this->stub->port . ':127.0.0.1']],
        ]);

        self::assertSame(['SEAM' => 'curl'], $client->getAll());
        self::assertSame('cvsm.invalid:' . $this->stub->port, $this->stub->requests()[0]['headers']['host']);
    }

    public function testCurlOptionsCannotReplaceTheHeaders(): void
    {
        try {
            $this->client(['curl_options' => [CURLOPT_HTTPHEADER => ['Authorization: Bearer other']]]);
            self::fail('no ConfigurationException');
        } catch (ConfigurationException $e) {
            self::assertSame('option "curl_options" may not set CURLOPT_HTTPHEADER: the client sets it itself', $e->getMessage());
        }
    }

    /**
     * @return iterable<string, array{0: mixed, 1: string}>
     */
    public static function invalidCurlOptions(): iterable
    {
        yield 'not an array' => ['CURLOPT_PROXY=x', 'must be an array'];
        yield 'a name, not a constant' => [['CURLOPT_PROXY' => 'x'], 'not an integer'];
        yield 'an unknown number' => [[987654321 => 'x'], 'the key 987654321'];
        yield 'a value curl refuses' => [[CURLOPT_RESOLVE => 'not an array'], 'rejects the value of CURLOPT_RESOLVE'];
        yield 'the URL' => [[CURLOPT_URL => 'http://elsewhere/'], 'may not set CURLOPT_URL'];
        yield 'the write function' => [[CURLOPT_WRITEFUNCTION => 'strlen'], 'may not set CURLOPT_WRITEFUNCTION'];
    }

    /**
     * @dataProvider invalidCurlOptions
     */
    public function testInvalidCurlOptionsAreConfigurationErrors(mixed $curlOptions, string $message): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage($message);
        $this->client(['curl_options' => $curlOptions]);
    }

    private function exportUrl(): string
    {
        return $this->stub->url() . '/teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production';
    }
}
