"""deploy/nginx.conf as printed, run by Debian's nginx in front of a real `cvsm-server serve`.

The file is changed only where an operator must change it (the name, the ports, the certificate
paths, the upstream's port, the access log's path), by the plain substitutions in `OPERATOR_EDITS`,
and the test prints the diff. nginx runs in a private prefix on loopback ports with a certificate
from a CA made for the run (trustme), under a minimal main nginx.conf that includes the file the
way Debian's /etc/nginx/nginx.conf includes sites-enabled/. Clients connect from 127.0.0.2, so
the address the server records tells the client from the proxy (127.0.0.1).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from cvsm_server.runtime.app import CLIENT_MAX_SIZE
from cvsm_server.web.headers import SECURITY_HEADERS
from serving import CONSOLE_SCRIPT, served

ROOT = Path(__file__).resolve().parents[2]
NGINX = Path("/usr/sbin/nginx")
CLIENT = "127.0.0.2"  # the client's source address: not the proxy's
NAME = "localhost"
# A request id the server made (`web.middleware.new_request_id`: its process prefix, a counter);
# nginx's own are 32 hex digits.
SERVER_ID_RE = re.compile(r"[0-9a-f]{16}-[0-9a-f]+\Z")


def require_nginx() -> None:
    if NGINX.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{NGINX} is missing under CI=true (.ci/run installs Debian's nginx)")
    pytest.skip(f"{NGINX} is absent (apt-get install nginx); deploy/nginx.conf is tested by "
                "running it")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def operator_edits(*, http: int, https: int, upstream: int, cert: Path, key: Path,
                   access_log: Path) -> list[tuple[str, str]]:
    """What an operator changes: (text in deploy/nginx.conf, what it becomes), each exact."""
    v6 = ipv6_loopback()
    return [
        ("listen 80;", f"listen 127.0.0.1:{http};"),
        ("listen [::]:80;", f"listen [::1]:{http};" if v6 else "# (no IPv6 loopback here)"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https} ssl http2;"),
        ("listen [::]:443 ssl http2;",
         f"listen [::1]:{https} ssl http2;" if v6 else "# (no IPv6 loopback here)"),
        ("server_name secrets.example.com;", f"server_name {NAME};"),
        ("return 301 https://secrets.example.com$request_uri;",
         f"return 301 https://{NAME}:{https}$request_uri;"),
        ("/etc/letsencrypt/live/secrets.example.com/fullchain.pem", str(cert)),
        ("/etc/letsencrypt/live/secrets.example.com/privkey.pem", str(key)),
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{upstream};"),
        ("/var/log/nginx/cvsm.access.log", str(access_log)),
    ]


def edited(text: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert old in text, f"deploy/nginx.conf no longer has {old!r}: update the test's edits"
        text = text.replace(old, new)
    return text


MAIN_CONF = """\
{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/sites-enabled/cvsm;
}}
"""


@dataclass
class Proxy:
    https: str  # https://localhost:PORT
    http: str  # http://127.0.0.1:PORT
    ca: trustme.CA
    ca_file: Path
    access_log: Path
    outbox: Path

    def client(self, **kwargs) -> httpx.Client:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        transport = httpx.HTTPTransport(verify=context, local_address=CLIENT)
        return httpx.Client(base_url=self.https, transport=transport, timeout=60, **kwargs)


def nginx_command(prefix: Path, *args: str) -> list[str]:
    return [str(NGINX), "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
            "-e", str(prefix / "error.log"), *args]


def new_prefix() -> Path:
    """Outside pytest's 0700 temp root: as root, nginx's workers run as nobody and must reach
    the prefix for their temporary files."""
    prefix = Path(tempfile.mkdtemp(prefix="cvsm-test-nginx-"))
    prefix.chmod(0o755)
    return prefix


def certificate(prefix: Path) -> tuple[trustme.CA, Path, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert(NAME, "127.0.0.1", "::1")
    (prefix / "tls").mkdir(mode=0o700)
    cert_file, key_file = prefix / "tls" / "fullchain.pem", prefix / "tls" / "privkey.pem"
    cert_file.write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key_file))
    return ca, cert_file, key_file


@contextlib.contextmanager
def running_nginx(prefix: Path, site: str, https_port: int) -> Iterator[None]:
    """`nginx -t` on the site under the main conf, then nginx in the foreground until exit."""
    (prefix / "sites-enabled").mkdir()
    (prefix / "sites-enabled" / "cvsm").write_text(site)
    user = "user nobody nogroup;\n" if os.geteuid() == 0 else ""
    (prefix / "nginx.conf").write_text(MAIN_CONF.format(prefix=prefix, user=user))
    test = subprocess.run(nginx_command(prefix, "-t"), capture_output=True, text=True, timeout=30)
    assert test.returncode == 0, test.stderr
    assert "test is successful" in test.stderr
    proc = subprocess.Popen(nginx_command(prefix, "-g", "daemon off;"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", https_port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (prefix / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx did not start listening"
                time.sleep(0.1)
        yield
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful stop
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def proxy(database_url, tmp_path) -> Iterator[Proxy]:
    require_nginx()
    prefix = new_prefix()
    try:
        ca, cert_file, key_file = certificate(prefix)
        ca_file = prefix / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        http_port, https_port = free_port(), free_port()
        app_url = f"https://{NAME}:{https_port}"
        with served(database_url, tmp_path, CVSM_TRUSTED_PROXIES="127.0.0.1",
                    CVSM_APP_URL=app_url, CVSM_BACKGROUND_JOBS="on") as server:
            upstream = int(server.url.rsplit(":", 1)[1])
            printed = (ROOT / "deploy" / "nginx.conf").read_text()
            site = edited(printed, operator_edits(
                http=http_port, https=https_port, upstream=upstream, cert=cert_file,
                key=key_file, access_log=prefix / "cvsm.access.log"))
            print("deploy/nginx.conf as run (only these lines changed):")
            print("".join(difflib.unified_diff(printed.splitlines(True), site.splitlines(True),
                                               "deploy/nginx.conf", "sites-enabled/cvsm", n=0)))
            with running_nginx(prefix, site, https_port):
                yield Proxy(app_url, f"http://127.0.0.1:{http_port}", ca, ca_file,
                            prefix / "cvsm.access.log", tmp_path / "serve-data" / "outbox")
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def assert_security_headers_once(headers: httpx.Headers, *, hsts: bool = True) -> None:
    for name, value in SECURITY_HEADERS.items():
        if name == "Strict-Transport-Security" and not hsts:
            continue
        assert headers.get_list(name) == [value], (name, headers.get_list(name))
    assert headers.get_list("Server") == ["nginx"]  # server_tokens off: no version


def assert_nginx_json(resp: httpx.Response, status: int, message: str, *, hsts: bool = True) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.json() == {"error": message}
    assert_security_headers_once(resp.headers, hsts=hsts)
    assert re.fullmatch(r"[0-9a-f]{32}", resp.headers["X-Request-Id"])


def raw_tls(proxy: Proxy, request: bytes) -> tuple[int, dict[str, list[str]], bytes]:
    """Send `request` bytes as they are over TLS; (status, headers, body) of the answer."""
    context = ssl.create_default_context()
    proxy.ca.configure_trust(context)
    port = int(proxy.https.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30,
                                  source_address=(CLIENT, 0)) as raw:
        with context.wrap_socket(raw, server_hostname=NAME) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                if length and len(body) >= int(length.group(1)):
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return int(lines[0].split()[1]), headers, body


def test_nginx_conf_as_printed_in_front_of_the_server(proxy: Proxy) -> None:
    with proxy.client() as http:
        # TLS with the run's CA; the server's answer, each security header once, and its id.
        health = http.get("/api/v1/health")
        assert health.status_code == 200
        assert_security_headers_once(health.headers)
        assert SERVER_ID_RE.match(health.headers["X-Request-Id"])

        # The client's address, not the proxy's, and not what the client claims.
        name = f"u_{uuid.uuid4().hex[:10]}"
        resp = http.post("/api/v1/auth/register", json={
            "email": f"{name}@example.com", "username": name, "password": "correct horse 1",
            "name": "U"}, headers={"X-Forwarded-For": "203.0.113.66"})
        assert resp.status_code == 201, resp.text
        http.headers["Authorization"] = f"Bearer {resp.json()['token']}"
        team = http.post("/api/v1/teams", json={"name": "T", "slug": name.replace("_", "-")},
                         headers={"X-Forwarded-For": "203.0.113.66, 198.51.100.7"})
        assert team.status_code == 201, team.text
        team_id = team.json()["team"]["id"]
        entries = http.get(f"/api/v1/teams/{team_id}/audit").json()["logs"]
        assert entries and {entry["ip_address"] for entry in entries} == {CLIENT}, entries

        # Share links on the public name and port, and they open through nginx.
        secret = http.post(f"/api/v1/teams/{team_id}/secrets", json={
            "name": "K", "value": "v", "environment": "production"})
        assert secret.status_code == 201, secret.text
        share = http.post(f"/api/v1/teams/{team_id}/secrets/{secret.json()['secret']['id']}/shares",
                          json={})
        assert share.status_code == 201, share.text
        link = share.json()["url"]
        assert link.startswith(f"{proxy.https}/share/shr_"), link
        with proxy.client() as anonymous:
            page = anonymous.get(link)
        assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
        assert_security_headers_once(page.headers)

        # The server's own 413, in JSON: nginx lets through a body one byte over the largest
        # route limit (bulk writes, CLIENT_MAX_SIZE) and the server refuses it.
        big = http.post(f"/api/v1/teams/{team_id}/secrets/bulk", content=b" " * (CLIENT_MAX_SIZE + 1),
                        headers={"Content-Type": "application/json"})
        assert big.status_code == 413, big.text
        assert big.json() == {"error": "Isi permintaan terlalu besar"}
        assert SERVER_ID_RE.match(big.headers["X-Request-Id"])  # the server's answer, not nginx's
        assert_security_headers_once(big.headers)

    # A body over nginx's own limit: nginx answers at once, in JSON with the headers.
    status, headers, body = raw_tls(proxy, (
        f"POST /api/v1/auth/login HTTP/1.1\r\nHost: {NAME}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {200 * 1024 * 1024}\r\n\r\n").encode())
    assert status == 413 and json.loads(body) == {"error": "Isi permintaan terlalu besar"}
    assert headers["content-type"] == ["application/json"]
    for name, value in SECURITY_HEADERS.items():
        assert headers[name.lower()] == [value], name
    assert headers["server"] == ["nginx"]
    # A request nginx cannot parse: its 400, in JSON.
    status, headers, body = raw_tls(proxy, b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 400 and json.loads(body) == {"error": "Permintaan tidak valid"}, (headers, body)
    assert headers["x-frame-options"] == ["DENY"] and headers["server"] == ["nginx"]
    # Plain HTTP to the HTTPS port: a 400, in JSON too.
    with httpx.Client(timeout=30) as plain:
        wrong_port = plain.get(proxy.https.replace("https://", "http://") + "/api/v1/health")
    assert_nginx_json(wrong_port, 400, "Permintaan tidak valid")

    # HTTP/2 to clients that offer it (curl, as browsers do: ALPN), with the same headers.
    out = subprocess.run(
        ["curl", "-sS", "--http2", "--cacert", str(proxy.ca_file), "--interface", CLIENT,
         "-D", "-", "-o", "/dev/null", "-w", "proto=%{http_version}\n",
         f"{proxy.https}/api/v1/health"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("HTTP/2 200"), out.stdout
    assert "proto=2" in out.stdout
    h2_headers = [line.split(":", 1)[0].lower() for line in out.stdout.splitlines() if ":" in line]
    for name in SECURITY_HEADERS:
        assert h2_headers.count(name.lower()) == 1, (name, out.stdout)

    # Port 80: a redirect to the fixed name (never the Host sent), in JSON, no version.
    with httpx.Client(timeout=30) as plain:
        moved = plain.get(f"{proxy.http}/app/login?next=%2Fapp", headers={"Host": "evil.example"})
    assert_nginx_json(moved, 301, "Gunakan HTTPS", hsts=False)
    assert moved.headers["Location"] == f"{proxy.https}/app/login?next=%2Fapp"

    # Mail links (the verification mail the sign-up queued) on the public name too.
    deadline = time.monotonic() + 60
    while not (files := sorted(proxy.outbox.glob("*.eml")) if proxy.outbox.is_dir() else []):
        assert time.monotonic() < deadline, "no mail in the outbox"
        time.sleep(0.2)
    mail = subprocess.run([str(CONSOLE_SCRIPT), "mail", "show",
                           "--links"], env={**os.environ, "CVSM_DATA_DIR": str(proxy.outbox.parent)},
                          capture_output=True, text=True, timeout=60)
    assert mail.returncode == 0, mail.stderr
    links = mail.stdout.split()
    assert links and all(link.startswith(f"{proxy.https}/") for link in links), links

    # The access log: the client's address, the path without its query and without the share
    # token, and the request id the client got.
    log = proxy.access_log.read_text()
    assert f'{CLIENT} [' in log
    assert "shr_[redacted]" in log and link.rsplit("/", 1)[1] not in log
    assert "next=" not in log
    assert health.headers["X-Request-Id"] in log
    assert moved.headers["X-Request-Id"] in log


def test_nginx_answers_502_in_json_when_the_server_is_down() -> None:
    """The same file with the upstream on a port nothing listens on."""
    require_nginx()
    prefix = new_prefix()
    try:
        ca, cert_file, key_file = certificate(prefix)
        https_port = free_port()
        site = edited((ROOT / "deploy" / "nginx.conf").read_text(), operator_edits(
            http=free_port(), https=https_port, upstream=free_port(), cert=cert_file,
            key=key_file, access_log=prefix / "access.log"))
        context = ssl.create_default_context()
        ca.configure_trust(context)
        with running_nginx(prefix, site, https_port), \
                httpx.Client(verify=context, timeout=30) as http:
            resp = http.get(f"https://{NAME}:{https_port}/api/v1/health")
        assert_nginx_json(resp, 502, "Server sedang tidak tersedia")
        assert "/api/v1/health" in (prefix / "access.log").read_text()
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
