// TLS with Node clients: rhea over amqps with SASL PLAIN and with EXTERNAL (a client
// certificate), @stomp/stompjs over a Node TLS socket with a login and with a certificate;
// and the refusals: a wrong password, a certificate from a CA the broker does not trust, a
// password on the plain AMQP port while the broker keeps passwords to TLS. Certificates are
// made by protocol-tests/python/tls_certs.py, as for the python TLS tests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import rhea from 'rhea';
import { Client } from '@stomp/stompjs';
import { TCPWrapper } from '@stomp/tcp-wrapper';
import { Broker, Inbox, USER, PASSWORD, freePort, makeCerts, timeout, unique, withReceipt } from './harness.mjs';

let broker;
let certDir;
let certs; // trusted: ca, client cert and key naming USER
let strangers; // the same from another CA, which the broker does not know
const openClients = [];

before(async () => {
  certDir = mkdtempSync(join(tmpdir(), 'weir-node-tls-'));
  certs = makeCerts(join(certDir, 'trusted'), USER);
  strangers = makeCerts(join(certDir, 'strangers'), USER);
  const stompTls = await freePort();
  const amqps = await freePort();
  broker = new Broker({
    waitPorts: [stompTls, amqps],
    extraConfig: [
      '[security]', 'require_tls_for_passwords = true', '',
      '[tls]',
      `cert_file = "${certs.serverPem}"`,
      `key_file = "${certs.serverKey}"`,
      `ca_file = "${certs.caPem}"`,
      'client_auth = "optional"', '',
      '[[acceptors.extra]]', 'name = "stomp-tls"', `bind = "127.0.0.1:${stompTls}"`,
      'protocols = ["stomp"]', 'tls = true', '',
      '[[acceptors.extra]]', 'name = "amqps"', `bind = "127.0.0.1:${amqps}"`,
      'protocols = ["amqp"]', 'tls = true', '',
    ].join('\n'),
  });
  await broker.start();
  broker.stompTlsPort = stompTls;
  broker.amqpsPort = amqps;
});

after(async () => {
  await Promise.allSettled(openClients.map(c => c.close()));
  await broker?.stop();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

// An open rhea connection, or a rejection saying why it failed (SASL outcome, TLS alert).
function amqpConnect(options) {
  const container = rhea.create_container({ id: unique('rhea') });
  const connection = container.connect({
    host: '127.0.0.1',
    reconnect: false,
    idle_time_out: 0,
    ...options,
  });
  return timeout(new Promise((res, rej) => {
    connection.once('connection_open', () => {
      openClients.push({ close: () => connection.close() });
      res(connection);
    });
    const failed = ctx => {
      const e = ctx.error ?? connection.get_error?.();
      rej(new Error(`${e?.condition ?? ''} ${e?.message ?? e ?? 'disconnected'}`));
    };
    connection.once('connection_error', failed);
    connection.once('disconnected', failed);
  }), 10000, 'rhea connect');
}

function amqps(options) {
  return amqpConnect({
    port: broker.amqpsPort,
    transport: 'tls',
    servername: 'localhost',
    ca: [certs.ca],
    ...options,
  });
}

// Sends one message to a fresh queue and takes it back on a second link.
async function exchangeOne(connection, body) {
  const address = unique('node.amqps');
  const sender = connection.open_sender(address);
  await timeout(new Promise((res, rej) => {
    sender.once('sendable', () => sender.send({ body }));
    sender.once('accepted', res);
    sender.once('rejected', ctx => rej(new Error(`rejected: ${ctx.delivery.remote_state?.error?.description}`)));
  }), 5000, 'message accepted');
  const receiver = connection.open_receiver(address);
  const message = await timeout(new Promise(res => receiver.once('message', ctx => res(ctx.message))),
    5000, 'message received');
  assert.equal(message.body, body);
}

test('rhea over amqps with SASL PLAIN', async () => {
  const connection = await amqps({ username: USER, password: PASSWORD });
  await exchangeOne(connection, 'rhea PLAIN over TLS');
});

test('rhea over amqps with SASL EXTERNAL and a client certificate', async () => {
  const connection = await amqps({ cert: certs.cert, key: certs.key, enable_sasl_external: true });
  await exchangeOne(connection, 'rhea EXTERNAL over TLS');
});

test('rhea over amqps with a wrong password is refused', async () => {
  await assert.rejects(amqps({ username: USER, password: 'wrong' }),
    /unauthorized-access.*Failed to authenticate: 1/);
});

test('a client certificate from an untrusted CA fails the TLS handshake', async () => {
  await assert.rejects(
    amqps({ cert: strangers.cert, key: strangers.key, enable_sasl_external: true }),
    error => {
      // The handshake fails (a TLS alert or a reset), before any SASL exchange.
      assert.match(error.message, /SSL alert|ECONNRESET|socket hang up/);
      return true;
    },
  );
});

test('rhea with a password on the plain AMQP port is refused: PLAIN is kept to TLS', async () => {
  await assert.rejects(
    amqpConnect({ port: broker.amqpPort, username: USER, password: PASSWORD }),
    /No suitable mechanism|Failed to authenticate/,
  );
});

// @stomp/stompjs over a Node TLS socket: the TCP wrapper with a TLS socket in place of its
// TCP one.
function stompTls(port, tlsOptions) {
  return class extends TCPWrapper {
    getSocket() {
      return tlsConnect({ host: '127.0.0.1', port, servername: 'localhost', ca: [certs.ca], ...tlsOptions });
    }
  };
}

async function stompConnect(connectHeaders, tlsOptions = {}) {
  const Wrapper = stompTls(broker.stompTlsPort, tlsOptions);
  const client = new Client({
    webSocketFactory: () => new Wrapper('127.0.0.1', broker.stompTlsPort),
    connectHeaders: { host: 'localhost', ...connectHeaders },
    reconnectDelay: 0,
    heartbeatIncoming: 0,
    heartbeatOutgoing: 0,
  });
  const connected = new Promise((res, rej) => {
    client.onConnect = frame => res(frame);
    client.onStompError = frame => rej(new Error(`ERROR: ${frame.headers.message}`));
    client.onWebSocketClose = () => rej(new Error('socket closed before CONNECTED'));
  });
  client.activate();
  openClients.push({ close: () => client.deactivate() });
  const frame = await timeout(connected, 10000, 'STOMP CONNECT over TLS');
  client.onWebSocketClose = () => {};
  return { client, frame };
}

async function stompRoundTrip(client, body) {
  const dest = `/queue/${unique('node.tls')}`;
  const inbox = new Inbox();
  await withReceipt(client, id => client.subscribe(dest, inbox.push, { receipt: id }));
  await timeout(withReceipt(client, id => client.publish({ destination: dest, body, headers: { receipt: id } })),
    5000, 'SEND receipt');
  assert.equal((await inbox.next()).body, body);
}

test('stompjs over TLS with a login', async () => {
  const { client, frame } = await stompConnect({ login: USER, passcode: PASSWORD });
  assert.equal(frame.headers.version, '1.2');
  await stompRoundTrip(client, 'stompjs over TLS');
});

test('stompjs over TLS logs in with a client certificate and no login', async () => {
  const { client } = await stompConnect({}, { cert: certs.cert, key: certs.key });
  await stompRoundTrip(client, 'stompjs with a certificate');
});

test('stompjs over TLS with a wrong passcode gets an ERROR', async () => {
  await assert.rejects(stompConnect({ login: USER, passcode: 'wrong' }), /ERROR|closed/);
});
