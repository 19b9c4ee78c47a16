<?php

declare(strict_types=1);

namespace Cvsm\Internal;

use Cvsm\Client;
use Cvsm\Exception\NetworkException;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestFactoryInterface;

/**
 * Sends the client's requests through the caller's PSR-18 HTTP client instead of ext-curl: one
 * attempt each, which HttpTransport retries and reads as it does curl's. The request comes from
 * a PSR-17 request factory with the same headers curl sends. The caller's client owns the
 * timeout, the proxy and TLS; a failure it reports (a PSR-18 exception, or a body that cannot be
 * read) is a network error whose message never holds the token. The failure itself is not
 * chained: it may hold the request, and so the token.
 *
 * @internal
 */
final class Psr18Sender
{
    /**
     * @param ClientInterface $client the caller's PSR-18 client
     * @param RequestFactoryInterface $requests the PSR-17 factory that builds its requests
     */
    public function __construct(
        private readonly ClientInterface $client,
        private readonly RequestFactoryInterface $requests
    ) {
    }

    /**
     * Sends GET $url with the bearer token and reads the whole answer.
     *
     * @return array{0: int, 1: array<string, string>, 2: string} the status, the headers
     *                                                            (lower-cased names) and the body
     * @throws NetworkException when the client fails or the body cannot be read
     */
    public function send(string $url, string $label, #[\SensitiveParameter] string $token): array
    {
        try {
            $request = $this->requests->createRequest('GET', $url)
                ->withHeader('Authorization', 'Bearer ' . $token)
                ->withHeader('Accept', \Cvsm\Rules::ACCEPT_JSON)
                ->withHeader('User-Agent', Client::USER_AGENT);
            $response = $this->client->sendRequest($request);
            $headers = [];
            foreach ($response->getHeaders() as $name => $values) {
                $headers[strtolower((string) $name)] = trim(implode(', ', $values));
            }
            // Read, not (string): a stream's __toString() swallows read errors in PSR-7 1.x.
            $stream = $response->getBody();
            if ($stream->isSeekable()) {
                $stream->rewind();
            }
            $body = '';
            while (!$stream->eof()) {
                $body .= $stream->read(65536);
            }

            return [$response->getStatusCode(), $headers, $body];
        } catch (ClientExceptionInterface|\RuntimeException $e) {
            $reason = $token === '' ? $e->getMessage() : str_replace($token, \Cvsm\Rules::REDACTED, $e->getMessage());
            throw new NetworkException(sprintf('GET %s failed: %s', $label, $reason));
        }
    }
}
