// Every queue with its depth and rates, refreshed with each sample.

import { put, seg } from './api.js';
import { html, render, num, rate, ask, act } from './ui.js';
import { subscribe, sampleNow } from './sampler.js';

const ROWS = 1000;

function row(q, r) {
  const href = `#/queues/${seg(q.name)}`;
  return html`<tr data-queue="${q.name}">
    <td><a href="${href}">${q.name}</a></td>
    <td>${q.paused ? html`<span class="badge warn">paused</span>` : ''}</td>
    <td class="num ready">${num(q.messages.ready)}</td>
    <td class="num">${num(q.messages.paged)}</td>
    <td class="num">${num(q.messages.in_flight)}</td>
    <td class="num">${num(q.consumers)}</td>
    <td class="num">${num(q.groups)}</td>
    <td class="num">${rate(r?.in)}</td>
    <td class="num">${rate(r?.out)}</td>
    <td class="num">${num(q.totals.enqueued)}</td>
    <td class="num">${num(q.totals.acked)}</td>
    <td class="num">${num(q.totals.dead_lettered)}</td>
  </tr>`;
}

export function mount(page) {
  render(page, html`
    <h1>Queues</h1>
    <div class="toolbar">
      <label>Filter <input id="filter" placeholder="part of a name" autocomplete="off"></label>
      <span class="spacer"></span>
      <button id="create" class="primary">Create queue</button>
    </div>
    <div class="panel">
      <table id="queues">
        <thead><tr><th>Name</th><th></th><th class="num">Ready</th><th class="num">Paged</th>
          <th class="num">In flight</th><th class="num">Consumers</th><th class="num">Groups</th>
          <th class="num">In</th><th class="num">Out</th><th class="num">Enqueued</th>
          <th class="num">Acked</th><th class="num">Dead-lettered</th></tr></thead>
        <tbody><tr><td colspan="12" class="muted">Loading…</td></tr></tbody>
      </table>
      <p class="muted" id="note"></p>
    </div>`);
  const filter = page.querySelector('#filter');
  let last = null;

  const draw = () => {
    if (!last) return;
    const body = page.querySelector('#queues tbody');
    if (last.error) {
      render(body, html`<tr><td colspan="12" class="error">${last.error.message}</td></tr>`);
      return;
    }
    // The filter looks at every queue; the table draws at most ROWS of them.
    const shown = last.queues.filter(q => q.name.includes(filter.value));
    render(body, shown.length
      ? shown.slice(0, ROWS).map(q => row(q, last.rates.get(q.name)))
      : html`<tr><td colspan="12" class="muted">No queues${filter.value ? ' match' : ''}.</td></tr>`);
    render(page.querySelector('#note'), shown.length > ROWS
      ? html`The first ${num(ROWS)} of ${num(shown.length)} queues (by name): filter to find the others.`
      : '');
  };

  filter.addEventListener('input', draw);
  page.querySelector('#create').addEventListener('click', async () => {
    const form = await ask({
      title: 'Create a queue',
      body: html`<label>Name <input name="name" required autocomplete="off"></label>`,
      ok: 'Create',
    });
    const name = form?.get('name')?.trim();
    if (!name) return;
    await act(() => put(`/api/queues/${seg(name)}`), `Queue ${name} is there.`);
    sampleNow();
  });
  const unsubscribe = subscribe(sample => { last = sample; draw(); });
  return unsubscribe;
}
