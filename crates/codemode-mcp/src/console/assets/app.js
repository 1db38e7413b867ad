/* codemode operator console — the browser front end (served at /console/assets/app.js).
 *
 * Vanilla ES2020, no build step, no libraries; runs under
 *   script-src 'self'; style-src 'self'; connect-src 'self' (no eval, no inline anything).
 *
 * Security rules — everything the server sends is hostile text (tool names, inputs, outputs,
 * errors, source code, scopes, server names, even object keys):
 *  - the DOM is built with createElement/createElementNS + textContent only; never
 *    innerHTML, outerHTML, insertAdjacentHTML or document.write;
 *  - server text never becomes a URL, an href/src or an attribute name. The only hrefs are
 *    constant '#/...' routes; a run link is made only for ids matching RUN_ID_RE (else plain
 *    text). Server text may become an attribute *value* only through setAttribute (data-* keys
 *    on rows), and class names are only ever picked from constant lists;
 *  - control and bidi characters are made visible as \u{XXXX} by visible();
 *  - JSON is shown as JSON.stringify(v, null, 2) passed through visible().
 */
(function () {
  'use strict';

  const RUN_STATUSES = ['running', 'waiting', 'parked', 'completed', 'failed', 'aborted', 'expired'];
  const ACTIVE = ['running', 'waiting', 'parked'];
  const CALL_STATUSES = ['issued', 'parked', 'approved', 'denied', 'completed', 'failed', 'cancelled', 'reissued'];
  const SERVER_STATES = ['connected', 'connecting', 'failed', 'disabled'];
  const RUN_ID_RE = /^cm_[0-9a-f]{8,64}$/;
  const MAX_TICKS = 60;
  const API = '/console/api';

  const state = {
    session: null,          // {operator, csrf, replica, fleet, store}
    screen: 'boot',         // 'boot' | 'login' | 'app'
    gen: 0,                 // bumped on every route render: stale async results are dropped
    view: null,             // the current view: {refresh(gen), busy?()}
    inflight: -1,           // gen of the refresh in flight (or -1)
    again: false,           // a forced refresh arrived while one was in flight
    lastRefresh: 0,
    refreshTimer: null,
    es: null,
    esRetry: null,
    ticks: [],              // the last MAX_TICKS tick events
    filters: { status: '', scope: '', tool: '' },
    armedAbort: null,       // run id whose abort button was clicked once
  };

  // ---------------------------------------------------------------- text & DOM helpers

  // U+0000–U+001F, U+007F–U+009F, LRM/RLM, LRE..RLO, LRI..PDI, LINE/PARAGRAPH SEPARATOR.
  const UNSAFE = /[\u0000-\u001F\u007F-\u009F\u200E\u200F\u202A-\u202E\u2066-\u2069\u2028\u2029]/g;

  /** Makes control and bidi characters visible as \u{XXXX}; `block` keeps \n and \t. */
  function visible(s, block) {
    return String(s).replace(UNSAFE, (c) =>
      (block && (c === '\n' || c === '\t'))
        ? c
        : '\\u{' + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0') + '}');
  }

  /** Any server value as one line of text (objects as compact JSON). */
  function str(v) {
    if (v === null || v === undefined) return '—';
    if (typeof v === 'string') return v;
    if (typeof v === 'object') { try { return JSON.stringify(v); } catch (e) { return '?'; } }
    return String(v);
  }

  function pretty(v) {
    if (v === undefined) return '';
    try { return JSON.stringify(v, null, 2); } catch (e) { return '?'; }
  }

  /** Appends children: Nodes as is, anything else as one-line visible text. */
  function append(n, kids) {
    for (const k of kids) {
      if (k === null || k === undefined || k === false) continue;
      if (Array.isArray(k)) append(n, k);
      else if (k instanceof Node) n.appendChild(k);
      else n.appendChild(document.createTextNode(visible(k)));
    }
    return n;
  }

  function el(tag, cls, ...kids) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    return append(n, kids);
  }

  /** A <pre> block: keeps \n and \t, shows every other control/bidi character. */
  function pre(cls, text) {
    const p = el('pre', cls);
    p.textContent = visible(text, true);
    return p;
  }

  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); return n; }

  function button(label, cls, onClick) {
    const b = el('button', cls || 'btn', label);
    b.type = 'button';
    if (onClick) b.addEventListener('click', onClick);
    return b;
  }

  /** A table cell with a constant class and a constant label (shown on phones). */
  function td(cls, label, ...kids) {
    const c = el('td', cls, ...kids);
    c.setAttribute('data-label', label);
    return c;
  }

  function table(id, cls, headers) {
    const t = el('table', 'grid cards ' + cls);
    t.id = id;
    const tr = el('tr');
    for (const h of headers) tr.appendChild(el('th', null, h));
    t.appendChild(el('thead', null, tr));
    const body = el('tbody');
    t.appendChild(body);
    return { table: t, body };
  }

  function emptyRow(body, cols, text) {
    const c = el('td', 'empty', text);
    c.setAttribute('colspan', String(cols));
    body.appendChild(el('tr', 'empty-row', c));
  }

  function routeLink(route, label) {          // `route` is always a constant here
    const a = el('a', null, label);
    a.setAttribute('href', route);
    return a;
  }

  function validRunId(id) { return typeof id === 'string' && RUN_ID_RE.test(id); }

  /** A link to a run, only for well-formed ids; anything else is plain text. */
  function runLink(id, label) {
    if (!validRunId(id)) return el('span', 'bad-id', str(id));
    const a = el('a', 'run-link', label || id);
    a.setAttribute('href', '#/runs/' + encodeURIComponent(id));
    return a;
  }

  function pill(status) {
    const s = str(status);
    return el('span', RUN_STATUSES.includes(s) ? 'pill pill-' + s : 'pill', s);
  }

  function num(v) { return typeof v === 'number' && Number.isFinite(v) ? v : null; }
  function fmtNum(v) { const n = num(v); return n === null ? '—' : String(n); }
  function fmtMs(v) {
    const n = num(v);
    if (n === null) return '—';
    return String(n < 1 ? Math.round(n * 100) / 100 : Math.round(n * 10) / 10) + ' ms';
  }
  function fmtBytes(v) {
    const n = num(v);
    if (n === null) return '—';
    if (n < 1024) return n + ' bytes';
    return n + ' bytes (' + (n / 1024).toFixed(1) + ' KiB)';
  }
  /** A duration: "12 s", "3 min 4 s", "2 h 5 min", "3 d 1 h". */
  function fmtSpan(ms) {
    const n = num(ms);
    if (n === null) return '—';
    const s = Math.max(0, Math.floor(n / 1000));
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + (s % 60) + ' s';
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + (m % 60) + ' min';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }
  function fmtTime(ms) {
    const n = num(ms);
    if (n === null) return '—';
    const d = new Date(n);
    return isNaN(d.getTime()) ? '—' : d.toLocaleString();
  }
  /** "12 s ago" with the absolute time as a tooltip (our own formatting, no server text). */
  function ago(ms) {
    const n = num(ms);
    const s = el('span', 'ago', n === null ? '—' : fmtSpan(Date.now() - n) + ' ago');
    if (n !== null) s.setAttribute('title', fmtTime(n));
    return s;
  }
  /** Object entries as "key value · key value" (keys are server text too: rendered as text). */
  function counts(obj) {
    if (!obj || typeof obj !== 'object') return '—';
    return Object.keys(obj).map((k) => k + ' ' + str(obj[k])).join(' · ') || '—';
  }
  function arr(v) { return Array.isArray(v) ? v : []; }

  function viewEl() { return document.getElementById('view'); }

  /** Remembers which <details> are open across re-renders (keys live in JS only). */
  function detailsKeeper() {
    const open = new Set();
    return function details(key, summary, ...kids) {
      const d = el('details', null, el('summary', null, summary), ...kids);
      if (open.has(key)) d.open = true;
      d.addEventListener('toggle', () => { if (d.open) open.add(key); else open.delete(key); });
      return d;
    };
  }

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message, auth) { super(message); this.status = status; this.auth = !!auth; }
  }

  async function readJson(res) {
    if (res.status === 204) return null;
    const text = await res.text();
    if (!text) return null;
    try { return JSON.parse(text); } catch (e) { return null; }
  }

  function errText(data, res) {
    return data && typeof data.error === 'string' ? data.error : 'HTTP ' + res.status;
  }

  /** fetch + JSON; a 401 shows the login screen (unless opts.noAuthRedirect). */
  async function api(path, opts) {
    opts = opts || {};
    const method = opts.method || 'GET';
    const init = { method, credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'application/json' } };
    if (method !== 'GET') {
      init.headers['Content-Type'] = 'application/json';
      if (state.session && typeof state.session.csrf === 'string') init.headers['X-CSRF-Token'] = state.session.csrf;
      init.body = JSON.stringify(opts.body || {});
    }
    let res;
    try { res = await fetch(path, init); } catch (e) { throw new ApiError(0, 'network error — is the server running?'); }
    const data = await readJson(res);
    if (res.status === 401) {
      if (!opts.noAuthRedirect) showLogin();
      throw new ApiError(401, errText(data, res), true);
    }
    if (!res.ok) throw new ApiError(res.status, errText(data, res));
    return data;
  }

  function post(path, body) { return api(path, { method: 'POST', body: body || {} }); }

  // ---------------------------------------------------------------- login / session

  function showLogin(message) {
    stopEvents();
    state.session = null;
    state.view = null;
    state.gen++;
    document.getElementById('top').hidden = true;
    if (state.screen === 'login') { if (message) setLoginError(message); return; }
    state.screen = 'login';
    document.title = 'codemode console — log in';

    const name = el('input');
    name.name = 'name';
    name.type = 'text';
    name.required = true;
    name.setAttribute('autocomplete', 'username');
    name.setAttribute('autocapitalize', 'none');
    name.setAttribute('spellcheck', 'false');
    const token = el('input');
    token.name = 'token';
    token.type = 'password';
    token.required = true;
    token.setAttribute('autocomplete', 'current-password');
    const submit = el('button', 'btn btn-primary', 'Log in');
    submit.type = 'submit';
    const error = el('p', 'error');
    error.id = 'login-error';
    error.setAttribute('role', 'alert');

    const form = el('form', 'login',
      el('h1', null, 'codemode console'),
      el('label', null, el('span', null, 'Operator'), name),
      el('label', null, el('span', null, 'Token'), token),
      submit, error);
    form.id = 'login';
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      error.textContent = '';
      submit.disabled = true;
      try {
        let res;
        try {
          res = await fetch(API + '/login', {
            method: 'POST', credentials: 'same-origin', cache: 'no-store',
            headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
            body: JSON.stringify({ name: name.value.trim(), token: token.value }),
          });
        } catch (e) { setLoginError('network error — is the server running?'); return; }
        const data = await readJson(res);
        if (!res.ok || !data) { token.value = ''; setLoginError(errText(data, res)); return; }
        await startApp({ operator: data.operator, csrf: data.csrf });
      } finally { submit.disabled = false; }
    });
    append(clear(viewEl()), [form]);
    name.focus();
    if (message) setLoginError(message);
  }

  function setLoginError(msg) {
    const e = document.getElementById('login-error');
    if (e) e.textContent = visible(msg);
  }

  async function startApp(session) {
    state.session = session;
    // After a login, the session call adds replica/store/fleet (and confirms the cookie works).
    if (!('replica' in session)) try {
      const s = await api(API + '/session', { noAuthRedirect: true });
      if (s && typeof s === 'object') state.session = Object.assign({}, session, s);
    } catch (e) {
      if (e.auth) { showLogin('the login did not stick (are cookies blocked?)'); return; }
    }
    state.screen = 'app';
    document.getElementById('top').hidden = false;
    document.getElementById('operator').textContent = visible(str(state.session.operator));
    const info = [];
    if (typeof state.session.replica === 'string') info.push('replica ' + state.session.replica);
    if (typeof state.session.store === 'string') info.push(state.session.store);
    if (state.session.fleet === true) info.push('fleet');
    document.getElementById('replica-info').textContent = visible(info.join(' · '));
    startEvents();
    api(API + '/overview').then((o) => { if (o) setBadges(o.approvals, o.serversDown); }).catch(() => {});
    renderRoute();
  }

  async function logout() {
    try { await post(API + '/logout', {}); } catch (e) { /* show the login screen anyway */ }
    showLogin();
  }

  function showFatal(err) {
    const retry = button('Retry', 'btn', bootSession);
    append(clear(viewEl()), [el('p', 'error', 'The console could not start: ', err.message), retry]);
  }

  async function bootSession() {
    try {
      const s = await api(API + '/session', { noAuthRedirect: true });
      await startApp(s || {});
    } catch (e) {
      if (e.status === 401) showLogin(); else showFatal(e);
    }
  }

  // ---------------------------------------------------------------- header, live events

  function setBadges(approvals, serversDown) {
    const a = num(approvals);
    if (a !== null) {
      const b = document.getElementById('approvals-count');
      b.textContent = String(a);
      b.classList.toggle('badge-hot', a > 0);
    }
    const d = num(serversDown);
    if (d !== null) {
      const b = document.getElementById('servers-down');
      b.textContent = String(d);
      b.hidden = d <= 0;
    }
  }

  function setLive(on) {
    const s = document.getElementById('live-status');
    s.textContent = on ? 'live' : 'offline';
    s.className = 'live ' + (on ? 'live-on' : 'live-off');
  }

  function startEvents() {
    stopEvents();
    if (typeof EventSource !== 'function') return;
    const es = new EventSource(API + '/events');
    state.es = es;
    es.addEventListener('open', () => { if (state.es === es) setLive(true); });
    es.addEventListener('tick', (ev) => { if (state.es === es) onTick(ev); });
    es.addEventListener('error', () => {
      if (state.es !== es) return;
      setLive(false);
      // The browser retries by itself unless the stream failed hard (e.g. a 401).
      if (es.readyState === EventSource.CLOSED) { es.close(); state.es = null; retryEvents(); }
    });
  }

  function retryEvents() {
    clearTimeout(state.esRetry);
    state.esRetry = setTimeout(async () => {
      if (state.screen !== 'app') return;
      try {
        const s = await api(API + '/session');        // a 401 here shows the login screen
        if (s && typeof s.csrf === 'string' && state.session) state.session.csrf = s.csrf;
        startEvents();
      } catch (e) { if (!e.auth) retryEvents(); }
    }, 3000);
  }

  function stopEvents() {
    clearTimeout(state.esRetry);
    clearTimeout(state.refreshTimer);
    state.refreshTimer = null;
    if (state.es) { state.es.close(); state.es = null; }
    setLive(false);
  }

  function onTick(ev) {
    let t;
    try { t = JSON.parse(ev.data); } catch (e) { return; }
    if (!t || typeof t !== 'object') return;
    setLive(true);
    setBadges(t.approvals, t.serversDown);
    state.ticks.push(t);
    if (state.ticks.length > MAX_TICKS) state.ticks.splice(0, state.ticks.length - MAX_TICKS);
    drawCharts();
    scheduleRefresh();
  }

  /** Refreshes the view from the API at most once per second. */
  function scheduleRefresh() {
    if (state.refreshTimer) return;
    const wait = Math.max(0, 1000 - (Date.now() - state.lastRefresh));
    state.refreshTimer = setTimeout(() => { state.refreshTimer = null; refreshView(false); }, wait);
  }

  // ---------------------------------------------------------------- routing

  function parseRoute() {
    const h = location.hash || '';
    if (h === '' || h === '#' || h === '#/' || h === '#/runs') return { name: 'runs' };
    const m = /^#\/runs\/(.+)$/.exec(h);
    if (m) {
      let id = m[1];
      try { id = decodeURIComponent(id); } catch (e) { /* keep as is; it fails validation */ }
      return { name: 'run', id };
    }
    if (h === '#/approvals') return { name: 'approvals' };
    if (h === '#/servers') return { name: 'servers' };
    if (h === '#/fleet') return { name: 'fleet' };
    return { name: 'runs' };
  }

  const VIEWS = { runs: runsView, run: runView, approvals: approvalsView, servers: serversView, fleet: fleetView };
  const TITLES = { runs: 'Runs', run: 'Run', approvals: 'Approvals', servers: 'Servers', fleet: 'Fleet' };

  function renderRoute() {
    if (state.screen !== 'app') return;
    const route = parseRoute();
    state.gen++;
    state.armedAbort = null;
    const navName = route.name === 'run' ? 'runs' : route.name;
    for (const a of document.querySelectorAll('nav a[data-nav]')) {
      a.classList.toggle('active', a.getAttribute('data-nav') === navName);
    }
    document.title = 'codemode console — ' + TITLES[route.name];
    const root = clear(viewEl());
    state.view = VIEWS[route.name](root, route);
    refreshView(true);
  }

  /** True when a re-render would disturb the user (typing, or selecting text in the view). */
  function userBusy() {
    if (state.view && state.view.busy && state.view.busy()) return true;
    const sel = window.getSelection ? window.getSelection() : null;
    return !!(sel && !sel.isCollapsed && sel.anchorNode && viewEl().contains(sel.anchorNode));
  }

  async function refreshView(force) {
    const v = state.view, gen = state.gen;
    if (!v || state.screen !== 'app') return;
    if (!force && userBusy()) return;
    if (state.inflight === gen) { if (force) state.again = true; return; }
    state.inflight = gen;
    state.again = false;
    state.lastRefresh = Date.now();
    try {
      await v.refresh(gen);
      if (gen === state.gen) showViewError(null);
    } catch (e) {
      if (!e.auth && gen === state.gen) showViewError(e);
    } finally {
      if (state.inflight === gen) state.inflight = -1;
      if (state.again && gen === state.gen) { state.again = false; refreshView(true); }
    }
  }

  function viewErrorEl() {
    const e = el('p', 'error view-error');
    e.id = 'view-error';
    e.setAttribute('role', 'alert');
    e.hidden = true;
    return e;
  }
  function showViewError(err) {
    const e = document.getElementById('view-error');
    if (!e) return;
    e.hidden = !err;
    e.textContent = err ? visible(err.message) : '';
  }
  function actionErrorEl() {
    const e = el('p', 'error action-error');
    e.id = 'action-error';
    e.setAttribute('role', 'alert');
    e.hidden = true;
    return e;
  }
  function showActionError(msg) {
    const e = document.getElementById('action-error');
    if (!e) return;
    e.hidden = !msg;
    e.textContent = msg ? visible(msg) : '';
  }

  // ---------------------------------------------------------------- runs view

  function runsView(root) {
    const f = state.filters;
    const status = el('select');
    status.id = 'filter-status';
    status.name = 'status';
    for (const s of [''].concat(RUN_STATUSES)) {
      const o = el('option', null, s || 'all');
      o.value = s;
      status.appendChild(o);
    }
    status.value = f.status;
    const scope = filterInput('filter-scope', 'scope', 'scope', f.scope);
    const tool = filterInput('filter-tool', 'tool', 'tool id', f.tool);
    const applyBtn = el('button', 'btn', 'Apply');
    applyBtn.type = 'submit';
    const form = el('form', 'filters',
      el('label', null, el('span', null, 'Status'), status),
      el('label', null, el('span', null, 'Scope'), scope),
      el('label', null, el('span', null, 'Tool'), tool),
      applyBtn);

    let next = null, extraPages = false;
    // Applied on change and on Enter/Apply; an unchanged filter only reloads to drop extra pages.
    function apply() {
      const nf = { status: status.value, scope: scope.value.trim(), tool: tool.value.trim() };
      const same = nf.status === state.filters.status && nf.scope === state.filters.scope && nf.tool === state.filters.tool;
      if (same && !extraPages) return;
      state.filters = nf;
      extraPages = false;
      refreshView(true);
    }
    form.addEventListener('submit', (ev) => { ev.preventDefault(); apply(); });
    for (const c of [status, scope, tool]) c.addEventListener('change', apply);

    const overview = el('p', 'overview');
    overview.id = 'overview';
    const scopes = el('div', 'scopes');
    scopes.id = 'scopes';
    const t = table('runs', 'runs-table', ['Status', 'Run', 'Scope', 'Tools', 'Calls', 'Updated', 'Source']);
    const more = button('More', 'btn', async () => {
      if (next === null) return;
      const gen = state.gen;
      more.disabled = true;
      try {
        const data = await api(runsUrl(next));
        if (gen !== state.gen) return;
        extraPages = true;                       // keep the pages loaded: no auto refresh of the table
        addRows(data);
      } catch (e) { if (!e.auth) showViewError(e); } finally { more.disabled = false; }
    });
    more.id = 'runs-more';
    more.hidden = true;

    function addRows(data) {
      const runs = arr(data && data.runs);
      for (const r of runs) if (r && typeof r === 'object') t.body.appendChild(runRow(r));
      if (!t.body.firstChild) emptyRow(t.body, 7, 'No runs match.');
      next = data && data.next !== undefined && data.next !== null ? str(data.next) : null;
      more.hidden = next === null;
    }

    append(root, [el('div', 'view-head', el('h1', null, 'Runs')), viewErrorEl(), overview, scopes, form,
      el('div', 'table-wrap', t.table), more]);

    return {
      async refresh(gen) {
        const [ov, runs] = await Promise.all([api(API + '/overview'), extraPages ? null : api(runsUrl(null))]);
        if (gen !== state.gen) return;
        renderOverview(ov, overview, scopes);
        if (runs) { clear(t.body); addRows(runs); }
      },
    };
  }

  function filterInput(id, name, placeholder, value) {
    const i = el('input');
    i.id = id;
    i.name = name;
    i.type = 'search';
    i.placeholder = placeholder;
    i.value = value;
    i.setAttribute('autocomplete', 'off');
    i.setAttribute('spellcheck', 'false');
    return i;
  }

  function runsUrl(cursor) {
    const q = new URLSearchParams();
    const f = state.filters;
    if (f.status) q.set('status', f.status);
    if (f.scope) q.set('scope', f.scope);
    if (f.tool) q.set('tool', f.tool);
    if (cursor !== null) q.set('cursor', cursor);  // opaque, URL-encoded, same-origin API only
    const qs = q.toString();
    return API + '/runs' + (qs ? '?' + qs : '');
  }

  function renderOverview(ov, overview, scopes) {
    if (!ov || typeof ov !== 'object') return;
    setBadges(ov.approvals, ov.serversDown);
    overview.textContent = visible(counts(ov.runs));
    clear(scopes);
    for (const s of arr(ov.scopes)) {
      if (!s || typeof s !== 'object') continue;
      const used = num(s.suspended), cap = num(s.cap);
      const meter = el('meter');
      if (used !== null && cap !== null && cap > 0) {
        meter.setAttribute('min', '0');
        meter.setAttribute('max', String(cap));
        meter.setAttribute('value', String(Math.min(used, cap)));
        meter.setAttribute('high', String(cap * 0.8));
      }
      scopes.appendChild(el('div', 'scope-row' + (used !== null && cap !== null && used >= cap ? ' scope-full' : ''),
        el('code', 'scope-name', str(s.scope)), meter,
        el('span', 'scope-count', fmtNum(used) + ' / ' + fmtNum(cap) + ' suspended')));
    }
  }

  function runRow(r) {
    const tr = el('tr');
    if (typeof r.runId === 'string') tr.setAttribute('data-run-id', r.runId);
    const calls = fmtNum(r.calls) + ' calls' + (num(r.parked) ? ' · ' + r.parked + ' parked' : '');
    append(tr, [
      td('status', 'Status', pill(r.status), r.task === true ? el('span', 'tag', 'task') : null),
      td('run', 'Run', runLink(r.runId)),
      td('scope', 'Scope', str(r.scope)),
      td('tools', 'Tools', toolList(r.tools)),
      td('calls', 'Calls', calls),
      td('updated', 'Updated', ago(r.updatedAtMs)),
      td('preview', 'Source', el('code', null, str(r.sourcePreview))),
    ]);
    return tr;
  }

  function toolList(tools) {
    const list = arr(tools);
    if (!list.length) return '—';
    return el('ul', 'tool-list', list.map((x) => el('li', null, el('code', null, str(x)))));
  }

  // ---------------------------------------------------------------- run view

  function runView(root, route) {
    const id = route.id;
    append(root, [el('p', 'crumbs', routeLink('#/runs', '← Runs'))]);
    if (!validRunId(id)) {
      append(root, [el('p', 'error', 'Not a run id: ', id)]);
      return { refresh: async () => {} };
    }
    const body = el('div', 'run-body');
    append(root, [viewErrorEl(), actionErrorEl(), body]);
    const details = detailsKeeper();
    let settled = false;
    return {
      async refresh(gen) {
        if (settled) return;                       // a settled run does not change any more
        const r = await api(API + '/runs/' + encodeURIComponent(id));
        if (gen !== state.gen) return;
        if (!r || typeof r !== 'object') throw new ApiError(0, 'empty answer');
        clear(body);
        renderRun(body, r, id, details);
        settled = !ACTIVE.includes(r.status);
      },
    };
  }

  function renderRun(body, r, id, details) {
    const runId = el('code', 'run-id', str(r.runId));
    runId.id = 'run-id';
    const status = pill(r.status);
    status.id = 'run-status';
    const head = el('div', 'view-head', el('h1', null, 'Run ', runId), status);

    // Abort: a two-step button, only while the run can still be aborted.
    if (ACTIVE.includes(r.status)) {
      const armed = state.armedAbort === id;
      const abort = button('Abort run…', 'btn btn-danger-quiet');
      abort.id = 'abort';
      const confirm = button('Really abort', 'btn btn-danger');
      confirm.id = 'abort-confirm';
      const cancel = button('Cancel', 'btn btn-quiet');
      abort.hidden = armed;
      confirm.hidden = cancel.hidden = !armed;
      abort.addEventListener('click', () => {
        state.armedAbort = id;
        abort.hidden = true;
        confirm.hidden = cancel.hidden = false;
        confirm.focus();
      });
      cancel.addEventListener('click', () => {
        state.armedAbort = null;
        abort.hidden = false;
        confirm.hidden = cancel.hidden = true;
      });
      confirm.addEventListener('click', async () => {
        confirm.disabled = cancel.disabled = true;
        showActionError(null);
        try {
          await post(API + '/runs/' + encodeURIComponent(id) + '/abort', {});
        } catch (e) {
          if (e.auth) return;
          showActionError('abort failed: ' + e.message);
        }
        state.armedAbort = null;
        refreshView(true);
      });
      head.appendChild(el('div', 'actions', abort, confirm, cancel));
    }
    body.appendChild(head);

    const snap = el('dd', null, fmtBytes(r.snapshotBytes) + ' · store ' + str(r.store));
    snap.id = 'run-snapshot';
    const meta = el('dl', 'meta',
      el('dt', null, 'Scope'), el('dd', null, el('code', null, str(r.scope))),
      el('dt', null, 'Replica'), el('dd', null, str(r.replica)),
      el('dt', null, 'Language'), el('dd', null, str(r.language)),
      el('dt', null, 'Started'), el('dd', null, fmtTime(r.startedAtMs)),
      el('dt', null, 'Updated'), el('dd', null, ago(r.updatedAtMs)),
      el('dt', null, 'Expires'), el('dd', null, fmtTime(r.expiresAtMs)),
      el('dt', null, 'Snapshot'), snap);
    body.appendChild(meta);

    if (r.error !== undefined && r.error !== null) {
      const e = r.error;
      const text = typeof e === 'object' ? str(e.code) + ': ' + str(e.message) : str(e);
      const p = el('p', 'error run-error', text);
      p.id = 'run-error';
      body.appendChild(p);
    }
    if (r.result !== undefined && r.result !== null) {
      const p = pre('json', pretty(r.result));
      p.id = 'run-result';
      body.appendChild(el('section', null, el('h2', null, 'Result'), p));
    }

    const calls = arr(r.calls).filter((c) => c && typeof c === 'object');
    body.appendChild(el('section', null, el('h2', null, 'Source'), sourceBlock(r.source, calls)));
    body.appendChild(el('section', null, el('h2', null, 'Calls (' + calls.length + ')'), callsTable(calls)));

    const traj = arr(r.trajectory);
    const tp = pre('json trajectory', traj.map((x) => str(x)).join('\n'));
    tp.id = 'run-trajectory';
    const summary = 'Trajectory (' + traj.length + ' records' + (r.truncated === true ? ', older records dropped' : '') + ')';
    body.appendChild(el('section', null, details('trajectory', summary, tp)));
  }

  /** The source, one span.line per line (gutter from data-line via CSS); call lines marked. */
  function sourceBlock(source, calls) {
    const byLine = new Map();
    for (const c of calls) {
      if (Number.isSafeInteger(c.line) && c.line > 0 && Number.isSafeInteger(c.requestId)) {
        if (!byLine.has(c.line)) byLine.set(c.line, []);
        byLine.get(c.line).push(c.requestId);
      }
    }
    const p = el('pre', 'source');
    p.id = 'run-source';
    const lines = (typeof source === 'string' ? source : '').split(/\r?\n/);
    lines.forEach((text, i) => {
      const line = el('span', 'line');
      line.setAttribute('data-line', String(i + 1));
      const code = el('span', 'code');
      code.textContent = visible(text, true);
      line.appendChild(code);
      const ids = byLine.get(i + 1);
      if (ids) {
        line.classList.add('call-line');
        const marker = el('span', 'call-marker', ids.map((n) => '#' + n).join(' '));
        marker.setAttribute('title', 'request ids of the calls made on this line');
        line.appendChild(marker);
      }
      p.appendChild(line);
    });
    return p;
  }

  function callsTable(calls) {
    const t = table('run-calls', 'calls-table', ['#', 'Tool', 'Status', 'Line', 'Started', 'Duration', 'Input', 'Output', 'Decided by']);
    for (const c of calls) {
      const tr = el('tr');
      tr.setAttribute('data-request-id', str(c.requestId));
      const st = str(c.status);
      const out = c.error !== undefined && c.error !== null
        ? pre('json out-error', typeof c.error === 'string' ? c.error : pretty(c.error))
        : (c.result !== undefined && (c.result !== null || st === 'completed') ? pre('json', pretty(c.result)) : '—');
      append(tr, [
        td('request', '#', str(c.requestId)),
        td('tool', 'Tool', el('code', null, str(c.toolId))),
        td('status', 'Status', el('span', CALL_STATUSES.includes(st) ? 'cstat cstat-' + st : 'cstat', st)),
        td('line', 'Line', Number.isSafeInteger(c.line) ? String(c.line) : 'unknown'),
        td('started', 'Started', fmtTime(c.startedAtMs)),
        td('duration', 'Duration', fmtMs(c.durationMs)),
        td('input', 'Input', pre('json', pretty(c.input))),
        td('output', 'Output', out),
        td('decided', 'Decided by', c.decidedBy === undefined || c.decidedBy === null ? '—' : str(c.decidedBy)),
      ]);
      t.body.appendChild(tr);
    }
    if (!calls.length) emptyRow(t.body, 9, 'No tool calls yet.');
    return el('div', 'table-wrap', t.table);
  }

  // ---------------------------------------------------------------- approvals view

  function approvalsView(root) {
    const list = el('div', 'approvals');
    list.id = 'approvals';
    append(root, [el('div', 'view-head', el('h1', null, 'Approvals')), viewErrorEl(), actionErrorEl(), list]);
    const drafts = new Map();        // approval key → deny reason being typed (kept across refreshes)
    let focused = null;              // approval key whose reason input had the focus

    function item(a) {
      const okRun = validRunId(a.runId);
      const okReq = Number.isSafeInteger(a.requestId) && a.requestId >= 0;
      const key = okRun && okReq ? a.runId + '/' + a.requestId : null;
      const card = el('article', 'approval');
      if (key) card.setAttribute('data-approval', key);
      const line = Number.isSafeInteger(a.cellLine) ? 'line ' + a.cellLine : 'line unknown';
      append(card, [
        el('div', 'approval-head', el('code', 'tool', str(a.toolId)),
          el('span', 'waited', 'waiting ', el('span', 'waiting', fmtSpan(a.waitingMs)))),
        el('div', 'approval-meta',
          runLink(a.runId), el('span', 'req', ' · request #' + str(a.requestId) + ' · '),
          el('span', 'cell-line', line)),
        el('div', 'approval-scope', 'scope ', el('code', 'scope', str(a.scope))),
        el('p', 'reason', str(a.reason)),
        pre('json input', a.input !== undefined ? pretty(a.input) : str(a.inputPreview)),
      ]);
      if (!key) {
        card.appendChild(el('p', 'error', 'malformed run or request id: this call cannot be decided here'));
        return card;
      }
      // Decided, not applied yet: the run's next `wait` runs or refuses the call.
      if (a.decidedBy !== undefined && a.decidedBy !== null) {
        card.appendChild(el('p', 'decided-by', 'decided: ' + str(a.decidedBy) + ' — applied at the run\'s next wait'));
        return card;
      }
      const reason = el('input', 'deny-reason');
      reason.type = 'text';
      reason.placeholder = 'reason (sent with a denial)';
      reason.setAttribute('aria-label', 'reason for denying');
      reason.setAttribute('autocomplete', 'off');
      reason.value = drafts.get(key) || '';
      reason.addEventListener('input', () => drafts.set(key, reason.value));
      reason.addEventListener('focus', () => { focused = key; });
      reason.addEventListener('blur', () => { if (focused === key) focused = null; });
      const approve = button('Approve', 'btn btn-primary approve');
      const deny = button('Deny', 'btn btn-danger deny');
      const decide = async (body) => {
        approve.disabled = deny.disabled = true;
        showActionError(null);
        try {
          await post(API + '/approvals/' + encodeURIComponent(a.runId) + '/' + a.requestId, body);
          drafts.delete(key);
        } catch (e) {
          if (e.auth) return;
          showActionError(key + ': ' + e.message);
          approve.disabled = deny.disabled = false;
        }
        refreshView(true);
      };
      approve.addEventListener('click', () => decide({ decision: 'approve' }));
      deny.addEventListener('click', () => decide({ decision: 'deny', reason: reason.value }));
      card.appendChild(el('div', 'decide', reason, el('div', 'decide-buttons', approve, deny)));
      if (focused === key) setTimeout(() => reason.focus(), 0);
      return card;
    }

    return {
      busy() {
        const a = document.activeElement;
        return !!(a && a.classList && a.classList.contains('deny-reason') && list.contains(a));
      },
      async refresh(gen) {
        const data = await api(API + '/approvals');
        if (gen !== state.gen) return;
        const items = arr(data && data.approvals).filter((a) => a && typeof a === 'object');
        setBadges(items.length, null);
        const keepFocus = focused;
        clear(list);
        focused = keepFocus;
        if (!items.length) {
          const e = el('p', 'empty', 'No calls are waiting for approval.');
          e.id = 'approvals-empty';
          list.appendChild(e);
          return;
        }
        for (const a of items) list.appendChild(item(a));
      },
    };
  }

  // ---------------------------------------------------------------- servers view

  function serversView(root) {
    const t = table('servers', 'servers-table', ['Name', 'Replica', 'State', 'Error', 'Tools', 'Restarts', 'Learned types']);
    append(root, [el('div', 'view-head', el('h1', null, 'Servers')), viewErrorEl(), el('div', 'table-wrap', t.table)]);
    const details = detailsKeeper();
    return {
      async refresh(gen) {
        const data = await api(API + '/servers');
        if (gen !== state.gen) return;
        const servers = arr(data && data.servers).filter((s) => s && typeof s === 'object');
        clear(t.body);
        for (const s of servers) t.body.appendChild(serverRow(s, details));
        if (!servers.length) emptyRow(t.body, 7, 'No upstream servers configured.');
      },
    };
  }

  function serverRow(s, details) {
    const tr = el('tr');
    tr.setAttribute('data-server', str(s.name));
    const st = str(s.state);
    const key = str(s.name) + '\u0000' + str(s.replica);

    const restarts = arr(s.restarts).filter((x) => x && typeof x === 'object');
    const rcell = td('restarts', 'Restarts', el('span', 'count', String(restarts.length)));
    if (restarts.length) {
      const shown = restarts.slice(-20).reverse();   // newest first, bounded
      rcell.appendChild(el('ul', 'restart-list', shown.map((x) =>
        el('li', null, el('span', 'when', fmtTime(x.atMs)), ' — ', str(x.reason)))));
      if (restarts.length > shown.length) rcell.appendChild(el('span', 'muted', '(' + (restarts.length - shown.length) + ' older)'));
    }

    const learned = arr(s.learnedTypes).filter((x) => x && typeof x === 'object');
    const lcell = td('learned', 'Learned types', el('span', 'count', String(learned.length)));
    if (learned.length) {
      lcell.appendChild(details(key + '\u0000learned', 'types',
        el('ul', 'learned-list', learned.map((x) =>
          el('li', null, el('code', 'tool-id', str(x.toolId)), pre('type', str(x.type)))))));
    }

    const tools = fmtNum(s.tools) + (num(s.filtered) ? ' (' + s.filtered + ' filtered)' : '');
    append(tr, [
      td('name', 'Name', str(s.name)),
      td('replica', 'Replica', str(s.replica)),
      td(SERVER_STATES.includes(st) ? 'state state-' + st : 'state', 'State', st),
      td('error', 'Error', s.error === null || s.error === undefined ? '—' : str(s.error)),
      td('tools', 'Tools', tools),
      rcell,
      lcell,
    ]);
    return tr;
  }

  // ---------------------------------------------------------------- fleet view & charts

  function fleetView(root) {
    const meta = el('p', 'muted fleet-meta');
    const totals = el('p', 'totals');
    totals.id = 'fleet-totals';
    const cells = chartSvg('chart-cells', 'cells per second');
    const lat = chartSvg('chart-latency', 'cell latency p50 and p99 in milliseconds');
    const charts = el('div', 'charts',
      el('figure', 'chart', cells, el('figcaption', null, 'cells / s (last 60 s)')),
      el('figure', 'chart', lat, el('figcaption', null, 'latency ms: ',
        el('span', 'key key-a', 'p50'), ' ', el('span', 'key key-b', 'p99'))));
    const t = table('replicas', 'replicas-table', ['Replica', 'Address', 'Alive', 'Reported', 'Runs held', 'Store latency', 'Counters']);
    append(root, [el('div', 'view-head', el('h1', null, 'Fleet')), viewErrorEl(), meta, totals, charts,
      el('div', 'table-wrap', t.table)]);
    drawCharts();
    const details = detailsKeeper();
    return {
      async refresh(gen) {
        const data = await api(API + '/fleet');
        if (gen !== state.gen || !data || typeof data !== 'object') return;
        meta.textContent = visible('store ' + str(data.store) + ' · ' + (data.fleet === true ? 'fleet mode' : 'single replica'));
        const l = data.latency && typeof data.latency === 'object' ? data.latency : {};
        totals.textContent = visible(counts(data.totals) + ' · latency p50 ' + fmtMs(l.p50Ms) + ', p99 ' +
          fmtMs(l.p99Ms) + ' (' + fmtNum(l.count) + ' cells)');
        const reps = arr(data.replicas).filter((x) => x && typeof x === 'object');
        clear(t.body);
        for (const r of reps) t.body.appendChild(replicaRow(r, details));
        if (!reps.length) emptyRow(t.body, 7, 'No replicas reported.');
      },
    };
  }

  function replicaRow(r, details) {
    const tr = el('tr', r.self === true ? 'self' : null);
    tr.setAttribute('data-replica', str(r.id));
    const held = arr(r.runsHeld);
    const hcell = td('held', 'Runs held', el('span', 'count', String(held.length)));
    if (held.length) {
      const links = el('ul', 'held-list', held.map((id) => el('li', null, runLink(id))));
      hcell.appendChild(held.length > 5 ? details(str(r.id) + '\u0000held', 'ids', links) : links);
    }
    append(tr, [
      td('id', 'Replica', str(r.id)),
      td('addr', 'Address', str(r.addr), r.self === true ? el('span', 'muted', ' (this replica)') : null),
      td(r.alive === true ? 'alive alive-yes' : 'alive alive-no', 'Alive', r.alive === true ? 'yes' : 'no'),
      td('reported', 'Reported', ago(r.reportedAtMs)),
      hcell,
      td('latency', 'Store latency', fmtMs(r.storeLatencyMs)),
      td('counters', 'Counters', counts(r.counters)),
    ]);
    return tr;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const CW = 300, CH = 100, CTOP = 20, CBOT = 4;

  /** An SVG element; attribute names are constants, values are numbers/classes of our own. */
  function svgEl(tag, attrs) {
    const n = document.createElementNS(SVG_NS, tag);
    for (const k of Object.keys(attrs || {})) n.setAttribute(k, String(attrs[k]));
    return n;
  }

  function chartSvg(id, label) {
    const s = svgEl('svg', { viewBox: '0 0 ' + CW + ' ' + CH, class: 'chart-svg', role: 'img', 'aria-label': label });
    s.id = id;
    return s;
  }

  function round(v) {
    if (Number.isInteger(v)) return String(v);
    return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  /** Redraws both charts (if the fleet view shows them) from the kept ticks. */
  function drawCharts() {
    const cells = document.getElementById('chart-cells');
    const lat = document.getElementById('chart-latency');
    const t = state.ticks;
    if (cells) {
      const rates = [];
      for (let i = 1; i < t.length; i++) {
        const c0 = num(t[i - 1].totals && t[i - 1].totals.cells), c1 = num(t[i].totals && t[i].totals.cells);
        const dt = (num(t[i].atMs) || 0) - (num(t[i - 1].atMs) || 0);
        rates.push(c0 === null || c1 === null || dt <= 0 ? null : Math.max(0, (c1 - c0) / (dt / 1000)));
      }
      const last = rates.length ? rates[rates.length - 1] : null;
      drawChart(cells, [{ values: rates, cls: 'series-a' }], last === null ? 'no data yet' : round(last) + ' cells/s', '/s');
    }
    if (lat) {
      const p50 = t.map((x) => num(x.latency && x.latency.p50Ms));
      const p99 = t.map((x) => num(x.latency && x.latency.p99Ms));
      const a = p50.length ? p50[p50.length - 1] : null, b = p99.length ? p99[p99.length - 1] : null;
      const seen = p50.some((v) => v !== null) || p99.some((v) => v !== null);
      const label = a === null && b === null ? (seen ? 'no calls in the last second' : 'no data yet')
        : 'p50 ' + (a === null ? '—' : round(a)) + ' ms · p99 ' + (b === null ? '—' : round(b)) + ' ms';
      drawChart(lat, [{ values: p50, cls: 'series-a' }, { values: p99, cls: 'series-b' }], label, 'ms');
    }
  }

  function drawChart(svg, series, label, unit) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    let max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    max = max <= 0 ? 1 : niceCeil(max);
    const y = (v) => (CH - CBOT) - (v / max) * (CH - CBOT - CTOP);
    const step = CW / (MAX_TICKS - 1);
    svg.appendChild(svgEl('line', { x1: 0, y1: CH - CBOT, x2: CW, y2: CH - CBOT, class: 'axis' }));
    svg.appendChild(svgEl('line', { x1: 0, y1: CTOP, x2: CW, y2: CTOP, class: 'grid' }));
    const top = svgEl('text', { x: CW - 2, y: CTOP - 4, class: 'chart-max', 'text-anchor': 'end' });
    top.textContent = round(max) + ' ' + unit;
    svg.appendChild(top);
    for (const s of series) {
      const n = s.values.length;
      const pts = [];
      s.values.forEach((v, i) => {
        if (v === null) return;
        pts.push((CW - (n - 1 - i) * step).toFixed(1) + ',' + y(v).toFixed(1));
      });
      if (pts.length === 1) pts.push(pts[0]);
      if (pts.length) svg.appendChild(svgEl('polyline', { points: pts.join(' '), class: 'series ' + s.cls }));
    }
    const latest = svgEl('text', { x: 2, y: 13, class: 'chart-latest' });
    latest.textContent = label;
    svg.appendChild(latest);
  }

  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // ---------------------------------------------------------------- start

  function init() {
    window.addEventListener('hashchange', () => { if (state.screen === 'app') renderRoute(); });
    document.getElementById('logout').addEventListener('click', logout);
    bootSession();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
