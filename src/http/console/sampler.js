// Samples /api/queues every two seconds while the console is open: the API gives totals
// since the broker started, and rates are their differences between samples. Pages
// subscribe to the latest sample; the overview charts the history.

import { get } from './api.js';

const INTERVAL_MS = 2000;
export const HISTORY_MS = 10 * 60 * 1000;

let latest = { at: 0, queues: [], total: 0, rates: new Map(), history: [], error: null };
let previous = null;
let timer = null;
let busy = false;
const listeners = new Set();

function sum(queues, f) { return queues.reduce((n, q) => n + f(q), 0); }

// Every queue, a page of the API's largest at a time: the overview's totals and the
// queues table's filter cover them all, however many there are.
const PAGE = 1000;
async function allQueues() {
  const first = await get(`/api/queues?limit=${PAGE}`);
  const queues = [...first.queues];
  while (queues.length < first.total) {
    const next = await get(`/api/queues?limit=${PAGE}&offset=${queues.length}`);
    if (next.queues.length === 0) break; // queues deleted meanwhile
    queues.push(...next.queues);
  }
  return { queues, total: first.total };
}

async function sample() {
  if (busy) return;
  busy = true;
  try {
    const page = await allQueues();
    const at = Date.now();
    const rates = new Map();
    const seconds = previous ? (at - previous.at) / 1000 : 0;
    for (const q of page.queues) {
      const before = previous?.totals.get(q.name);
      if (before && seconds > 0) {
        rates.set(q.name, {
          in: Math.max(0, q.totals.enqueued - before.enqueued) / seconds,
          out: Math.max(0, q.totals.acked - before.acked) / seconds,
        });
      }
    }
    const history = latest.history.filter(h => h.at >= at - HISTORY_MS);
    if (previous) {
      history.push({
        at,
        in: sum([...rates.values()], r => r.in),
        out: sum([...rates.values()], r => r.out),
        ready: sum(page.queues, q => q.messages.ready),
        inFlight: sum(page.queues, q => q.messages.in_flight),
      });
    }
    previous = { at, totals: new Map(page.queues.map(q => [q.name, q.totals])) };
    latest = { at, queues: page.queues, total: page.total, rates, history, error: null };
  } catch (error) {
    latest = { ...latest, error };
  } finally {
    busy = false;
  }
  for (const listener of listeners) listener(latest);
}

export function startSampling() {
  if (timer === null) {
    sample();
    timer = setInterval(sample, INTERVAL_MS);
  }
}

/** Calls `listener` with each sample (and the last one now); returns the unsubscribe. */
export function subscribe(listener) {
  listeners.add(listener);
  if (latest.at) listener(latest);
  return () => listeners.delete(listener);
}

/** Samples now, after an action changed what the pages show. */
export const sampleNow = sample;
