// The console's shell: logging in, the navigation, and which page the address shows
// (`#/queues/orders`: the page lives in the fragment, so the broker serves one file).

import { get, setCredentials, clearCredentials, currentUser } from './api.js';
import { html, render } from './ui.js';
import { startSampling } from './sampler.js';
import * as overview from './overview.js';
import * as queues from './queues.js';
import * as queue from './queue.js';
import * as schedule from './schedule.js';
import * as connections from './connections.js';

// [pattern of the fragment's path, page, navigation entry]
const PAGES = [
  [/^\/?$/, overview, 'overview'],
  [/^\/queues$/, queues, 'queues'],
  [/^\/queues\/(.+)$/, queue, 'queues'],
  [/^\/schedule$/, schedule, 'schedule'],
  [/^\/connections$/, connections, 'connections'],
];

let unmount = null;

function route() {
  if (unmount) unmount();
  unmount = null;
  const fragment = location.hash.replace(/^#/, '');
  const [path, search = ''] = fragment.split('?');
  const params = new URLSearchParams(search);
  // A fresh element per page: the listeners a page adds go with it.
  const page = document.createElement('main');
  page.id = 'page';
  document.getElementById('page').replaceWith(page);
  for (const [pattern, module, nav] of PAGES) {
    const match = path.match(pattern);
    if (!match) continue;
    for (const a of document.querySelectorAll('[data-nav]')) {
      a.classList.toggle('active', a.dataset.nav === nav);
    }
    unmount = module.mount(page, params, ...match.slice(1).map(decodeURIComponent)) ?? null;
    return;
  }
  render(page, html`<h1>Not found</h1><p>No page at <code>${fragment}</code>. <a href="#/">Overview</a></p>`);
}

function showWho() {
  const user = currentUser();
  render(document.getElementById('who'), user
    ? html`<span>${user}</span><button class="small" id="logout">Log out</button>`
    : html`<span>anonymous</span><button class="small" id="login-again">Log in</button>`);
}

let loggingIn = null;
let started = false;

/** Asks for a user and password until the API accepts them. */
function logIn(why) {
  if (loggingIn) return loggingIn;
  const dialog = document.getElementById('login');
  const form = document.getElementById('login-form');
  const error = document.getElementById('login-error');
  document.getElementById('login-why').textContent = why
    ?? "The management API needs one of the broker's users.";
  error.textContent = '';
  loggingIn = new Promise(resolve => {
    const submit = async event => {
      event.preventDefault();
      const data = new FormData(form);
      setCredentials(data.get('user'), data.get('password') ?? '');
      try {
        await get('/api/broker');
      } catch (e) {
        // 403: a user without view on the broker as a whole may still see its queues.
        if (e.status !== 403) {
          clearCredentials();
          error.textContent = e.message;
          return;
        }
      }
      form.removeEventListener('submit', submit);
      dialog.close();
      form.reset();
      loggingIn = null;
      showWho();
      resolve();
    };
    form.addEventListener('submit', submit);
    dialog.showModal();
  });
  return loggingIn;
}

async function start() {
  const login = document.getElementById('login');
  // Escape does not dismiss the login: nothing works without it.
  login.addEventListener('cancel', event => event.preventDefault());
  window.addEventListener('weir:unauthorized', async event => {
    if (loggingIn) return;
    await logIn(event.detail.message);
    if (started) route();
  });
  document.getElementById('who').addEventListener('click', async event => {
    if (event.target.id === 'logout') {
      clearCredentials();
      showWho();
      location.hash = '#/';
      route();
    } else if (event.target.id === 'login-again') {
      await logIn();
      route();
    }
  });
  try {
    await get('/api/broker');
  } catch (e) {
    // The 401 handler is asking already; draw pages once it is answered.
    if (e.status === 401 && loggingIn) await loggingIn;
  }
  started = true;
  showWho();
  startSampling();
  window.addEventListener('hashchange', route);
  route();
}

start();
