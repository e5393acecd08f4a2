// The JSON API, called with the credentials the user gave this tab (HTTP Basic, kept in
// sessionStorage: gone when the tab closes). `credentials: 'omit'` keeps the browser
// from adding credentials of its own and from popping up its login box on a 401.

const KEY = 'weir.console.auth';
const USER_KEY = 'weir.console.user';

export class ApiError extends Error {
  constructor(status, code, message, field = null) {
    super(message);
    this.status = status;
    this.code = code;
    /** The input a 400 names as wrong (`field` in the error body), if it names one. */
    this.field = field;
  }
}

function base64(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

export function setCredentials(user, password) {
  sessionStorage.setItem(KEY, base64(`${user}:${password}`));
  sessionStorage.setItem(USER_KEY, user);
}

export function clearCredentials() {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(USER_KEY);
}

/** The user this tab logs in as; null when it calls the API anonymously. */
export function currentUser() {
  return sessionStorage.getItem(USER_KEY);
}

export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const auth = sessionStorage.getItem(KEY);
  if (auth) headers.Authorization = `Basic ${auth}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (e) {
    throw new ApiError(0, 'network', `the broker does not answer (${e.message})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!response.ok) {
    const error = new ApiError(
      response.status,
      data?.error ?? `http_${response.status}`,
      data?.message ?? `${response.status} ${response.statusText}`,
      data?.field ?? null,
    );
    if (response.status === 401) window.dispatchEvent(new CustomEvent('weir:unauthorized', { detail: error }));
    throw error;
  }
  return data;
}

export const get = path => api('GET', path);
export const post = (path, body) => api('POST', path, body);
export const put = (path, body) => api('PUT', path, body);
export const patch = (path, body) => api('PATCH', path, body);
export const del = path => api('DELETE', path);

/** A path segment: a queue name or message id as the API's routes take it. */
export const seg = value => encodeURIComponent(value);

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const parts = Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  return parts.length ? `?${parts.join('&')}` : '';
}

/** The broker does not serve this route at all (an older Weir): not an error to show red. */
export function notServed(error) {
  return error instanceof ApiError
    && (error.status === 405 || (error.status === 404 && /^nothing at /.test(error.message)));
}
