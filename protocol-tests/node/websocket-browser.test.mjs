// STOMP over WebSocket from a real browser: Debian's headless chromium, driven by
// puppeteer-core, loads @stomp/stompjs's browser bundle into a page of the broker's own
// origin and talks to /stomp with the browser's WebSocket, meeting a plain STOMP client.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { launchBrowser, closeBrowser } from './browser.mjs';
import { Broker, Inbox, USER, PASSWORD, connectClient, repoRoot, timeout, unique, withReceipt } from './harness.mjs';

const STOMPJS_BUNDLE = join(repoRoot, 'protocol-tests', 'node_modules', '@stomp', 'stompjs', 'bundles', 'stomp.umd.min.js');

let broker;
let browser;
let page;
const openClients = [];

before(async () => {
  broker = new Broker({ http: true });
  await broker.start();
  browser = await launchBrowser();
  // A page of the broker's origin, as the web console is.
  page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${broker.httpPort}/health/live`, { timeout: 10000 });
  await page.evaluate(readFileSync(STOMPJS_BUNDLE, 'utf8'));
});

after(async () => {
  try {
    await Promise.allSettled(openClients.map(c => c.close()));
    await closeBrowser(browser);
  } finally {
    await broker?.stop();
  }
});

test('stompjs in chromium speaks STOMP over /stomp with a plain STOMP client', async () => {
  const fromBrowser = `/queue/${unique('browser.out')}`;
  const toBrowser = `/queue/${unique('browser.in')}`;
  const { client: tcp } = await connectClient(broker.port);
  openClients.push({ close: () => tcp.deactivate() });
  const inbox = new Inbox();
  await withReceipt(tcp, id => tcp.subscribe(fromBrowser, inbox.push, { receipt: id }));

  // In the page: connect with the browser's own WebSocket, subscribe, send one message,
  // and keep what arrives for the next evaluation.
  const connected = await page.evaluate(`new Promise((resolve, reject) => {
    const client = new StompJs.Client({
      brokerURL: 'ws://' + location.host + '/stomp',
      connectHeaders: { login: ${JSON.stringify(USER)}, passcode: ${JSON.stringify(PASSWORD)} },
      reconnectDelay: 0,
    });
    window.received = new Promise(got => {
      client.onConnect = frame => {
        client.subscribe(${JSON.stringify(toBrowser)}, message => got(message.body));
        client.publish({ destination: ${JSON.stringify(fromBrowser)}, body: 'hello from chromium' });
        resolve({ version: frame.headers.version, protocol: client.webSocket.protocol });
      };
    });
    client.onStompError = frame => reject(new Error(frame.headers.message));
    client.onWebSocketClose = event => reject(new Error('closed: ' + event.code));
    client.activate();
    window.stompClient = client;
  })`);
  assert.deepEqual(connected, { version: '1.2', protocol: 'v12.stomp' });
  assert.equal((await inbox.next()).body, 'hello from chromium');

  await withReceipt(tcp, id => tcp.publish({ destination: toBrowser, body: 'hello, browser', headers: { receipt: id } }));
  const body = await timeout(page.evaluate('window.received'), 10000, 'MESSAGE in the browser');
  assert.equal(body, 'hello, browser');
  await page.evaluate('window.stompClient.deactivate()');
});
