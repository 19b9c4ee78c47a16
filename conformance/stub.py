"""The one stub cvsm API that every SDK's own tests run against (canned answers and faults).

It serves the endpoints the SDK uses (one secret by name, the secret list with environment and
search, the JSON export; the team by id or slug in the path, 404 for neither) plus one secret by
id, from in-memory state, records every request, and replays scripted faults (a fault lets the
first `after` requests it matches through, then answers `count` of them). Tests drive it over HTTP:

  POST /_stub/reset     {"token", "teams": [...], "secrets": [{"id","name","environment","value"}],
                         "e2e": {"team_id", "key_version", "wrapped_key"}}  (e2e optional: with it
                         the team is end-to-end: by-name answers' secrets say "e2e": true, the
                         JSON export carries "Cvsm-E2E: 1", and GET /teams/T/e2e/key answers it;
                         without it that is a 400)
  POST /_stub/faults    [{"path": "<prefix>", "after": N, "count": N, "status": S, "retry_after": "5",
                          "headers": {"Name": "value"}, "body": "<raw>", "drop": true,
                          "garbage": true, "delay": SECONDS, "drip": SECONDS_PER_BYTE,
                          "no_request_id": true, "url": "/exact/path[?query]"}]  (url: the fault
                         matches only that path, and that query when it holds "?", not "path"'s prefix;
                         a fault with status 200 and a body is a scripted answer)
  GET  /_stub/requests  -> [{"method","path","query","headers","proxied","host","body"}] (header names
                           lower-cased; proxied: the request line held an absolute URL, as a client
                           sends it to an HTTP proxy; body: a POST's body as text)

A POST to any other path is recorded too and answered by its fault, else 404.

Every API answer carries "X-Request-Id: req-N" (N counts the API requests from 1).

The live change stream, GET /api/v1/teams/T/secrets/changes?environment=E (default production),
answers as the server's does (PROTOCOL.md, R16): text/event-stream, chunked, opening with
`event: snapshot` and `data: {"secrets": {NAME: {"environment", "version"}}}` from the stored
secrets (a secret's "version" is 1 unless reset or a change says otherwise; by-name and by-id
answers carry it too), then held open. Faults refuse it like any path. Tests drive open streams:

  POST /_stub/changes   [{"name", "environment": "production", "value": V} -> stored at the next
                          version, and `event: change` {"name", "environment", "version"} sent to
                          every open stream; "deleted": true removes it and sends {"name",
                          "deleted": true}; "silent": true changes the store only; "id": "41"
                          adds an `id:` line to the event;
                         {"raw": "<text>"} -> written as is to every open stream;
                         {"close": true} -> every open stream ends (the connection closes)]
  GET  /_stub/streams   -> {"open": N, "closed": N} (streams open now; streams ended, by either
                           side, since the reset; a reset ends the open ones)

Usage: python3 conformance/stub.py PORT_FILE [CERT KEY]  (binds 127.0.0.1 on a free port and writes it
there; with CERT and KEY it speaks HTTPS).
"""

import json
import ssl
import os
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LOCK = threading.Condition()
STATE = {"token": "", "teams": [], "secrets": [], "e2e": None}
FAULTS = []
REQUESTS = []
STREAMS = []  # one list of pending writes per open change stream (None: end it)
ENDED = [0]  # change streams ended since the reset


def _json(handler, status, payload, headers=None):
    _raw(handler, status, json.dumps(payload).encode(), headers)


def _raw(handler, status, body, headers=None, drip=None):
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    if getattr(handler, "request_id", None):
        handler.send_header("X-Request-Id", handler.request_id)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    if drip:
        for i in range(len(body)):
            handler.wfile.write(body[i : i + 1])
            handler.wfile.flush()
            time.sleep(drip)
    else:
        handler.wfile.write(body)


def _matches(fault, path, query):
    if "url" in fault:
        want_path, has_query, want_query = fault["url"].partition("?")
        return path == want_path and (not has_query or query == want_query)
    return path.startswith(fault.get("path", ""))


