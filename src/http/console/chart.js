// Charts as SVG markup (parsed by the HTML parser, so no namespace URL is needed).
// Colours come from the style sheet: series i has class `s<i>`.

import { html } from './ui.js';

const W = 640;
const PAD = { left: 48, right: 10, top: 10, bottom: 22 };

/** A round number at or above `v`, for the top of an axis. */
function niceMax(v) {
  if (!(v > 0)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(v));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (v <= step * magnitude) return step * magnitude;
  }
  return 10 * magnitude;
}

function yAxis(max, height, format) {
  const plot = height - PAD.top - PAD.bottom;
  return [0, 0.5, 1].map(f => {
    const y = PAD.top + plot * (1 - f);
    return html`<line class="grid" x1="${PAD.left}" x2="${W - PAD.right}" y1="${y}" y2="${y}"></line>
      <text x="${PAD.left - 6}" y="${y + 4}" text-anchor="end">${format(max * f)}</text>`;
  });
}

/**
 * Lines over time: `series` is [{label, points: [[epochMs, value], ...]}], drawn over
 * the last `spanMs` up to now; the axis reaches at least `least`.
 */
export function lineChart({ series, spanMs, height = 180, format = String, least = 1 }) {
  const now = Date.now();
  const from = now - spanMs;
  const max = niceMax(Math.max(least, ...series.flatMap(s => s.points.map(p => p[1]))));
  const plotW = W - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const x = t => PAD.left + ((t - from) / spanMs) * plotW;
  const y = v => PAD.top + plotH * (1 - v / max);
  const lines = series.map((s, i) => {
    const points = s.points.filter(p => p[0] >= from)
      .map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
    return html`<polyline class="line s${i}" points="${points}"><title>${s.label}</title></polyline>`;
  });
  const minutes = Math.round(spanMs / 60000);
  return html`<svg class="chart" viewBox="0 0 ${W} ${height}" role="img">
    ${yAxis(max, height, format)}
    <text x="${PAD.left}" y="${height - 6}">${minutes} min ago</text>
    <text x="${W - PAD.right}" y="${height - 6}" text-anchor="end">now</text>
    ${lines}
  </svg>
  <div class="legend">${series.map((s, i) => html`<span><i class="s${i}"></i>${s.label}</span>`)}</div>`;
}

function clock(ms, withDate) {
  const d = new Date(ms);
  const pad = n => String(n).padStart(2, '0');
  const t = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return withDate ? `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${t}` : t;
}

/**
 * Bars, one per time bucket: `counts[i]` fall in [from + i*bucketMs, from + (i+1)*bucketMs).
 * Each bar carries `data-bucket="i"` for a click handler; `selected` is highlighted.
 */
export function barChart({ from, bucketMs, counts, selected = null, height = 200 }) {
  // At least 2, so the middle line of a count axis is a whole number.
  const max = niceMax(Math.max(2, ...counts));
  const plotW = W - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const width = plotW / Math.max(1, counts.length);
  const spanMs = bucketMs * counts.length;
  const withDate = spanMs > 24 * 3600 * 1000;
  const bars = counts.map((count, i) => {
    const h = (count / max) * plotH;
    const x = PAD.left + i * width;
    const start = from + i * bucketMs;
    const label = `${clock(start, true)} – ${clock(start + bucketMs, true)}: ${count} due`;
    return html`<g data-bucket="${i}">
      <rect class="hit" x="${x}" y="${PAD.top}" width="${width}" height="${plotH}"></rect>
      <rect class="b${i === selected ? ' sel' : ''}" x="${x + 0.5}" y="${PAD.top + plotH - h}"
        width="${Math.max(1, width - 1)}" height="${h}"></rect>
      <title>${label}</title></g>`;
  });
  const ticks = [0, Math.floor(counts.length / 2), counts.length].map(i => html`
    <text x="${PAD.left + i * width}" y="${height - 6}"
      text-anchor="${i === 0 ? 'start' : i === counts.length ? 'end' : 'middle'}">${clock(from + i * bucketMs, withDate)}</text>`);
  return html`<svg class="chart" viewBox="0 0 ${W} ${height}" role="img">
    ${yAxis(max, height, v => String(Math.round(v)))}
    ${bars}
    ${ticks}
  </svg>`;
}

