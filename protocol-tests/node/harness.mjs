// Broker process and @stomp/stompjs client helpers for the node:test suite.
// Mirrors python/broker.py: own temp dir, free ports, WEIR_BIN override.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { createServer, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { Client } from '@stomp/stompjs';
import { TCPWrapper } from '@stomp/tcp-wrapper';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..');
export const USER = 'admin';
export const PASSWORD = 'secret';

export function unique(prefix = 't') {
  return `${prefix}-${randomUUID().slice(0, 12)}`;
}

export function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.on('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

export function canConnect(port) {
  return new Promise(res => {
    const s = tcpConnect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); res(true); });
    s.on('error', () => res(false));
  });
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

export class Broker {
  // `extraConfig`: TOML appended to the config; `waitPorts`: more ports to wait for (extra
  // listeners it declares); `http`: serve the management listener on a free port
  // (`this.httpPort`) instead of none.
  constructor({ extraConfig = '', waitPorts = [], http = false } = {}) {
    this.extraConfig = extraConfig;
    this.waitPorts = waitPorts;
    this.http = http;
  }

  async start() {
    this.bin = process.env.WEIR_BIN ?? join(repoRoot, 'target', 'release', 'weir');
    if (!existsSync(this.bin)) {
      throw new Error(`broker binary ${this.bin} missing (cargo build --release, or set WEIR_BIN)`);
    }
    this.dir = mkdtempSync(join(tmpdir(), 'weir-node-'));
    const dataDir = join(this.dir, 'data');
    const config = join(this.dir, 'weir.toml');
    writeFileSync(config, [
      '[broker]', `data_dir = "${dataDir}"`, '',
      '[[users]]', `name = "${USER}"`, `password = "${PASSWORD}"`, '',
      '[limits]', 'max_frame_size = 65536', '',
      this.extraConfig,
    ].join('\n'));
    this.port = await freePort();
    this.amqpPort = await freePort();
    this.httpPort = this.http ? await freePort() : null;
    this.logPath = join(this.dir, 'weir.log');
    const { openSync } = await import('node:fs');
    const log = openSync(this.logPath, 'a');
    this.proc = spawn(this.bin, [
      'serve', '--config', config, '--data-dir', dataDir,
      '--stomp', `127.0.0.1:${this.port}`, '--amqp', `127.0.0.1:${this.amqpPort}`,
      // Never the default port: brokers of parallel suites would contend for it.
      '--http', this.http ? `127.0.0.1:${this.httpPort}` : 'off',
      '--log', process.env.WEIR_LOG ?? 'info',
    ], { stdio: ['ignore', log, log] });
    let exited = null;
    this.proc.on('exit', code => { exited = code; });
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      if (exited !== null) throw new Error(`broker exited (${exited}) early:\n${this.logTail()}`);
      const more = this.http ? [...this.waitPorts, this.httpPort] : this.waitPorts;
      if (await canConnect(this.port) && (await Promise.all(more.map(canConnect))).every(Boolean)) {
        return this;
      }
      await sleep(50);
    }
    throw new Error(`broker not listening on ${this.port}:\n${this.logTail()}`);
  }

  logTail() {
    try { return readFileSync(this.logPath, 'utf8').split('\n').slice(-40).join('\n'); }
    catch { return '(no log)'; }
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null) {
      const gone = new Promise(r => this.proc.once('exit', r));
      this.proc.kill('SIGTERM');
      const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10000);
      await gone;
      clearTimeout(timer);
    }
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}

// A connected stompjs client whose incoming messages pile up in a queue we can await.
export async function connectClient(port, { login = USER, passcode = PASSWORD } = {}) {
  const client = new Client({
    webSocketFactory: () => new TCPWrapper('127.0.0.1', port),
    connectHeaders: { login, passcode, host: 'localhost' },
    reconnectDelay: 0,
    heartbeatIncoming: 0,
    heartbeatOutgoing: 0,
  });
  const connected = new Promise((res, rej) => {
    client.onConnect = frame => res(frame);
    client.onStompError = frame => rej(new Error(`ERROR: ${frame.headers.message} ${frame.body}`));
    client.onWebSocketClose = () => rej(new Error('socket closed before CONNECTED'));
  });
  client.activate();
  const frame = await connected;
  client.onWebSocketClose = () => {};
  return { client, frame };
}

export class Inbox {
  constructor() { this.items = []; this.waiters = []; }
  push = msg => {
    const w = this.waiters.shift();
    if (w) w(msg); else this.items.push(msg);
  };
  next(timeoutMs = 5000) {
    if (this.items.length) return Promise.resolve(this.items.shift());
    return new Promise((res, rej) => {
      const t = setTimeout(() => {
        this.waiters = this.waiters.filter(w => w !== done);
        rej(new Error(`no MESSAGE within ${timeoutMs} ms`));
      }, timeoutMs);
      const done = msg => { clearTimeout(t); res(msg); };
      this.waiters.push(done);
    });
  }
  async quiet(ms = 1000) {
    await sleep(ms);
    return this.items.splice(0);
  }
}

// Frames sent with a receipt resolve once the broker confirms them.
export function withReceipt(client, send) {
  const id = unique('r');
  const p = new Promise(res => client.watchForReceipt(id, res));
  send(id);
  return p;
}

export function timeout(promise, ms, what) {
  return Promise.race([
    promise,
    new Promise((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer in ${ms} ms`)), ms)),
  ]);
}

// Writes a CA, a server and a client certificate (CN=`clientCn`) into `dir` with the
// python tests' helper; returns their PEM contents.
export function makeCerts(dir, clientCn) {
  const python = process.env.WEIR_PTEST_PYTHON ?? 'python3';
  execFileSync(python, ['-c', [
    'import sys',
    'from pathlib import Path',
    'sys.path.insert(0, sys.argv[1])',
    'from tls_certs import make_certs',
    'make_certs(Path(sys.argv[2]), sys.argv[3])',
  ].join('\n'), join(repoRoot, 'protocol-tests', 'python'), dir, clientCn]);
  const read = name => readFileSync(join(dir, name));
  return {
    dir,
    ca: read('ca.pem'),
    cert: read('client.pem'),
    key: read('client.key'),
    serverPem: join(dir, 'server.pem'),
    serverKey: join(dir, 'server.key'),
    caPem: join(dir, 'ca.pem'),
  };
}
