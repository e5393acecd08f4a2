// The broker at a glance: what it is, its limits and alarms, totals over every queue,
// and charts of the rates and depth the console sampled since it was opened.

import { get } from './api.js';
import { html, render, num, rate, bytes, duration } from './ui.js';
import { lineChart } from './chart.js';
import { subscribe, HISTORY_MS } from './sampler.js';

function sum(queues, f) { return queues.reduce((n, q) => n + f(q), 0); }

function card(label, value, bad = false) {
  return html`<div class="card${bad ? ' bad' : ''}"><div class="label">${label}</div><div class="value">${value}</div></div>`;
}

function brokerPanels(b, connections) {
  const memory = b.memory;
  const used = memory.limit_bytes ? Math.min(100, (100 * memory.used_bytes) / memory.limit_bytes) : 0;
  const alarms = [
    memory.full && html`<span class="badge bad">memory limit reached</span>`,
    b.disk.refusing && html`<span class="badge bad">disk: refusing durable messages</span>`,
    b.flow.blocking_queues > 0 && html`<span class="badge warn">${b.flow.blocking_queues} queue(s) blocking producers</span>`,
  ].filter(Boolean);
  return html`
    <div class="grid">
      <div class="panel">
        <h2>Broker</h2>
        <table class="kv">
          <tr><th>Version</th><td>${b.version}</td></tr>
          <tr><th>Up for</th><td>${duration(b.uptime_seconds)}</td></tr>
          <tr><th>Queues</th><td>${num(b.queues)}</td></tr>
          <tr><th>Connections</th><td>${connections === null ? '–' : num(connections)}</td></tr>
          <tr><th>Alarms</th><td>${alarms.length ? alarms : html`<span class="badge ok">none</span>`}</td></tr>
        </table>
      </div>
      <div class="panel">
        <h2>Limits</h2>
        <table class="kv">
          <tr><th>Message memory</th><td>${bytes(memory.used_bytes)} of ${memory.limit_bytes ? bytes(memory.limit_bytes) : 'no limit'}
            ${memory.limit_bytes ? html`<div class="bar"><span class="${memory.full ? 'full' : ''}" data-width="${used.toFixed(1)}"></span></div>` : ''}</td></tr>
          <tr><th>Process memory (resident)</th><td>${bytes(memory.process_resident_bytes)}</td></tr>
          <tr><th>Disk</th><td>${b.disk.refusing ? html`<span class="error">refusing: ${b.disk.reason}</span>` : 'accepting'}</td></tr>
          <tr><th>Queues blocking producers</th><td>${num(b.flow.blocking_queues)}</td></tr>
          <tr><th>Sends held back</th><td>${num(b.flow.held_sends)}</td></tr>
        </table>
      </div>
      <div class="panel">
        <h2>Listeners</h2>
        <table>
          <tr><th>Name</th><th>Protocols</th><th>Address</th><th>TLS</th></tr>
          ${b.listeners.map(l => html`<tr><td>${l.name}</td><td>${l.protocols.join(', ')}</td><td><code>${l.address}</code></td><td>${l.tls ? 'yes' : 'no'}</td></tr>`)}
        </table>
      </div>
    </div>`;
}

export function mount(page) {
  render(page, html`
    <h1>Overview</h1>
    <div class="cards" id="totals"></div>
    <div class="grid">
      <div class="panel"><h2>Messages per second</h2><div id="rates-chart"><p class="muted">Sampling…</p></div></div>
      <div class="panel"><h2>Messages waiting</h2><div id="depth-chart"><p class="muted">Sampling…</p></div></div>
    </div>
    <div id="broker"></div>`);

  const refreshBroker = async () => {
    const target = page.querySelector('#broker');
    try {
      const [b, connections] = await Promise.all([
        get('/api/broker'),
        get('/api/connections').then(list => list.length, () => null),
      ]);
      render(target, brokerPanels(b, connections));
      // Widths set through the CSSOM: the page's policy allows no inline style.
      for (const bar of target.querySelectorAll('[data-width]')) bar.style.width = `${bar.dataset.width}%`;
    } catch (e) {
      render(target, html`<div class="panel"><p class="error">${e.message}</p></div>`);
    }
  };

  const unsubscribe = subscribe(sample => {
    const q = sample.queues;
    const last = sample.history.at(-1);
    render(page.querySelector('#totals'), [
      card('Queues', num(sample.total)),
      card('Ready', num(sum(q, x => x.messages.ready))),
      card('In flight', num(sum(q, x => x.messages.in_flight))),
      card('Consumers', num(sum(q, x => x.consumers))),
      card('In', rate(last?.in)),
      card('Out (acked)', rate(last?.out)),
      card('Enqueued', num(sum(q, x => x.totals.enqueued))),
      card('Acked', num(sum(q, x => x.totals.acked))),
      card('Dead-lettered', num(sum(q, x => x.totals.dead_lettered)), sum(q, x => x.totals.dead_lettered) > 0),
      card('Expired', num(sum(q, x => x.totals.expired))),
    ]);
    if (sample.error) {
      render(page.querySelector('#rates-chart'), html`<p class="error">${sample.error.message}</p>`);
      return;
    }
    if (sample.history.length < 2) return;
    render(page.querySelector('#rates-chart'), lineChart({
      spanMs: HISTORY_MS,
      format: v => rate(v),
      series: [
        { label: 'in (enqueued)', points: sample.history.map(h => [h.at, h.in]) },
        { label: 'out (acked)', points: sample.history.map(h => [h.at, h.out]) },
      ],
    }));
    render(page.querySelector('#depth-chart'), lineChart({
      spanMs: HISTORY_MS,
      format: v => num(Math.round(v)),
      least: 2,
      series: [
        { label: 'ready', points: sample.history.map(h => [h.at, h.ready]) },
        { label: 'in flight', points: sample.history.map(h => [h.at, h.inFlight]) },
      ],
    }));
  });

  refreshBroker();
  const timer = setInterval(refreshBroker, 5000);
  return () => { clearInterval(timer); unsubscribe(); };
}
