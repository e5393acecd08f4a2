// @stomp/stompjs over raw TCP against weir, plus a stomp.py -> stompjs cross-check.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Broker, connectClient, Inbox, withReceipt, timeout, unique, repoRoot } from './harness.mjs';

const run = promisify(execFile);
let broker;
const open = [];

async function client(opts) {
  const c = await connectClient(broker.port, opts);
  open.push(c.client);
  return c;
}

before(async () => { broker = await new Broker().start(); });
after(async () => {
  await Promise.allSettled(open.map(c => c.deactivate()));
  await broker?.stop();
});

test('connect negotiates STOMP 1.2 and reports server and session', async () => {
  const { frame } = await client();
  assert.equal(frame.headers.version, '1.2');
  assert.match(frame.headers.server ?? '', /^weir/i);
  assert.ok(frame.headers.session, 'session header');
});

test('wrong passcode is refused with an ERROR frame', async () => {
  await assert.rejects(
    timeout(connectClient(broker.port, { passcode: 'wrong' }).then(c => { open.push(c.client); }),
      5000, 'CONNECT with wrong passcode'),
    /ERROR|closed/,
  );
});

test('send and receive on a queue with receipts', async () => {
  const { client: c } = await client();
  const dest = `/queue/${unique('node')}`;
  const inbox = new Inbox();
  await withReceipt(c, id => c.subscribe(dest, inbox.push, { receipt: id }));
  const bodies = ['one', 'two', 'three'];
  for (const body of bodies) {
    await timeout(withReceipt(c, id => c.publish({ destination: dest, body, headers: { receipt: id, 'x-n': body } })),
      5000, 'SEND receipt');
  }
  for (const body of bodies) {
    const m = await inbox.next();
    assert.equal(m.body, body);
    assert.equal(m.headers['x-n'], body);
    assert.equal(m.headers.destination, dest);
  }
});

test('binary body survives the trip', async () => {
  const { client: c } = await client();
  const dest = `/queue/${unique('bin')}`;
  const inbox = new Inbox();
  await withReceipt(c, id => c.subscribe(dest, inbox.push, { receipt: id }));
  const payload = new Uint8Array([0, 1, 2, 0, 255, 0]);
  await withReceipt(c, id => c.publish({ destination: dest, binaryBody: payload, headers: { receipt: id } }));
  const m = await inbox.next();
  assert.deepEqual(Array.from(m.binaryBody), Array.from(payload));
});

test('client ack: unacked messages come back to the next subscriber', async () => {
  const dest = `/queue/${unique('ack')}`;
  const { client: producer } = await client();
  for (const body of ['a', 'b', 'c']) {
    await withReceipt(producer, id => producer.publish({ destination: dest, body, headers: { receipt: id } }));
  }
  const { client: first } = await client();
  const inbox = new Inbox();
  await withReceipt(first, id => first.subscribe(dest, inbox.push, { ack: 'client', receipt: id }));
  const got = [await inbox.next(), await inbox.next(), await inbox.next()];
  assert.deepEqual(got.map(m => m.body), ['a', 'b', 'c']);
  // Cumulative: acking "b" acks "a" too; "c" stays owed.
  await withReceipt(first, id => got[1].ack({ receipt: id }));
  await first.deactivate();

  const { client: second } = await client();
  const inbox2 = new Inbox();
  await withReceipt(second, id => second.subscribe(dest, inbox2.push, { ack: 'client', receipt: id }));
  const again = await inbox2.next();
  assert.equal(again.body, 'c');
  assert.equal(again.headers.redelivered, 'true');
  assert.deepEqual((await inbox2.quiet(800)).map(m => m.body), []);
  await withReceipt(second, id => again.ack({ receipt: id }));
});

test('topic fan-out to two stompjs subscribers', async () => {
  const dest = `/topic/${unique('fan')}`;
  const subs = [await client(), await client()];
  const inboxes = subs.map(() => new Inbox());
  for (const [i, { client: c }] of subs.entries()) {
    await withReceipt(c, id => c.subscribe(dest, inboxes[i].push, { receipt: id }));
  }
  const { client: p } = await client();
  await withReceipt(p, id => p.publish({ destination: dest, body: 'to all', headers: { receipt: id } }));
  for (const inbox of inboxes) assert.equal((await inbox.next()).body, 'to all');
});

test('cross-client: stomp.py sends, stompjs receives', async () => {
  const python = process.env.WEIR_PTEST_PYTHON ?? join(repoRoot, 'protocol-tests', '.venv', 'bin', 'python');
  const dest = `/queue/${unique('cross')}`;
  const { client: c } = await client();
  const inbox = new Inbox();
  await withReceipt(c, id => c.subscribe(dest, inbox.push, { ack: 'client-individual', receipt: id }));
  const tricky = 'colon:newline\nbackslash\\';
  await run(python, [
    join(repoRoot, 'protocol-tests', 'python', 'send_stomppy.py'),
    String(broker.port), dest, 'from python 1', 'from python 2',
    '--header', `x-tricky=${tricky}`, '--header', 'content-type=text/plain',
  ], { timeout: 30000 });
  for (const body of ['from python 1', 'from python 2']) {
    const m = await inbox.next();
    assert.equal(m.body, body);
    assert.equal(m.headers['x-tricky'], tricky);
    assert.equal(m.headers['content-type'], 'text/plain');
    await withReceipt(c, id => m.ack({ receipt: id }));
  }
});
