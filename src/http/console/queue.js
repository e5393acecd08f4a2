// One queue: its counts and settings, its messages (browse, delete, move or copy, e.g.
// dead letters back to where they failed), its groups and their owners, its consumers,
// and purge, pause and resume.

import { get, post, del, seg, query, notServed } from './api.js';
import { html, render, num, rate, bytes, time, duration, ask, act } from './ui.js';
import { subscribe, sampleNow } from './sampler.js';

const PAGE = 50;

function card(label, value) {
  return html`<div class="card"><div class="label">${label}</div><div class="value">${value}</div></div>`;
}

function settingValue(key, value) {
  if (value === null || value === undefined) return html`<span class="muted">none</span>`;
  if (key.endsWith('_ms')) return value === 0 ? '0' : duration(value / 1000);
  if (key.endsWith('_bytes')) return bytes(value);
  return String(value);
}

function propertyText(p) {
  const v = p.value;
  return `${p.name}=${v && typeof v === 'object' && 'value' in v ? JSON.stringify(v.value) : JSON.stringify(v)}`;
}

/** The client connection behind a consumer, linked to the connections page. */
function connection(c) {
  if (!c) return html`<span class="muted">–</span>`;
  return html`<a href="#/connections" title="connection ${c.id}">${c.protocol} ${c.version}</a>
    <span class="mono muted">${c.peer}</span>${c.tls ? html` <span class="badge ok">TLS</span>` : ''}`;
}

function groupsTable(answer) {
  const groups = answer.groups ?? [];
  if (!groups.length) return html`<p class="muted">No group is owned by a consumer now.</p>`;
  return html`<table><thead><tr><th>Group</th><th>Owner</th><th>Connection</th><th class="num">Unacked</th>
      <th class="num">Ready</th><th>Owned since</th><th></th></tr></thead>
    <tbody>${groups.map(g => html`<tr data-group="${g.group}">
      <td class="mono">${g.group}</td>
      <td>${g.consumer === null || g.consumer === undefined ? html`<span class="muted">none</span>` : html`consumer ${g.consumer}`}</td>
      <td>${connection(g.connection)}</td>
      <td class="num">${num(g.unacked)}</td>
      <td class="num">${num(g.ready)}</td>
      <td>${time(g.owned_since_ms)}</td>
      <td><button class="small" data-reset="${g.group}">Reset</button></td>
    </tr>`)}</tbody></table>
    ${answer.buckets ? html`<p class="muted">This queue hashes groups into buckets: each row is a bucket.</p>` : ''}`;
}

function consumersTable(consumers) {
  if (!consumers.length) return html`<p class="muted">No consumer.</p>`;
  return html`<table><thead><tr><th>Id</th><th>Connection</th><th>User</th><th>Client id</th><th class="num">Credit</th>
      <th class="num">In flight</th><th>Selector</th><th class="num">Groups</th></tr></thead>
    <tbody>${consumers.map(c => html`<tr>
      <td class="mono">${c.id}${c.browser ? html` <span class="badge">browser</span>` : ''}</td>
      <td>${connection(c.connection)}</td>
      <td>${c.user ?? html`<span class="muted">anonymous</span>`}</td>
      <td class="mono">${c.client_id ?? ''}</td>
      <td class="num">${num(c.credit)}${c.window ? html` <span class="muted">of ${num(c.window)}</span>` : ''}</td>
      <td class="num">${num(c.in_flight)} <span class="muted">(${bytes(c.in_flight_bytes)})</span></td>
      <td class="mono">${c.selector ?? ''}</td>
      <td class="num">${num(c.groups)}</td>
    </tr>`)}</tbody></table>`;
}

