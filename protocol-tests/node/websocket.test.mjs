// STOMP over WebSocket with @stomp/stompjs (over the `ws` package, as Node 20 has no
// WebSocket of its own): at /stomp on the management listener and on the [websocket]
// listener, meeting plain STOMP (stompjs over TCP) and AMQP (rhea) clients on the same
// queue; and over wss:// with the broker's TLS identity.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import rhea from 'rhea';
import { Client } from '@stomp/stompjs';
import {
  Broker, Inbox, USER, PASSWORD, connectClient, freePort, makeCerts, timeout, unique, withReceipt,
} from './harness.mjs';

const SUBPROTOCOLS = ['v12.stomp', 'v11.stomp', 'v10.stomp'];

let plain; // ws:// at /stomp on the HTTP listener and on its own listener
let secure; // wss:// on its own listener and at /stomp on HTTPS
let certDir;
let certs;
const openClients = [];

before(async () => {
  const wsPort = await freePort();
  plain = new Broker({
    http: true,
    waitPorts: [wsPort],
    extraConfig: ['[websocket]', `bind = "127.0.0.1:${wsPort}"`].join('\n'),
  });
  await plain.start();
  plain.wsPort = wsPort;

  certDir = mkdtempSync(join(tmpdir(), 'weir-node-wss-'));
  certs = makeCerts(join(certDir, 'trusted'), USER);
  const wssPort = await freePort();
  secure = new Broker({
    http: true,
    waitPorts: [wssPort],
    extraConfig: [
      '[security]', 'require_tls_for_passwords = true', '',
      '[http]', 'tls = true', '',
      '[websocket]', `bind = "127.0.0.1:${wssPort}"`, 'tls = true', '',
      '[tls]', `cert_file = "${certs.serverPem}"`, `key_file = "${certs.serverKey}"`, '',
    ].join('\n'),
  });
  await secure.start();
  secure.wsPort = wssPort;
});

