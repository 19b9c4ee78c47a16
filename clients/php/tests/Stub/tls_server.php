<?php

declare(strict_types=1);

/*
 * tls_server.php is a tiny HTTPS server for the unit tests: `php tls_server.php CERT_AND_KEY.pem
 * PORT_FILE`. It listens on a free port of 127.0.0.1, writes the port to PORT_FILE, and answers
 * every request with 200 and the JSON export {"TLS": "trusted"}. A handshake the client refuses
 * is skipped.
 */

[, $pem, $portFile] = $argv;
$context = stream_context_create(['ssl' => ['local_cert' => $pem, 'verify_peer' => false]]);
$server = stream_socket_server('tls://127.0.0.1:0', $errno, $errstr, STREAM_SERVER_BIND | STREAM_SERVER_LISTEN, $context);
if ($server === false) {
    fwrite(STDERR, "cannot listen: $errstr\n");
    exit(1);
}
$name = (string) stream_socket_get_name($server, false);
file_put_contents($portFile, substr($name, strrpos($name, ':') + 1));

while (true) {
    $connection = @stream_socket_accept($server, 60);
    if ($connection === false) {
        continue; // a refused handshake, or no client for a minute
    }
    stream_set_timeout($connection, 5);
    $request = '';
    while (!str_contains($request, "\r\n\r\n") && ($line = fgets($connection)) !== false) {
        $request .= $line;
    }
    $body = '{"TLS":"trusted"}';
    fwrite($connection, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " . strlen($body) . "\r\nConnection: close\r\n\r\n" . $body);
    fclose($connection);
}
