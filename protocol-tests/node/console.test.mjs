// The web console in a real browser: Debian's chromium driven by puppeteer-core, against
// a broker with its management listener on a port of its own. Messages come from a
// STOMP client; what the console shows and does is checked against the JSON API.
// Screenshots are kept in protocol-tests/node/artifacts/ (not committed).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchBrowser, closeBrowser } from './browser.mjs';
import { Broker, Inbox, connectClient, withReceipt, timeout, unique, repoRoot, USER, PASSWORD } from './harness.mjs';

const ARTIFACTS = join(repoRoot, 'protocol-tests', 'node', 'artifacts');

let broker;
let browser;
let stomp;
let origin;

async function api(method, path, body) {
  const response = await fetch(`${origin}${path}`, {
    method,
    headers: {
      Authorization: `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function waitReady() {
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const response = await fetch(`${origin}/health/ready`).catch(() => null);
    if (response?.ok) return;
    await new Promise(r => setTimeout(r, 100));
  }
  throw new Error(`the broker is not ready:\n${broker.logTail()}`);
}

async function send(queue, bodies, headers = {}) {
  for (const body of bodies) {
    await timeout(withReceipt(stomp, id => stomp.publish({
      destination: `/queue/${queue}`, body, headers: { receipt: id, ...headers },
    })), 5000, 'SEND receipt');
  }
}

/** A page logged in to the console, watching for script errors and foreign requests. */
async function consolePage() {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  const problems = [];
  page.on('pageerror', e => problems.push(`script error: ${e.message}`));
  page.on('console', m => {
    // The policy refusing something means the console relies on what it may not load.
    if (/Refused to|Content Security Policy/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  page.on('request', r => {
    if (!r.url().startsWith(`${origin}/`) && !r.url().startsWith('data:')) problems.push(`foreign request: ${r.url()}`);
  });
  await page.goto(`${origin}/console/`);
  await page.waitForSelector('#login[open]', { timeout: 10000 });
  await page.type('#login input[name=user]', USER);
  await page.type('#login input[name=password]', PASSWORD);
  await page.click('#login-submit');
  await page.waitForFunction(() => !document.getElementById('login').open, { timeout: 10000 });
  await page.waitForFunction(u => document.getElementById('who').textContent.includes(u), {}, USER);
  return { page, problems };
}

async function screenshot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`# screenshot: ${path}`);
}

before(async () => {
  broker = await new Broker({ http: true }).start();
  origin = `http://127.0.0.1:${broker.httpPort}`;
  await waitReady();
  ({ client: stomp } = await connectClient(broker.port));
  browser = await launchBrowser();
});

after(async () => {
  try {
    await closeBrowser(browser);
    await stomp?.deactivate();
  } finally {
    await broker?.stop();
  }
});

test('a wrong password is refused by the login form, which stays open', async () => {
  const page = await browser.newPage();
  await page.goto(`${origin}/console/`);
  await page.waitForSelector('#login[open]');
  await page.type('#login input[name=user]', USER);
  await page.type('#login input[name=password]', 'wrong');
  await page.click('#login-submit');
  await page.waitForFunction(() => document.getElementById('login-error').textContent.length > 0,
    { timeout: 10000 });
  assert.ok(await page.$eval('#login', d => d.open), 'the login stays open');
  await page.close();
});

test('the console shows a queue filled over STOMP and purges it by a click', async () => {
  const queue = unique('console');
  await send(queue, ['one', 'two', 'three', 'four', 'five']);
  const { page, problems } = await consolePage();

  await page.click('a[data-nav=queues]');
  const depth = `tr[data-queue="${queue}"] td.ready`;
  await page.waitForFunction(s => document.querySelector(s)?.textContent === '5', { timeout: 10000 }, depth);

  await page.locator(`tr[data-queue="${queue}"] a`).click();
  await page.waitForFunction(q => document.querySelector('h1')?.textContent.includes(q)
    && document.querySelector('#counts .value')?.textContent === '5', { timeout: 10000 }, queue);
  await screenshot(page, 'console-queue.png');

  await page.click('#purge');
  await page.waitForSelector('#ask[open]');
  await page.click('#ask-ok');
  await page.waitForFunction(() => /Purged 5 message/.test(document.getElementById('toast').textContent),
    { timeout: 10000 });

  const { status, body } = await api('GET', `/api/queues/${queue}`);
  assert.equal(status, 200);
  assert.equal(body.messages.ready, 0, 'the API sees the queue empty');
  await page.waitForFunction(() => document.querySelector('#counts .value')?.textContent === '0',
    { timeout: 10000 });

  await page.click('a[data-nav=overview]');
  await page.waitForSelector('#broker table', { timeout: 10000 });
  // Two samples make the first chart.
  await page.waitForSelector('#rates-chart svg polyline', { timeout: 10000 });
  await screenshot(page, 'console.png');
  assert.deepEqual(problems, []);
  await page.close();
});

test('the queue page browses messages and moves the selected ones to another queue', async () => {
  const queue = unique('dlq');
  const back = unique('retry');
  await send(queue, ['a', 'b', 'c']);
  await send(back, ['already there']);
  const { page, problems } = await consolePage();
  await page.goto(`${origin}/console/#/queues/${queue}`);
  await page.waitForFunction(() => document.querySelectorAll('#messages tr[data-id]').length === 3,
    { timeout: 10000 });
  const bodies = await page.$$eval('#messages tr[data-id] .preview', cells => cells.map(c => c.textContent));
  assert.deepEqual(bodies, ['a', 'b', 'c']);
  // Move the first two back.
  const picks = await page.$$('#messages .pick');
  await picks[0].click();
  await picks[1].click();
  await page.type('#target', back);
  await page.click('#move-selected');
  await page.waitForFunction(() => /Moved 2 to/.test(document.getElementById('toast').textContent),
    { timeout: 10000 });
  await page.waitForFunction(() => document.querySelectorAll('#messages tr[data-id]').length === 1,
    { timeout: 10000 });
  assert.equal((await api('GET', `/api/queues/${queue}`)).body.messages.ready, 1);
  assert.equal((await api('GET', `/api/queues/${back}`)).body.messages.ready, 3);
  assert.deepEqual(problems, []);
  await page.close();
});

test('the schedule shows a delayed message on the timeline; the console edits, reschedules and cancels it', async () => {
  const queue = unique('later');
  await send(queue, ['in ten minutes'], { AMQ_SCHEDULED_DELAY: '600000' });
  const { page, problems } = await consolePage();

  await page.goto(`${origin}/console/#/schedule?queue=${queue}`);
  const row = '#list tr[data-id]';
  await page.waitForFunction(b => document.querySelector('#list')?.textContent.includes(b),
    { timeout: 10000 }, 'in ten minutes');
  // One bar of the hour holds it.
  const bars = await page.$$eval('#chart rect.b', rects => rects.map(r => Number(r.getAttribute('height'))));
  assert.equal(bars.length, 60);
  assert.equal(bars.filter(h => h > 0).length, 1, `one bucket holds the message: ${bars}`);
  await screenshot(page, 'console-schedule.png');

  // Edit the body in the message's dialog.
  await page.locator(`${row} [data-edit]`).click();
  await page.waitForSelector('#ask[open] textarea[name=body]');
  await page.$eval('#ask textarea[name=body]', t => { t.value = ''; });
  await page.type('#ask textarea[name=body]', 'edited in the console');
  await page.click('#ask-ok');
  await page.waitForFunction(() => document.querySelector('#list')?.textContent.includes('edited in the console'),
    { timeout: 10000 });
  const edited = await page.$eval(row, r => r.dataset.id);
  const { body: viewed } = await api('GET', `/api/schedule/${encodeURIComponent(edited)}`);
  assert.equal(viewed.body_text, 'edited in the console');

  // Reschedule it to five minutes from now: it gets a new id and due time.
  const asked = Date.now();
  await page.locator(`${row} [data-reschedule]`).click();
  await page.waitForSelector('#ask[open] input[name=delay]');
  await page.type('#ask input[name=delay]', '300');
  await page.click('#ask-ok');
  await page.waitForFunction(old => {
    const r = document.querySelector('#list tr[data-id]');
    return r && r.dataset.id !== old;
  }, { timeout: 10000 }, edited);
  const { body: listed } = await api('GET', `/api/schedule?queue=${queue}`);
  assert.equal(listed.items.length, 1);
  const due = listed.items[0].due_ms;
  assert.ok(due >= asked + 300000 && due <= Date.now() + 300000, `due ${due - asked} ms after asking`);

  const id = await page.$eval(`${row} [data-cancel]`, b => b.dataset.cancel);
  assert.equal(id, listed.items[0].id);
  await page.locator(`[data-cancel="${id}"]`).click();
  await page.waitForSelector('#ask[open]');
  await page.click('#ask-ok');
  await page.waitForFunction(() => /No delayed messages/.test(document.getElementById('list').textContent),
    { timeout: 10000 });
  const { body } = await api('GET', `/api/schedule?queue=${queue}`);
  assert.deepEqual(body.items, [], 'the API no longer lists it');
  assert.deepEqual(problems, []);
  await page.close();
});

test('the console edits a delayed message\'s headers, shows what the broker refuses, and a consumer gets them', async () => {
  const queue = unique('headers');
  await send(queue, ['with headers'], {
    AMQ_SCHEDULED_DELAY: '600000', priority: '2', 'correlation-id': 'c-1', 'content-type': 'text/plain',
  });
  const { page, problems } = await consolePage();
  await page.goto(`${origin}/console/#/schedule?queue=${queue}`);
  const row = '#list tr[data-id]';
  await page.waitForSelector(row, { timeout: 10000 });
  const id = await page.$eval(row, r => r.dataset.id);
  await page.locator(`${row} [data-edit]`).click();
  await page.waitForSelector('#ask[open] input[name=correlation_id]');
  const shown = name => page.$eval(`#ask [name=${name}]`, i => i.value);
  assert.equal(await shown('priority'), '2');
  assert.equal(await shown('correlation_id'), 'c-1');
  assert.equal(await shown('content_type'), 'text/plain');
  assert.equal(await shown('reply_to'), '');

  const retype = async (name, value) => {
    await page.$eval(`#ask input[name=${name}]`, i => { i.value = ''; });
    if (value) await page.type(`#ask input[name=${name}]`, value);
  };
  await page.select('#ask select[name=priority]', '7');
  await retype('correlation_id', 'c-console');
  await retype('reply_to', '/queue/replies');
  await retype('content_type', '');
  await retype('group_id', 'g-console');
  await retype('ttl', '3600');
  // Beyond 32 bits: the broker answers 400 naming group_seq, and the dialog comes back.
  await retype('group_seq', '4294967296');
  await page.click('#ask-ok');
  await page.waitForSelector('#ask[open] #edit-error', { timeout: 10000 });
  assert.match(await page.$eval('#edit-error', e => e.textContent), /group_seq/);
  await screenshot(page, 'console-schedule-edit.png');
  assert.ok(await page.$eval('#ask input[name=group_seq]', i => i.classList.contains('invalid')));
  assert.equal(await shown('correlation_id'), 'c-console', 'what was typed is kept');
  const { body: untouched } = await api('GET', `/api/schedule/${encodeURIComponent(id)}`);
  assert.equal(untouched.headers.correlation_id, 'c-1', 'nothing is saved from a refused edit');

  await retype('group_seq', '3');
  const asked = Date.now();
  await page.click('#ask-ok');
  await page.waitForFunction(() => /Saved/.test(document.getElementById('toast').textContent),
    { timeout: 10000 });
  const { body: viewed } = await api('GET', `/api/schedule/${encodeURIComponent(id)}`);
  assert.equal(viewed.headers.priority, 7);
  assert.equal(viewed.headers.correlation_id, 'c-console');
  assert.equal(viewed.headers.reply_to, '/queue/replies');
  assert.equal(viewed.headers.content_type, null);
  assert.equal(viewed.headers.group_seq, 3);
  assert.equal(viewed.group_id, 'g-console');
  const expires = viewed.headers.expires_ms;
  assert.ok(expires >= asked + 3600000 && expires <= Date.now() + 3600000, `expires ${expires - asked} ms after asking`);
  assert.equal(viewed.body_text, 'with headers', 'the body is kept');
  assert.deepEqual(problems, []);
  await page.close();

  // Due now: a STOMP consumer gets the message as edited.
  const due = await api('POST', `/api/schedule/${encodeURIComponent(id)}/reschedule`, { delay_ms: 0 });
  assert.equal(due.status, 200, JSON.stringify(due.body));
  const inbox = new Inbox();
  const subscription = stomp.subscribe(`/queue/${queue}`, inbox.push);
  const message = await inbox.next(10000);
  subscription.unsubscribe();
  assert.equal(message.body, 'with headers');
  assert.equal(message.headers.priority, '7');
  assert.equal(message.headers['correlation-id'], 'c-console');
  assert.equal(message.headers['reply-to'], '/queue/replies');
  assert.equal(message.headers['content-type'], undefined);
  assert.equal(message.headers.JMSXGroupID, 'g-console');
  assert.equal(message.headers.JMSXGroupSeq, '3');
  assert.equal(Number(message.headers.expires), expires);
});

test('the console clears a delayed message\'s expiry and reply-to, and shows the headers as saved', async () => {
  const queue = unique('clear');
  const expires = Date.now() + 3600000;
  await send(queue, ['expiring'], { AMQ_SCHEDULED_DELAY: '600000', expires: String(expires), 'reply-to': '/queue/back' });
  const { page, problems } = await consolePage();
  await page.goto(`${origin}/console/#/schedule?queue=${queue}`);
  const row = '#list tr[data-id]';
  await page.waitForSelector(row, { timeout: 10000 });
  const id = await page.$eval(row, r => r.dataset.id);
  const open = async () => {
    await page.locator(`${row} [data-edit]`).click();
    await page.waitForSelector('#ask[open] input[name=reply_to]');
  };
  const expiryLabel = () => page.$eval('#ask input[name=ttl]', i => i.closest('label').textContent);
  await open();
  assert.equal(await page.$eval('#ask input[name=reply_to]', i => i.value), '/queue/back');
  assert.doesNotMatch(await expiryLabel(), /now never/, 'the current expiry is shown');

  // A time to live and "never" at once: the console names the field without asking the broker.
  await page.type('#ask input[name=ttl]', '60');
  await page.click('#ask input[name=no_expiry]');
  await page.click('#ask-ok');
  await page.waitForSelector('#ask[open] #edit-error', { timeout: 10000 });
  assert.match(await page.$eval('#edit-error', e => e.textContent), /ttl_ms: .*not both/);
  assert.ok(await page.$eval('#ask input[name=ttl]', i => i.classList.contains('invalid')));
  assert.equal((await api('GET', `/api/schedule/${encodeURIComponent(id)}`)).body.headers.expires_ms, expires);

  // "Never" alone, and reply-to emptied: both cleared.
  await page.$eval('#ask input[name=ttl]', i => { i.value = ''; });
  await page.$eval('#ask input[name=reply_to]', i => { i.value = ''; });
  await page.click('#ask-ok');
  await page.waitForFunction(() => /Saved/.test(document.getElementById('toast').textContent),
    { timeout: 10000 });
  const { body: viewed } = await api('GET', `/api/schedule/${encodeURIComponent(id)}`);
  assert.equal(viewed.headers.expires_ms, null);
  assert.equal(viewed.headers.reply_to, null);

  // Opened again, the dialog shows what was saved.
  await open();
  assert.match(await expiryLabel(), /now never/);
  assert.equal(await page.$eval('#ask input[name=reply_to]', i => i.value), '');
  await page.click('#ask-cancel');
  assert.deepEqual(problems, []);
  await page.close();

  const due = await api('POST', `/api/schedule/${encodeURIComponent(id)}/reschedule`, { delay_ms: 0 });
  assert.equal(due.status, 200, JSON.stringify(due.body));
  const inbox = new Inbox();
  const subscription = stomp.subscribe(`/queue/${queue}`, inbox.push);
  const message = await inbox.next(10000);
  subscription.unsubscribe();
  assert.equal(message.body, 'expiring');
  assert.equal(message.headers.expires, undefined);
  assert.equal(message.headers['reply-to'], undefined);
});

test('the connections page lists the STOMP client and closes it by a click', async () => {
  const { client } = await connectClient(broker.port);
  const closed = new Promise(resolve => { client.onWebSocketClose = resolve; });
  const { body: listed } = await api('GET', '/api/connections');
  const { page, problems } = await consolePage();
  await page.click('a[data-nav=connections]');
  await page.waitForSelector('tr[data-connection]', { timeout: 10000 });
  const shown = await page.$$eval('tr[data-connection]', rows => rows.map(r => Number(r.dataset.connection)));
  assert.deepEqual(shown.sort(), listed.map(c => c.id).sort());
  const newest = Math.max(...shown);
  await page.locator(`[data-close="${newest}"]`).click();
  await page.waitForSelector('#ask[open]');
  await page.click('#ask-ok');
  await timeout(closed, 10000, 'the closed client sees its socket close');
  await client.deactivate();
  assert.deepEqual(problems, []);
  await page.close();
});

test('beyond a page of the API, the console still counts and finds every queue', async () => {
  // More queues than one /api/queues page (1,000), the last of them holding messages.
  const names = Array.from({ length: 1005 }, (_, i) => `zz-many-${String(i).padStart(4, '0')}`);
  for (let i = 0; i < names.length; i += 50) {
    const made = await Promise.all(names.slice(i, i + 50).map(n => api('PUT', `/api/queues/${n}`)));
    assert.ok(made.every(r => r.status === 201 || r.status === 200), 'queues created');
  }
  const last = names[names.length - 1];
  await send(last, ['one', 'two']);
  const { body: listed } = await api('GET', '/api/queues?limit=1');
  const { page, problems } = await consolePage();
  // The overview's totals are over all of them.
  await page.waitForFunction(n => [...document.querySelectorAll('#totals .card')].some(c =>
    c.querySelector('.label').textContent === 'Queues'
      && Number(c.querySelector('.value').textContent.replace(/\D/g, '')) === n),
  { timeout: 10000 }, listed.total);
  // The queues table finds the last one by name, with its depth.
  await page.click('a[data-nav=queues]');
  // The click changes the route; the queues page mounts a moment later.
  await page.waitForSelector('#filter', { timeout: 10000 });
  await page.type('#filter', last);
  const row = `tr[data-queue="${last}"]`;
  await page.waitForSelector(row, { timeout: 10000 });
  await page.waitForFunction(sel => document.querySelector(`${sel} .ready`)?.textContent === '2',
    { timeout: 10000 }, row);
  assert.deepEqual(problems, []);
  await page.close();
});