export function mount(page, params, name) {
  const base = `/api/queues/${seg(name)}`;
  render(page, html`
    <p><a href="#/queues">← Queues</a></p>
    <h1><span>${name}</span><span id="state"></span><span class="spacer"></span>
      <button id="pause">Pause</button>
      <button id="send">Send a message</button>
      <button id="purge" class="danger">Purge</button>
      <button id="delete" class="danger">Delete</button></h1>
    <p class="error" id="missing"></p>
    <div class="cards" id="counts"></div>
    <div class="grid">
      <div class="panel"><h2>Since the broker started</h2><table class="kv" id="totals"></table></div>
      <div class="panel"><h2>Settings</h2><table class="kv" id="settings"></table></div>
    </div>
    <div class="panel">
      <h2>Messages</h2>
      <div class="toolbar">
        <button id="reload">Refresh</button>
        <span class="spacer"></span>
        <label>To queue <input id="target" list="queue-names" autocomplete="off"></label>
        <datalist id="queue-names"></datalist>
        <button id="move-selected">Move selected</button>
        <button id="copy-selected">Copy selected</button>
        <button id="delete-selected" class="danger">Delete selected</button>
      </div>
      <div class="toolbar">
        <label>Selector <input id="selector" placeholder="e.g. priority > 4" autocomplete="off"></label>
        <button id="move-matching">Move matching to queue</button>
      </div>
      <div id="messages"><p class="muted">Loading…</p></div>
      <p><button id="more" hidden>More</button></p>
    </div>
    <div class="grid">
      <div class="panel"><h2>Groups and their owners</h2>
        <div class="toolbar"><button id="reset-groups">Reset all groups</button></div>
        <div id="groups"><p class="muted">Loading…</p></div></div>
      <div class="panel"><h2>Consumers</h2><div id="consumers"><p class="muted">Loading…</p></div></div>
    </div>
    <p><a href="#/schedule?queue=${seg(name)}">Delayed messages of this queue →</a></p>`);

  const $ = selector => page.querySelector(selector);
  let info = null;
  let rates = null;
  let gone = false;
  let messages = [];
  let next = null;

  const drawInfo = () => {
    if (!info) return;
    const m = info.messages;
    render($('#state'), info.paused ? html`<span class="badge warn">paused</span>` : html`<span class="badge ok">dispatching</span>`);
    $('#pause').textContent = info.paused ? 'Resume' : 'Pause';
    render($('#counts'), [
      card('Ready', num(m.ready)),
      card('In memory', num(m.in_memory)),
      card('Paged', num(m.paged)),
      card('In flight', num(m.in_flight)),
      card('Awaiting redelivery', num(m.awaiting_redelivery)),
      card('Consumers', num(info.consumers)),
      card('Producers', num(info.producers)),
      card('Groups', num(info.groups)),
      card('Memory', bytes(info.memory_bytes)),
      card('In', rate(rates?.in)),
      card('Out (acked)', rate(rates?.out)),
    ]);
    render($('#totals'), Object.entries(info.totals).map(([k, v]) => html`<tr><th>${k.replace(/_/g, ' ')}</th><td>${num(v)}</td></tr>`));
    render($('#settings'), Object.entries(info.settings).map(([k, v]) => html`<tr><th>${k.replace(/_/g, ' ')}</th><td>${settingValue(k, v)}</td></tr>`));
  };

  const refresh = async () => {
    if (gone) return;
    try {
      info = await get(base);
      render($('#missing'), '');
      drawInfo();
    } catch (e) {
      if (e.status === 404) gone = true;
      render($('#missing'), e.message);
    }
  };

  const drawMessages = () => {
    $('#more').hidden = !next;
    if (!messages.length) {
      render($('#messages'), html`<p class="muted">No messages waiting or in flight.</p>`);
      return;
    }
    render($('#messages'), html`<table>
      <thead><tr><th><input type="checkbox" id="all" title="Select all shown"></th><th>Id</th><th>State</th><th>Enqueued</th>
        <th class="num">Deliveries</th><th>Group</th><th>Properties</th><th class="num">Size</th><th>Body</th><th></th></tr></thead>
      <tbody>${messages.map(msg => html`<tr data-id="${msg.id}">
        <td><input type="checkbox" class="pick" value="${msg.id}"></td>
        <td class="mono">${msg.id}</td>
        <td>${msg.state.replace('_', ' ')}${msg.consumer !== undefined ? html` <span class="muted">(consumer ${msg.consumer})</span>` : ''}</td>
        <td>${time(msg.enqueued_ms)}</td>
        <td class="num">${msg.delivery_count}</td>
        <td>${msg.group_id ?? ''}</td>
        <td class="mono">${(msg.properties ?? []).map(propertyText).join(', ')}</td>
        <td class="num">${bytes(msg.size)}</td>
        <td class="mono preview" title="${msg.body}">${msg.body_encoding === 'base64' ? '(binary) ' : ''}${msg.body}${msg.body_truncated ? '…' : ''}</td>
        <td><button class="small danger" data-delete="${msg.id}">Delete</button></td>
      </tr>`)}</tbody></table>`);
  };

  const loadMessages = async (more = false) => {
    try {
      const page_ = await get(`${base}/messages${query({ limit: PAGE, cursor: more ? next : null })}`);
      messages = more ? messages.concat(page_.items) : page_.items;
      next = page_.next ?? null;
      drawMessages();
    } catch (e) {
      render($('#messages'), notServed(e)
        ? html`<p class="muted">This broker does not serve message browsing.</p>`
        : html`<p class="error">${e.message}</p>`);
    }
  };

  const loadList = async (path, target, draw) => {
    try {
      render($(target), draw(await get(path)));
    } catch (e) {
      render($(target), notServed(e)
        ? html`<p class="muted">This broker does not serve this list.</p>`
        : html`<p class="error">${e.message}</p>`);
    }
  };
  const loadGroups = () => loadList(`${base}/groups`, '#groups', groupsTable);
  const loadConsumers = () => loadList(`${base}/consumers`, '#consumers', consumersTable);

  const selected = () => [...page.querySelectorAll('.pick:checked')].map(b => Number(b.value));
  const target = () => $('#target').value.trim();

  const transfer = async (how, body) => {
    const result = await act(() => post(`${base}/messages/${how}`, body), r => {
      const count = r?.moved ?? r?.copied ?? 0;
      const skipped = r?.skipped?.length ? `; ${r.skipped.length} skipped (${[...new Set(r.skipped.map(s => s.reason))].join(', ')})` : '';
      return `${how === 'move' ? 'Moved' : 'Copied'} ${count} to ${body.to}${skipped}.`;
    });
    if (result) { loadMessages(); refresh(); sampleNow(); }
  };

  page.addEventListener('click', async event => {
    const button = event.target.closest('button, input#all');
    if (!button) return;
    if (button.id === 'all') {
      for (const box of page.querySelectorAll('.pick')) box.checked = button.checked;
    } else if (button.id === 'pause') {
      info = await act(() => post(`${base}/${info?.paused ? 'resume' : 'pause'}`), r => (r.paused ? 'Paused.' : 'Dispatching again.')) ?? info;
      drawInfo();
    } else if (button.id === 'purge') {
      const ok = await ask({
        title: `Purge ${name}?`,
        body: html`<p>Every waiting message of <b>${name}</b> is deleted (ready, paged, waiting to be redelivered). Deliveries in flight stay with their consumers.</p>`,
        ok: 'Purge', danger: true,
      });
      if (!ok) return;
      await act(() => post(`${base}/purge`), r => `Purged ${r.removed} message(s).`);
      refresh(); loadMessages(); sampleNow();
    } else if (button.id === 'delete') {
      const ok = await ask({ title: `Delete ${name}?`, body: html`<p>The queue and every message in it are deleted.</p>`, ok: 'Delete', danger: true });
      if (!ok) return;
      const done = await act(() => del(base), `Deleted ${name}.`);
      if (done !== undefined) { sampleNow(); location.hash = '#/queues'; }
    } else if (button.id === 'send') {
      const form = await ask({
        title: `Send a message to ${name}`,
        body: html`<label>Body <textarea name="body"></textarea></label>
          <label>Properties (JSON object) <input name="properties" placeholder='{"region": "eu"}' autocomplete="off"></label>
          <label>Group <input name="group" autocomplete="off"></label>
          <label>Delay (seconds) <input name="delay" type="number" min="0" step="any"></label>`,
        ok: 'Send',
      });
      if (!form) return;
      const body = { body: form.get('body') };
      try {
        if (form.get('properties').trim()) body.properties = JSON.parse(form.get('properties'));
      } catch (e) {
        await act(() => { throw new Error(`properties: ${e.message}`); });
        return;
      }
      if (form.get('group').trim()) body.group = form.get('group').trim();
      if (Number(form.get('delay')) > 0) body.delay_ms = Math.round(Number(form.get('delay')) * 1000);
      await act(() => post(`${base}/messages`, body), r => (r.delayed ? 'Sent; it waits in the schedule.' : 'Sent.'));
      refresh(); loadMessages(); sampleNow();
    } else if (button.id === 'reload') {
      loadMessages(); loadGroups(); loadConsumers();
    } else if (button.id === 'more') {
      loadMessages(true);
    } else if (button.id === 'move-selected' || button.id === 'copy-selected') {
      const ids = selected();
      if (!ids.length || !target()) { act(() => { throw new Error('Select messages and name the queue to send them to.'); }); return; }
      transfer(button.id === 'move-selected' ? 'move' : 'copy', { to: target(), ids });
    } else if (button.id === 'move-matching') {
      const selector = $('#selector').value.trim();
      if (!selector || !target()) { act(() => { throw new Error('Give a selector and the queue to move to.'); }); return; }
      transfer('move', { to: target(), selector });
    } else if (button.id === 'delete-selected') {
      const ids = selected();
      if (!ids.length) return;
      const ok = await ask({ title: `Delete ${ids.length} message(s)?`, ok: 'Delete', danger: true });
      if (!ok) return;
      const results = await Promise.allSettled(ids.map(id => del(`${base}/messages/${id}`)));
      const failed = results.filter(r => r.status === 'rejected');
      act(() => { if (failed.length) throw new Error(`${failed.length} not deleted: ${failed[0].reason.message}`); },
        `Deleted ${ids.length} message(s).`);
      loadMessages(); refresh(); sampleNow();
    } else if (button.dataset.delete) {
      await act(() => del(`${base}/messages/${button.dataset.delete}`), `Deleted message ${button.dataset.delete}.`);
      loadMessages(); refresh(); sampleNow();
    } else if (button.dataset.reset !== undefined) {
      await act(() => del(`${base}/groups/${seg(button.dataset.reset)}`), `Group ${button.dataset.reset} is reset.`);
      loadGroups();
    } else if (button.id === 'reset-groups') {
      await act(() => del(`${base}/groups`), r => `${r.reset} group(s) reset.`);
      loadGroups();
    }
  });

  const unsubscribe = subscribe(sample => {
    rates = sample.rates.get(name) ?? null;
    drawInfo();
    // Targets to offer: every queue; first the ones that dead-letter into this one.
    const feeding = sample.queues.filter(q => q.settings.dead_letter_address === name || q.settings.expiry_address === name);
    const others = sample.queues.filter(q => q.name !== name && !feeding.includes(q));
    render($('#queue-names'), [...feeding, ...others].map(q => html`<option value="${q.name}">`));
    if (!$('#target').value && feeding.length) $('#target').value = feeding[0].name;
  });

  refresh();
  loadMessages();
  loadGroups();
  loadConsumers();
  const timer = setInterval(refresh, 2000);
  const owners = setInterval(() => { loadGroups(); loadConsumers(); }, 5000);
  return () => { clearInterval(timer); clearInterval(owners); unsubscribe(); };
}
