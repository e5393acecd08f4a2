// The open client connections, and closing one.

import { get, del } from './api.js';
import { html, render, time, relative, ask, act } from './ui.js';

export function mount(page) {
  render(page, html`
    <h1>Connections</h1>
    <div class="panel"><div id="list"><p class="muted">Loading…</p></div></div>`);
  const list = page.querySelector('#list');

  const load = async () => {
    try {
      const connections = await get('/api/connections');
      render(list, connections.length ? html`<table>
        <thead><tr><th>Id</th><th>Protocol</th><th>Peer</th><th>TLS</th><th>User</th><th>Client id</th><th>Connected</th><th></th></tr></thead>
        <tbody>${connections.map(c => html`<tr data-connection="${c.id}">
          <td class="mono">${c.id}</td>
          <td>${c.protocol} ${c.version}</td>
          <td class="mono">${c.peer}</td>
          <td>${c.tls ? html`<span class="badge ok">TLS</span>` : 'no'}</td>
          <td>${c.user ?? html`<span class="muted">anonymous</span>`}</td>
          <td class="mono">${c.client_id ?? ''}</td>
          <td>${time(c.connected_at)} <span class="muted">(${relative(c.connected_at)})</span></td>
          <td><button class="small danger" data-close="${c.id}">Close</button></td>
        </tr>`)}</tbody></table>` : html`<p class="muted">No client is connected.</p>`);
    } catch (e) {
      render(list, html`<p class="error">${e.message}</p>`);
    }
  };

  list.addEventListener('click', async event => {
    const id = event.target.closest('[data-close]')?.dataset.close;
    if (!id) return;
    const ok = await ask({
      title: `Close connection ${id}?`,
      body: html`<p>The client is told in its protocol (a STOMP ERROR, an AMQP close) and disconnected. It may connect again.</p>`,
      ok: 'Close it', danger: true,
    });
    if (!ok) return;
    await act(() => del(`/api/connections/${id}`), `Connection ${id} is closed.`);
    setTimeout(load, 300);
  });

  load();
  const timer = setInterval(load, 5000);
  return () => clearInterval(timer);
}