after(async () => {
  await Promise.allSettled(openClients.map(c => c.close()));
  await plain?.stop();
  await secure?.stop();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

// stompjs over a WebSocket to `url`: resolves with the client once CONNECTED, rejects
// with the ERROR frame's message. `wsOptions` go to the `ws` package (a CA for wss://).
function webClient(url, { login = USER, passcode = PASSWORD, protocols = SUBPROTOCOLS, wsOptions = {} } = {}) {
  let socket;
  const client = new Client({
    webSocketFactory: () => {
      socket = new WebSocket(url, protocols, wsOptions);
      return socket;
    },
    connectHeaders: { login, passcode },
    reconnectDelay: 0,
    heartbeatIncoming: 0,
    heartbeatOutgoing: 0,
  });
  const connected = new Promise((res, rej) => {
    client.onConnect = frame => res({ client, frame, socket });
    client.onStompError = frame => rej(new Error(`ERROR: ${frame.headers.message}`));
    client.onWebSocketClose = event => rej(new Error(`closed before CONNECTED (${event.code})`));
    client.onWebSocketError = () => rej(new Error('WebSocket error'));
  });
  client.activate();
  openClients.push({ close: () => client.deactivate() });
  return timeout(connected, 10000, `stompjs over ${url}`);
}

async function subscribed(client, destination, headers = {}) {
  const inbox = new Inbox();
  await withReceipt(client, id => client.subscribe(destination, inbox.push, { ...headers, receipt: id }));
  return inbox;
}

function publish(client, destination, body, headers = {}) {
  return timeout(withReceipt(client, id => client.publish({ destination, body, headers: { ...headers, receipt: id } })),
    5000, 'RECEIPT for SEND');
}

// A rhea connection to the plain broker's AMQP port.
function amqpConnection() {
  const container = rhea.create_container({ id: unique('rhea') });
  const connection = container.connect({
    host: '127.0.0.1', port: plain.amqpPort, username: USER, password: PASSWORD,
    reconnect: false, idle_time_out: 0,
  });
  return timeout(new Promise((res, rej) => {
    connection.once('connection_open', () => {
      openClients.push({ close: () => connection.close() });
      res(connection);
    });
    connection.once('disconnected', ctx => rej(new Error(`rhea: ${ctx.error ?? 'disconnected'}`)));
  }), 10000, 'rhea connect');
}

test('the highest STOMP subprotocol offered is agreed, and CONNECT agrees 1.2', async () => {
  const { frame, socket } = await webClient(`ws://127.0.0.1:${plain.httpPort}/stomp`);
  assert.equal(socket.protocol, 'v12.stomp');
  assert.equal(frame.headers.version, '1.2');
  const older = await webClient(`ws://127.0.0.1:${plain.wsPort}/stomp`, { protocols: ['v10.stomp', 'v11.stomp'] });
  assert.equal(older.socket.protocol, 'v11.stomp');
});

test('stompjs over WebSocket meets plain STOMP and AMQP on one queue', async () => {
  const queue = unique('ws.mix');
  const destination = `/queue/${queue}`;
  const { client: atStomp } = await webClient(`ws://127.0.0.1:${plain.httpPort}/stomp`);
  const { client: ownListener } = await webClient(`ws://127.0.0.1:${plain.wsPort}/`);
  const { client: tcp } = await connectClient(plain.port);
  openClients.push({ close: () => tcp.deactivate() });

  // WebSocket senders, a TCP consumer.
  const tcpInbox = await subscribed(tcp, destination);
  await publish(atStomp, destination, 'from /stomp');
  await publish(ownListener, destination, 'from the own listener');
  const got = [await tcpInbox.next(), await tcpInbox.next()].map(m => m.body).sort();
  assert.deepEqual(got, ['from /stomp', 'from the own listener']);

  // An AMQP sender, a WebSocket consumer (client acks).
  const other = unique('ws.amqp');
  const webInbox = await subscribed(ownListener, `/queue/${other}`, { ack: 'client-individual' });
  const connection = await amqpConnection();
  const sender = connection.open_sender(other);
  await timeout(new Promise(res => {
    sender.once('sendable', () => sender.send({ body: 'from rhea', application_properties: { colour: 'green' } }));
    sender.once('accepted', res);
  }), 5000, 'AMQP accepted');
  const message = await webInbox.next();
  assert.equal(message.body, 'from rhea');
  assert.equal(message.headers.colour, 'green');
  message.ack();

  // A WebSocket sender, an AMQP consumer.
  const third = unique('ws.back');
  await publish(atStomp, `/queue/${third}`, 'to rhea');
  const receiver = connection.open_receiver(third);
  const back = await timeout(new Promise(res => receiver.once('message', ctx => res(ctx.message))),
    5000, 'AMQP message');
  assert.equal(typeof back.body === 'string' ? back.body : Buffer.from(back.body.content ?? back.body).toString(), 'to rhea');
});

test('a binary body travels unchanged both ways', async () => {
  const destination = `/queue/${unique('ws.bin')}`;
  const { client } = await webClient(`ws://127.0.0.1:${plain.wsPort}/`);
  const inbox = await subscribed(client, destination);
  const bytes = new Uint8Array([0, 1, 2, 255, 0xc3, 0x28, 10, 0]);
  await timeout(withReceipt(client, id => client.publish({ destination, binaryBody: bytes, headers: { receipt: id } })),
    5000, 'RECEIPT');
  const message = await inbox.next();
  assert.deepEqual(Array.from(message.binaryBody), Array.from(bytes));
});

test('a wrong password over WebSocket gets an ERROR', async () => {
  await assert.rejects(webClient(`ws://127.0.0.1:${plain.httpPort}/stomp`, { passcode: 'wrong' }), /ERROR/);
});

test('wss:// on the own listener and at /stomp over HTTPS, with a login kept to TLS', async () => {
  const wsOptions = { ca: [certs.ca], servername: 'localhost' };
  const destination = `/queue/${unique('wss')}`;
  const { client: own, socket } = await webClient(`wss://localhost:${secure.wsPort}/`, { wsOptions });
  assert.equal(socket.protocol, 'v12.stomp');
  const { client: https } = await webClient(`wss://localhost:${secure.httpPort}/stomp`, { wsOptions });
  const inbox = await subscribed(https, destination);
  await publish(own, destination, 'over TLS');
  assert.equal((await inbox.next()).body, 'over TLS');
});
