'use strict';
/**
 * proxy: a small forward HTTP proxy on 127.0.0.1 for tests. It forwards absolute-form requests
 * (plain http) and tunnels CONNECT (https), recording each as `{method, url}`.
 */

const http = require('node:http');
const net = require('node:net');

class ForwardProxy {
  constructor() {
    this.requests = [];
    this.sockets = new Set();
    this.server = http.createServer((req, res) => this.#forward(req, res));
    this.server.on('connect', (req, socket, head) => this.#tunnel(req, socket, head));
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
    this.url = `http://127.0.0.1:${this.port}`;
    return this;
  }

  async close() {
    for (const socket of this.sockets) socket.destroy();
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  #forward(req, res) {
    this.requests.push({ method: req.method, url: req.url });
    let target;
    try {
      target = new URL(req.url);
    } catch {
      res.writeHead(400).end('absolute-form request expected');
      return;
    }
    const upstream = http.request(
      target,
      { method: req.method, headers: { ...req.headers, connection: 'close' } },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  }

  #tunnel(req, socket, head) {
    this.requests.push({ method: req.method, url: req.url });
    const [host, port] = req.url.split(':');
    const upstream = net.connect(Number(port), host, () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    this.sockets.add(upstream);
    upstream.on('close', () => this.sockets.delete(upstream));
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  }
}

module.exports = { ForwardProxy };
