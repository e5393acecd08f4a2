// The delay schedule as a timeline: a chart of how many messages fall due when, and
// beside it the list (all of the range, or the bucket clicked), each message viewable,
// editable, reschedulable and cancellable before it is due.

import { get, post, patch, del, seg, query, notServed } from './api.js';
import { html, render, num, bytes, time, relative, ask, act } from './ui.js';
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
    const text = m.body_text;
    const form = await ask({
      title: `Delayed message ${m.id}`,
      body: html`<table class="kv">
          <tr><th>Queue</th><td>${m.queue}</td></tr>
          <tr><th>Due</th><td>${time(m.due_ms)} (${relative(m.due_ms)})</td></tr>
          <tr><th>Enqueued</th><td>${time(m.enqueued_ms)}</td></tr>
          <tr><th>Message id</th><td>${m.message_id ?? '–'}</td></tr>
          <tr><th>Group</th><td>${m.group_id ?? '–'}</td></tr>
          <tr><th>Headers</th><td class="mono">${Object.entries(m.headers).filter(([, v]) => v !== null).map(([k, v]) => `${k}=${v}`).join(', ')}</td></tr>
        </table>
        <label>Properties (typed: {"name", "value": {"type", "value"}})
          <textarea name="properties">${properties}</textarea></label>
        ${text === null || text === undefined
          ? html`<p class="muted">The body is ${bytes(m.size)} of binary data; it is kept as it is.</p>`
          : html`<label>Body <textarea name="body">${text}</textarea></label>`}`,
      ok: 'Save changes',
    });
    if (!form) return;
    const change = {};
    if (form.get('properties') !== properties) {
      try {
        change.properties = JSON.parse(form.get('properties'));
      } catch (e) {
        act(() => { throw new Error(`properties: ${e.message}`); });
        return;
      }
    }
    if (form.has('body') && form.get('body') !== text) change.body = form.get('body');
    if (!Object.keys(change).length) return;
    await act(() => patch(`/api/schedule/${seg(id)}`, change), 'Saved; it keeps its due time.');
    loadList();
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