def _take_fault(path, query=""):
    with LOCK:
        for fault in FAULTS:
            if _matches(fault, path, query) and fault.get("after", 0) > 0:
                fault["after"] -= 1
                continue
            if _matches(fault, path, query) and fault.get("count", 1) > 0:
                fault["count"] = fault.get("count", 1) - 1
                return dict(fault)
    return None


def _meta(secret):
    return {k: secret[k] for k in ("id", "name", "environment")} | {
        "version": secret.get("version", 1),
        "type": "credential",
        "description": "",
        "updated_at": "2025-01-01T00:00:00Z",
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep the bats output clean
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def do_POST(self):
        url = urlsplit(self.path)
        if url.path == "/_stub/reset":
            data = self._body()
            with LOCK:
                STATE.update({"e2e": None} | data)
                FAULTS.clear()
                REQUESTS.clear()
                for pending in STREAMS:
                    pending.append(None)
                ENDED[0] = -len(STREAMS)  # those end after the reset: not counted
                LOCK.notify_all()
            return _json(self, 200, {"ok": True})
        if url.path == "/_stub/changes":
            with LOCK:
                for item in self._body():
                    _change(item)
                LOCK.notify_all()
            return _json(self, 200, {"ok": True})
        if url.path == "/_stub/faults":
            with LOCK:
                FAULTS.extend(self._body())
            return _json(self, 200, {"ok": True})
        if not url.path.startswith("/_stub/"):  # an API POST: recorded and faulted as a GET is
            self.post_body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return self.do_GET()
        return _json(self, 404, {"error": "tidak ditemukan"})

    def do_GET(self):
        url = urlsplit(self.path)
        self.request_id = None
        if url.path == "/_stub/requests":
            with LOCK:
                return _json(self, 200, list(REQUESTS))
        if url.path == "/_stub/streams":
            with LOCK:
                return _json(self, 200, {"open": len(STREAMS), "closed": max(ENDED[0], 0)})
        with LOCK:
            REQUESTS.append(
                {
                    "method": self.command,
                    "path": url.path,
                    "query": url.query,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "proxied": bool(url.scheme),
                    "host": url.netloc or self.headers.get("Host", ""),
                    "body": self.post_body.decode(errors="replace") if self.command == "POST" else "",
                }
            )
            self.request_id = f"req-{len(REQUESTS)}"
        fault = _take_fault(url.path, url.query)
        if fault and fault.get("no_request_id"):
            self.request_id = None
        if fault:
            if fault.get("delay"):
                time.sleep(fault["delay"])
            if fault.get("drop"):
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if fault.get("garbage"):
                self.wfile.write(b"this is not http\r\n\r\n")
                self.close_connection = True
                return
            if "status" in fault:
                headers = dict(fault.get("headers", {}))
                if "retry_after" in fault:
                    headers["Retry-After"] = str(fault["retry_after"])
                if "body" in fault:
                    raw = fault["body"].encode()
                else:
                    raw = json.dumps({"error": "kesalahan buatan"}).encode()
                return _raw(self, fault["status"], raw, headers, fault.get("drip"))
        if self.command == "POST":
            return _json(self, 404, {"error": "tidak ditemukan"})
        self._api(url)

    def _api(self, url):
        if self.headers.get("Authorization") != f"Bearer {STATE['token']}":
            return _json(self, 401, {"error": "token tidak valid"})
        parts = url.path.split("/")
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if len(parts) == 7 and parts[:4] == ["", "api", "v1", "teams"] and parts[5:] == ["e2e", "key"]:
            if not any(parts[4] in (t["id"], t.get("slug")) for t in STATE["teams"]):
                return _json(self, 404, {"error": "tim tidak ditemukan"})
            if not STATE["e2e"]:
                return _json(self, 400, {"error": "tim ini bukan end-to-end"})
            return _json(self, 200, STATE["e2e"])
        if len(parts) >= 6 and parts[:4] == ["", "api", "v1", "teams"] and parts[5] == "secrets":
            team = next((t["id"] for t in STATE["teams"] if parts[4] in (t["id"], t.get("slug"))), None)
            if team is None:
                return _json(self, 404, {"error": "tim tidak ditemukan"})
            secrets = [s for s in STATE["secrets"] if s.get("team", team) == team]
            if len(parts) == 7 and parts[6] == "changes":
                env = query.get("environment", "production")
                versions = {s["name"]: {"environment": env, "version": s.get("version", 1)}
                            for s in secrets if s["environment"] == env}
                return self._stream(_event("snapshot", {"secrets": versions}))
            if len(parts) == 6:
                env, search = query.get("environment"), query.get("search", "").lower()
                found = [
                    _meta(s)
                    for s in sorted(secrets, key=lambda s: (s["name"], s["environment"]))
                    if (env is None or s["environment"] == env) and search in s["name"].lower()
                ]
                return _json(self, 200, {"secrets": found, "total": len(found)})
            if len(parts) == 7 and parts[6] == "export":
                env = query.get("environment")
                if query.get("format") != "json":
                    return _json(self, 400, {"error": "format harus json"})
                out = {s["name"]: s["value"] for s in secrets if env is None or s["environment"] == env}
                return _json(self, 200, out, {"Cvsm-E2E": "1"} if STATE["e2e"] else None)
            if len(parts) == 8 and parts[6] == "by-name":
                env = query.get("environment", "production")
                for s in secrets:
                    if s["name"] == unquote(parts[7]) and s["environment"] == env:
                        meta = _meta(s) | ({"e2e": True} if STATE["e2e"] else {})
                        return _json(self, 200, {"secret": meta, "value": s["value"]})
                return _json(self, 404, {"error": "rahasia tidak ditemukan"})
            if len(parts) == 7:
                for s in secrets:
                    if s["id"] == parts[6]:
                        return _json(self, 200, {"secret": _meta(s), "value": s["value"]})
                return _json(self, 404, {"error": "rahasia tidak ditemukan"})
        return _json(self, 404, {"error": "tidak ditemukan"})

    def _stream(self, first):
        """Hold a change stream open: send `first`, then what /_stub/changes queues, until it is
        closed there or the client leaves."""
        self.send_response(200)
        for name, value in (("Content-Type", "text/event-stream"), ("Cache-Control", "no-store"),
                            ("Transfer-Encoding", "chunked"), ("X-Request-Id", self.request_id)):
            if value:
                self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        pending = [first]
        with LOCK:
            STREAMS.append(pending)
        try:
            while True:
                with LOCK:
                    if not pending:
                        LOCK.wait(0.05)
                    items, pending[:] = list(pending), []
                for item in items:
                    if item is None:
                        self.wfile.write(b"0\r\n\r\n")
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(item), item))
                self.wfile.flush()
                readable, _, _ = select.select([self.connection], [], [], 0)
                # The client left (a TLS socket is peeked under its encryption: no bytes come).
                if readable and not socket.socket.recv(self.connection, 1, socket.MSG_PEEK):
                    return
        except OSError:
            pass  # the client left
        finally:
            with LOCK:
                STREAMS.remove(pending)
                ENDED[0] += 1


