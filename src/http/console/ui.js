// Markup from tagged templates with every value escaped, formatting, and the page's
// dialogs and toasts.

const RAW = Symbol('raw');

/** Markup that is already safe (built by `html`). */
export function raw(markup) { return { [RAW]: String(markup) }; }

export function esc(value) {
  return String(value ?? '').replace(/[&<>"']/g, c => (
    { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

function part(value) {
  if (value === null || value === undefined || value === false) return '';
  if (Array.isArray(value)) return value.map(part).join('');
  if (typeof value === 'object' && RAW in value) return value[RAW];
  return esc(value);
}

/** html`<td>${text}</td>`: interpolated values are escaped unless made by `html`/`raw`. */
export function html(strings, ...values) {
  let out = strings[0];
  values.forEach((value, i) => { out += part(value) + strings[i + 1]; });
  return raw(out);
}

export function render(element, markup) { element.innerHTML = part(markup); }

const numberFormat = new Intl.NumberFormat('en');
export const num = n => (n === null || n === undefined ? '–' : numberFormat.format(n));

export function rate(perSecond) {
  if (perSecond === null || perSecond === undefined || Number.isNaN(perSecond)) return '–';
  if (perSecond === 0) return '0/s';
  if (perSecond < 10) return `${perSecond.toFixed(1)}/s`;
  return `${numberFormat.format(Math.round(perSecond))}/s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

/** A span of seconds as "3d 4h", "5m 2s", "800ms". */
export function duration(seconds) {
  const s = Math.abs(seconds);
  if (s < 1) return `${Math.round(s * 1000)}ms`;
  const parts = [[86400, 'd'], [3600, 'h'], [60, 'm'], [1, 's']];
  let rest = Math.floor(s);
  const out = [];
  for (const [size, unit] of parts) {
    if (rest >= size || (out.length === 0 && size === 1)) {
      out.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
    if (out.length === 2) break;
  }
  return out.join(' ');
}

/** Epoch ms as local date and time. */
export function time(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  const pad = n => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** "in 5m 2s" / "3s ago" from now. */
export function relative(ms) {
  const delta = (ms - Date.now()) / 1000;
  return delta >= 0 ? `in ${duration(delta)}` : `${duration(delta)} ago`;
}

/** A short message at the bottom of the page. */
export function toast(message, bad = false) {
  const el = document.getElementById('toast');
  el.textContent = message;
  el.className = bad ? 'toast bad' : 'toast';
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, bad ? 8000 : 3500);
}

/**
 * A modal form: resolves with its FormData when confirmed, null when cancelled.
 * `body` is markup (from `html`) holding the inputs.
 */
export function ask({ title, body = '', ok = 'OK', danger = false }) {
  const dialog = document.getElementById('ask');
  const form = document.getElementById('ask-form');
  document.getElementById('ask-title').textContent = title;
  render(document.getElementById('ask-body'), body);
  const okButton = document.getElementById('ask-ok');
  okButton.textContent = ok;
  okButton.className = danger ? 'danger' : 'primary';
  return new Promise(resolve => {
    const done = () => {
      dialog.removeEventListener('close', done);
      resolve(dialog.returnValue === 'ok' ? new FormData(form) : null);
    };
    dialog.returnValue = '';
    dialog.addEventListener('close', done);
    dialog.showModal();
  });
}

/** Runs an action the user asked for, telling how it went. */
export async function act(work, success) {
  try {
    const result = await work();
    if (success) toast(typeof success === 'function' ? success(result) : success);
    return result;
  } catch (e) {
    toast(e.message, true);
    return undefined;
  }
}
