// STOMP over WebSocket from a real browser: Debian's headless chromium, driven over the
// DevTools protocol, loads @stomp/stompjs's browser bundle into a page of the broker's own
// origin and talks to /stomp with the browser's WebSocket, meeting a plain STOMP client.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { Broker, Inbox, USER, PASSWORD, connectClient, repoRoot, timeout, unique, withReceipt } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const STOMPJS_BUNDLE = join(repoRoot, 'protocol-tests', 'node_modules', '@stomp', 'stompjs', 'bundles', 'stomp.umd.min.js');

let broker;
let browser; // { proc, dir, page }
const openClients = [];

// A DevTools protocol session with one page target.
class Page {
  constructor(socket) {
    this.socket = socket;
    this.nextId = 1;
    this.pending = new Map();
    socket.on('message', data => {
      const reply = JSON.parse(data.toString());
      const done = this.pending.get(reply.id);
      if (!done) return;
      this.pending.delete(reply.id);
      if (reply.error) done.rej(new Error(reply.error.message));
      else done.res(reply.result);
    });
  }

  send(method, params = {}) {
    const id = this.nextId++;
    return new Promise((res, rej) => {
      this.pending.set(id, { res, rej });
      this.socket.send(JSON.stringify({ id, method, params }));
    });
  }

  // The value of `expression` in the page, awaited when it is a promise.
  async evaluate(expression) {
    const { result, exceptionDetails } = await this.send('Runtime.evaluate', {
      expression, awaitPromise: true, returnByValue: true,
    });
    if (exceptionDetails) {
      throw new Error(`in the page: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
    }
    return result.value;
  }
}

async function launchChromium() {
  const dir = mkdtempSync(join(tmpdir(), 'weir-chromium-'));
  const proc = spawn(CHROMIUM, [
    '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--remote-debugging-port=0', `--user-data-dir=${dir}`, 'about:blank',
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  const endpoint = await timeout(new Promise((res, rej) => {
    let seen = '';
    proc.stderr.on('data', chunk => {
      seen += chunk;
      const found = seen.match(/DevTools listening on (ws:\/\/\S+)/);
      if (found) res(found[1]);
    });
    proc.once('exit', code => rej(new Error(`chromium exited (${code}): ${seen}`)));
  }), 30000, 'chromium start');
  const { host } = new URL(endpoint);
  const targets = await (await fetch(`http://${host}/json/list`)).json();
  const target = targets.find(t => t.type === 'page');
  const socket = new WebSocket(target.webSocketDebuggerUrl, { perMessageDeflate: false });
  await new Promise((res, rej) => { socket.once('open', res); socket.once('error', rej); });
  return { proc, dir, page: new Page(socket) };
}

before(async () => {
  broker = new Broker({ http: true });
  await broker.start();
  browser = await launchChromium();
  // A page of the broker's origin, as the web console is.
  const { page } = browser;
  await page.send('Page.enable');
  await page.send('Page.navigate', { url: `http://127.0.0.1:${broker.httpPort}/health/live` });
  await timeout((async () => {
    while (await page.evaluate('document.readyState') !== 'complete') await new Promise(r => setTimeout(r, 50));
  })(), 10000, 'page load');
  await page.evaluate(readFileSync(STOMPJS_BUNDLE, 'utf8'));
});

after(async () => {
  await Promise.allSettled(openClients.map(c => c.close()));
  if (browser) {
    browser.page.socket.close();
    const gone = new Promise(r => browser.proc.once('exit', r));
    browser.proc.kill('SIGTERM');
    await gone;
    rmSync(browser.dir, { recursive: true, force: true });
  }
  await broker?.stop();
});

test('stompjs in chromium speaks STOMP over /stomp with a plain STOMP client', async () => {
  const { page } = browser;
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