def _event(name, data, event_id=None):
    head = f"event: {name}\n" + (f"id: {event_id}\n" if event_id else "")
    return (head + f"data: {json.dumps(data)}\n\n").encode()


def _change(item):
    """Apply one /_stub/changes item (under LOCK)."""
    if "raw" in item or item.get("close"):
        for pending in STREAMS:
            pending.append(None if item.get("close") else item["raw"].encode())
        return
    env = item.get("environment", "production")
    found = [s for s in STATE["secrets"] if (s["name"], s["environment"]) == (item["name"], env)]
    if item.get("deleted"):
        STATE["secrets"] = [s for s in STATE["secrets"] if s not in found]
        data = {"name": item["name"], "deleted": True}
    else:
        if not found:
            found = [{"id": f"stub-{len(STATE['secrets']) + 1}", "name": item["name"], "environment": env,
                      "version": 0}]
            STATE["secrets"].append(found[0])
        found[0]["value"] = item["value"]
        found[0]["version"] = found[0].get("version", 1) + 1
        data = {"name": item["name"], "environment": env, "version": found[0]["version"]}
    if not item.get("silent"):
        for pending in STREAMS:
            pending.append(_event("change", data, item.get("id")))


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if len(sys.argv) == 4:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[2], sys.argv[3])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
