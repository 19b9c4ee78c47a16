<?php

declare(strict_types=1);

namespace Cvsm\Tests;

use Cvsm\Client;
use Cvsm\Exception\AuthenticationException;
use Cvsm\Exception\ConfigurationException;
use Cvsm\Exception\CvsmException;

final class SecrecyTest extends TestCase
{
    private const VALUE = 's3cr3t-value-that-must-not-leak';
    private const CURL_SECRET = 'proxy-password-that-must-not-leak';

    public function testPrintedClientShowsConfigurationButNoTokenOrValue(): void
    {
        $this->secrets(['A' => self::VALUE]);
        $logger = new class (self::CURL_SECRET) extends \Psr\Log\AbstractLogger {
            public function __construct(public string $dsn)
            {
            }

            /**
             * @param mixed $level
             * @param string|\Stringable $message
             * @param array<string, mixed> $context
             */
            public function log($level, $message, array $context = []): void
            {
            }
        };
        $client = $this->client([
            'curl_options' => [CURLOPT_PROXYUSERPWD => 'proxy-user:' . self::CURL_SECRET],
            'stale_if_error' => 60,
            'logger' => $logger,
            'on_stale' => static fn () => self::CURL_SECRET,
        ]);
        $client->get('A');
        $client->getAll();

        $forms = self::printedForms($client);

        foreach ($forms as $form => $text) {
            self::assertStringNotContainsString(self::TOKEN, $text, $form);
            self::assertStringNotContainsString(self::VALUE, $text, $form);
            self::assertStringNotContainsString(self::CURL_SECRET, $text, $form);
        }
        self::assertSame('{}', $forms['json_encode']);
        self::assertStringContainsString($this->stub->url(), $forms['print_r']);
        self::assertStringContainsString('[redacted]', $forms['var_dump']);
        self::assertStringContainsString('max_retries', $forms['var_dump']);
        self::assertStringContainsString('stale_if_error', $forms['var_dump']);
    }

    public function testPrintedClientHidesTheBaseUrlPassword(): void
    {
        $this->secrets(['A' => self::VALUE]);
        $withUserinfo = str_replace('://', '://cvsm-user:p4ss-must-not-show@', $this->stub->url());
        $client = $this->client(['base_url' => $withUserinfo]);

        $forms = self::printedForms($client)
            + ['getConfig' => print_r($client->getConfig(), true)];
        foreach ($forms as $form => $text) {
            self::assertStringNotContainsString('p4ss-must-not-show', $text, $form);
            self::assertStringNotContainsString('cvsm-user', $text, $form);
        }
        self::assertStringContainsString(str_replace('://', '://***@', $this->stub->url()), $forms['print_r']);
        self::assertSame($withUserinfo, $client->getBaseUrl());
    }

    /** @return array<string, string> every form in which PHP prints an object */
    private static function printedForms(object $client): array
    {
        ob_start();
        var_dump($client);
        return [
            'var_dump' => (string) ob_get_clean(),
            'print_r' => print_r($client, true),
            'var_export' => var_export($client, true),
            'json_encode' => (string) json_encode($client),
            'array cast' => print_r((array) $client, true),
        ];
    }

    public function testClientCannotBeSerialized(): void
    {
        $this->expectException(\LogicException::class);
        serialize($this->client());
    }

    public function testCloneKeepsTheTokenButNotTheCache(): void
    {
        $this->secrets(['A' => self::VALUE]);
        $client = $this->client();
        $client->get('A');

        $copy = clone $client;
        self::assertSame(self::VALUE, $copy->get('A'));

        self::assertSame(2, $this->requestCount());
        self::assertSame('Bearer ' . self::TOKEN, $this->stub->requests()[1]['headers']['authorization']);
    }

    public function testErrorTracesHideTheTokenEvenWithArgumentsInTraces(): void
    {
        $this->stub->route('GET /teams/' . self::TEAM_ID . '/secrets/export?format=json&environment=production', ['status' => 401, 'body' => ['error' => 'x']]);
        $previous = ini_set('zend.exception_ignore_args', '0');
        try {
            foreach ([
                ConfigurationException::class => static fn () => new Client(['token' => self::TOKEN, 'base_url' => 'not a url', 'team' => 'acme']),
                AuthenticationException::class => fn () => $this->client()->getAll(),
            ] as $class => $fails) {
                try {
                    $fails();
                    self::fail('no ' . $class);
                } catch (CvsmException $e) {
                    self::assertInstanceOf($class, $e);
                    self::assertStringNotContainsString(self::TOKEN, $e->getMessage());
                    $sdkFrames = array_filter(
                        $e->getTrace(),
                        static fn (array $frame) => str_starts_with($frame['class'] ?? '', 'Cvsm\\') && !str_starts_with($frame['class'] ?? '', 'Cvsm\\Tests\\')
                    );
                    self::assertArrayHasKey('args', reset($sdkFrames), $class . ': the trace keeps arguments');
                    self::assertStringNotContainsString(self::TOKEN, print_r($sdkFrames, true), $class);
                }
            }
        } finally {
            ini_set('zend.exception_ignore_args', (string) $previous);
        }
    }
}
