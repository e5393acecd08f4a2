// The delay schedule as a timeline: a chart of how many messages fall due when, and
// beside it the list (all of the range, or the bucket clicked), each message viewable,
// editable, reschedulable and cancellable before it is due.

import { get, post, patch, del, seg, query, notServed } from './api.js';
import { html, raw, render, num, bytes, time, relative, ask, act, toast } from './ui.js';
import { barChart } from './chart.js';

const RANGES = [
  ['1h', 3600e3, 'the next hour'],
  ['6h', 6 * 3600e3, 'the next 6 hours'],
  ['24h', 24 * 3600e3, 'the next 24 hours'],
  ['7d', 7 * 24 * 3600e3, 'the next 7 days'],
  ['30d', 30 * 24 * 3600e3, 'the next 30 days'],
];
const BUCKETS = 60;
const LIMIT = 100;

// The standard headers an edit may change (the API's names), each shown with its
// current value; emptying one clears it.
const TEXT_HEADERS = [
  ['correlation_id', 'Correlation id'],
  ['reply_to', 'Reply to'],
  ['content_type', 'Content type'],
  ['subject', 'Subject'],
  ['group_id', 'Group id'],
  ['group_seq', 'Group sequence'],
];

/** Input the console refuses before asking the broker, naming the field as the API does. */
class FieldError extends Error {
  constructor(field, message) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

/** The message's editable headers as the form shows them (strings; '' for none). */
function currentHeaders(m) {
  const out = { priority: String(m.headers.priority), expires_ms: m.headers.expires_ms ?? null };
  for (const [name] of TEXT_HEADERS) {
    const value = name === 'group_id' ? m.group_id : m.headers[name];
    out[name] = value === null || value === undefined ? '' : String(value);
  }
  return out;
}

/** The form input a refused field belongs to. */
function inputOf(field) {
  return field === 'ttl_ms' || field === 'expires_ms' ? 'ttl' : field;
}

function editForm(m, properties, current, entered, problem) {
  const value = name => (entered ? entered.get(name) ?? '' : current[name] ?? '');
  const bad = problem?.field ? inputOf(problem.field) : null;
  // The refused input is marked, says why, and has the focus when the dialog opens.
  const mark = name => (name === bad ? raw('class="invalid" aria-invalid="true" autofocus') : '');
  const why = name => (name === bad ? html`<span class="error field-error">${problem.message}</span>` : '');
  const priority = value('priority');
  const expires = m.headers.expires_ms;
  const text = entered?.has('body') ? entered.get('body') : m.body_text;
  return html`${problem ? html`<p class="error" id="edit-error" role="alert">Not saved: ${problem.message}</p>` : ''}
    <table class="kv">
      <tr><th>Queue</th><td>${m.queue}</td></tr>
      <tr><th>Due</th><td>${time(m.due_ms)} (${relative(m.due_ms)})</td></tr>
      <tr><th>Enqueued</th><td>${time(m.enqueued_ms)}</td></tr>
      <tr><th>Message id</th><td>${m.message_id ?? '–'}</td></tr>
      <tr><th>User id</th><td>${m.headers.user_id ?? '–'}</td></tr>
    </table>
    <fieldset class="headers"><legend>Headers <span class="muted">(an emptied one is cleared)</span></legend>
      <label>Priority <select name="priority" ${mark('priority')}>${
        Array.from({ length: 10 }, (_, p) => html`<option value="${p}" ${String(p) === priority ? 'selected' : ''}>${p}</option>`)}</select>${why('priority')}</label>
      <div><label>Expires in (seconds from now; now ${expires ? html`${time(expires)}, ${relative(expires)}` : 'never'})
        <input name="ttl" inputmode="decimal" autocomplete="off" value="${entered?.get('ttl') ?? ''}" ${mark('ttl')}>${why('ttl')}</label>
        <label class="check"><input type="checkbox" name="no_expiry" ${entered?.has('no_expiry') ? 'checked' : ''}> Never expires</label></div>
      ${TEXT_HEADERS.map(([name, label]) => html`<label>${label}
        <input name="${name}" value="${value(name)}" autocomplete="off" ${mark(name)}
          ${name === 'group_seq' ? 'inputmode="numeric"' : ''}>${why(name)}</label>`)}
    </fieldset>
    <label>Properties (typed: {"name", "value": {"type", "value"}})
      <textarea name="properties" ${mark('properties')}>${entered ? entered.get('properties') : properties}</textarea>${why('properties')}</label>
    ${text === null || text === undefined
      ? html`<p class="muted">The body is ${bytes(m.size)} of binary data; it is kept as it is.</p>`
      : html`<label>Body <textarea name="body" ${mark('body')}>${text}</textarea>${why('body')}</label>`}`;
}

/**
 * The headers the form changes, as `PATCH /api/schedule/ID` takes them: null clears
 * one. Numbers go as numbers and anything else as typed, for the broker to judge.
 */
function headerChanges(form, current) {
  const out = {};
  const number = text => (text.trim() !== '' && Number.isFinite(Number(text)) ? Number(text) : text);
  if (form.get('priority') !== current.priority) out.priority = Number(form.get('priority'));
  const ttl = form.get('ttl').trim();
  if (form.has('no_expiry')) {
    if (ttl) throw new FieldError('ttl_ms', 'give a time to live or never, not both');
    if (current.expires_ms !== null) out.expires_ms = null;
  } else if (ttl) {
    const seconds = Number(ttl);
    if (!Number.isFinite(seconds) || seconds < 0) throw new FieldError('ttl_ms', 'give the seconds from now it expires in');
    out.ttl_ms = Math.round(seconds * 1000);
  }
  for (const [name] of TEXT_HEADERS) {
    const typed = form.get(name);
    if (typed === current[name]) continue;
    if (typed === '') out[name] = null;
    else out[name] = name === 'group_seq' ? number(typed) : typed;
  }
  return out;
}

function propertyText(p) {
  const v = p.value;
  return `${p.name}=${v && typeof v === 'object' && 'value' in v ? JSON.stringify(v.value) : ''}`;
}

export function mount(page, params) {
  render(page, html`
    <h1>Schedule</h1>
    <div class="toolbar">
      <label>Queue <input id="queue" value="${params.get('queue') ?? ''}" placeholder="every queue" autocomplete="off"></label>
      <label>Range <select id="range">${RANGES.map(([key, , label]) => html`<option value="${key}">${label}</option>`)}</select></label>
      <button id="refresh">Refresh</button>
    </div>
    <div class="split">
      <div class="panel">
        <h2>Falling due <span class="muted" id="chart-note"></span></h2>
        <div id="chart"><p class="muted">Loading…</p></div>
        <p class="muted">Click a bar to list only the messages due in it.</p>
      </div>
      <div class="panel">
        <h2 id="list-title">Waiting messages</h2>
        <div id="list"><p class="muted">Loading…</p></div>
        <p><button id="more" hidden>More</button></p>
      </div>
    </div>`);
  const $ = selector => page.querySelector(selector);
  let timeline = null;
  let selected = null;
  let items = [];
  let next = null;

  const range = () => RANGES.find(r => r.at(0) === $('#range').value) ?? RANGES[0];
  const queue = () => $('#queue').value.trim();

  const loadChart = async () => {
    // Whole minutes, so the buckets stand still between refreshes.
    const from = Math.floor(Date.now() / 60000) * 60000;
    const to = from + range()[1];
    try {
      timeline = await get(`/api/schedule/timeline${query({ queue: queue(), from, to, buckets: BUCKETS })}`);
      const total = timeline.counts.reduce((a, b) => a + b, 0);
      render($('#chart-note'), html`— ${num(total)} in ${range()[2]}`);
      render($('#chart'), barChart({ ...timeline, from: timeline.from_ms, bucketMs: timeline.bucket_ms, selected }));
    } catch (e) {
      render($('#chart'), notServed(e)
        ? html`<p class="muted">This broker does not serve the schedule timeline.</p>`
        : html`<p class="error">${e.message}</p>`);
    }
  };

  const bucketRange = () => {
    if (selected === null || !timeline) return {};
    const from = timeline.from_ms + selected * timeline.bucket_ms;
    return { from, to: from + timeline.bucket_ms };
  };

  const drawList = () => {
    $('#more').hidden = !next;
    const b = bucketRange();
    render($('#list-title'), b.from
      ? html`Due ${time(b.from)} – ${time(b.to)} <button class="small" id="all">Show all</button>`
      : html`Waiting messages`);
    if (!items.length) {
      render($('#list'), html`<p class="muted">No delayed messages${b.from ? ' in this slot' : ''}.</p>`);
      return;
    }
    render($('#list'), html`<table>
      <thead><tr><th>Due</th><th>Queue</th><th>Message</th><th></th></tr></thead>
      <tbody>${items.map(m => html`<tr data-id="${m.id}" title="${m.id}">
        <td class="nowrap">${time(m.due_ms)}<br><span class="muted">${relative(m.due_ms)}</span></td>
        <td><a href="#/queues/${seg(m.queue)}">${m.queue}</a></td>
        <td><div class="mono preview">${m.body_preview}${m.body_truncated ? '…' : ''}</div>
          <div class="muted">${bytes(m.size)}${m.properties.length ? ' · ' : ''}<span class="mono">${m.properties.map(propertyText).join(', ')}</span></div></td>
        <td class="actions"><button class="small" data-edit="${m.id}">View / edit</button>
          <button class="small" data-reschedule="${m.id}">Reschedule</button>
          <button class="small danger" data-cancel="${m.id}">Cancel</button></td>
      </tr>`)}</tbody></table>`);
  };

  const loadList = async (more = false) => {
    try {
      const answer = await get(`/api/schedule${query({ queue: queue(), ...bucketRange(), limit: LIMIT, cursor: more ? next : null })}`);
      items = more ? items.concat(answer.items) : answer.items;
      next = answer.next ?? null;
      drawList();
    } catch (e) {
      render($('#list'), notServed(e)
        ? html`<p class="muted">This broker does not serve the schedule.</p>`
        : html`<p class="error">${e.message}</p>`);
    }
  };

  const reload = () => { loadChart(); loadList(); };

  const edit = async id => {
    let m;
    try {
      m = await get(`/api/schedule/${seg(id)}`);
    } catch (e) {
      act(() => { throw e; });
      return;
    }
    const properties = JSON.stringify(m.properties, null, 2);
    const current = currentHeaders(m);
    // Refused input reopens the dialog with what was typed and the field named.
    let entered = null;
    let problem = null;
    for (;;) {
      const form = await ask({
        title: `Delayed message ${m.id}`,
        body: editForm(m, properties, current, entered, problem),
        ok: 'Save changes',
      });
      if (!form) return;
      entered = form;
      const change = {};
      try {
        const headers = headerChanges(form, current);
        if (Object.keys(headers).length) change.headers = headers;
        if (form.get('properties') !== properties) {
          try {
            change.properties = JSON.parse(form.get('properties'));
          } catch (e) {
            throw new FieldError('properties', e.message);
          }
        }
      } catch (e) {
        problem = e;
        continue;
      }
      if (form.has('body') && form.get('body') !== m.body_text) change.body = form.get('body');
      if (!Object.keys(change).length) return;
      try {
        await patch(`/api/schedule/${seg(id)}`, change);
      } catch (e) {
        if (e.status !== 400) {
          toast(e.message, true);
          return;
        }
        problem = e;
        continue;
      }
      toast('Saved; it keeps its due time.');
      loadList();
      return;
    }
  };

  const reschedule = async id => {
    const form = await ask({
      title: `Reschedule ${id}`,
      body: html`<label>Due in (seconds from now) <input name="delay" type="number" min="0" step="any" autocomplete="off"></label>
        <p class="muted">or</p>
        <label>Due at (local time) <input name="at" type="datetime-local" step="1"></label>`,
      ok: 'Reschedule',
    });
    if (!form) return;
    let body;
    if (form.get('at')) body = { due_ms: new Date(form.get('at')).getTime() };
    else if (form.get('delay') !== '') body = { delay_ms: Math.round(Number(form.get('delay')) * 1000) };
    else return;
    await act(() => post(`/api/schedule/${seg(id)}/reschedule`, body), r => `Now due ${time(r.due_ms)}.`);
    reload();
  };

  page.addEventListener('click', async event => {
    const bar = event.target.closest('[data-bucket]');
    if (bar) {
      const i = Number(bar.dataset.bucket);
      selected = selected === i ? null : i;
      reload();
      return;
    }
    const button = event.target.closest('button');
    if (!button) return;
    if (button.id === 'refresh') reload();
    else if (button.id === 'all') { selected = null; reload(); }
    else if (button.id === 'more') loadList(true);
    else if (button.dataset.edit) edit(button.dataset.edit);
    else if (button.dataset.reschedule) reschedule(button.dataset.reschedule);
    else if (button.dataset.cancel) {
      const id = button.dataset.cancel;
      const ok = await ask({ title: 'Cancel this message?', body: html`<p><code>${id}</code> is deleted and never delivered.</p>`, ok: 'Cancel it', danger: true });
      if (!ok) return;
      await act(() => del(`/api/schedule/${seg(id)}`), 'Cancelled.');
      reload();
    }
  });
  $('#range').addEventListener('change', () => { selected = null; reload(); });
  $('#queue').addEventListener('change', () => { selected = null; reload(); });

  reload();
  const timer = setInterval(loadChart, 10000);
  return () => clearInterval(timer);
}
