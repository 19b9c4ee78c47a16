<?php

declare(strict_types=1);

/*
 * router.php is the stub cvsm server for the unit tests, run by PHP's built-in web server
 * (`php -S 127.0.0.1:PORT router.php`). Tests script it through files in $CVSM_STUB_DIR (see
 * StubServer): routes.json maps "METHOD /path" or "METHOD /path?query" to a list of responses
 * served in order (the last one repeats); every request is logged to requests.jsonl.
 */

$dir = getenv('CVSM_STUB_DIR');
$lock = fopen($dir . '/lock', 'c');
flock($lock, LOCK_EX);

$uri = $_SERVER['REQUEST_URI'];
$method = $_SERVER['REQUEST_METHOD'];
// A request in absolute form (GET http://host/path) came through this server as a proxy.
$proxiedFor = null;
if (preg_match('#^https?://([^/]+)(/.*)?$#iD', $uri, $m)) {
    $proxiedFor = $m[1];
    $uri = $m[2] ?? '/';
}
$path = (string) parse_url($uri, PHP_URL_PATH);
$headers = array_change_key_case(getallheaders(), CASE_LOWER);
file_put_contents($dir . '/requests.jsonl', json_encode([
    'method' => $method,
    'path' => $path,
    'query' => (string) parse_url($uri, PHP_URL_QUERY),
    'headers' => $headers,
    'proxied_for' => $proxiedFor,
]) . "\n", FILE_APPEND);

$routes = json_decode((string) @file_get_contents($dir . '/routes.json'), true) ?: [];
$key = isset($routes[$method . ' ' . $uri]) ? $method . ' ' . $uri : $method . ' ' . $path;
$response = null;
if (isset($routes[$key]) && $routes[$key] !== []) {
    $hits = json_decode((string) @file_get_contents($dir . '/hits.json'), true) ?: [];
    $n = $hits[$key] ?? 0;
    $hits[$key] = $n + 1;
    file_put_contents($dir . '/hits.json', json_encode($hits));
    $response = $routes[$key][min($n, count($routes[$key]) - 1)];
}
flock($lock, LOCK_UN);

if ($response === null) {
    http_response_code(418);
    header('Content-Type: application/json');
    echo json_encode(['error' => 'stub: no route for ' . $method . ' ' . $uri]);

    return true;
}

if (($response['delay_ms'] ?? 0) > 0) {
    usleep($response['delay_ms'] * 1000);
}
$body = (string) ($response['body'] ?? '');
if ($response['json'] ?? false) {
    header('Content-Type: application/json');
}
http_response_code($response['status'] ?? 200);
foreach ($response['headers'] ?? [] as $name => $value) {
    header($name . ': ' . $value);
}
if ($response['truncate'] ?? false) {
    // Promise more than is sent, then hang up: the client sees a dropped connection.
    header('Content-Length: ' . (strlen($body) + 100));
    echo $body;
    flush();
    exit;
}
if (($response['drip_ms'] ?? 0) > 0) {
    // A server that drips its answer: the headers at once, then one byte at a time.
    header('Content-Length: ' . strlen($body));
    flush();
    foreach (str_split($body) as $byte) {
        usleep($response['drip_ms'] * 1000);
        echo $byte;
        flush();
        if (connection_aborted()) {
            break;
        }
    }

    return true;
}
echo $body;

return true;
