// The JSON API (docs/web.md): fgexctl's commands under /api/cmd/, the session, downloads.
// The CSRF token comes with the session and goes in a header on every request that is not a GET.

let csrf = null;
const authListeners = new Set();

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.exit = body && body.exit;
    this.body = body || {};
    // seconds to wait when locked out (429's Retry-After), else null
    this.retryAfter = null;
  }
}

// fn(false) is called when a request finds the session gone (the page shows the login).
export function onAuthLost(fn) {
  authListeners.add(fn);
  return () => authListeners.delete(fn);
}

// A session outlives a restart of controld, its CSRF key does not (a fresh one each start): a
// change refused 403 "csrf" fetches the session's new token once and is sent again.
async function request(method, path, body, retried = false) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') {
    headers['Content-Type'] = 'application/json';
    if (csrf) headers['X-CSRF-Token'] = csrf;
  }
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    body: method === 'GET' ? undefined : JSON.stringify(body || {}),
  });
  let data = null;
  const text = await res.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { error: text.trim() };
    }
  }
  if (!res.ok) {
    if (res.status === 403 && data && data.error === 'csrf' && !retried && method !== 'GET') {
      const sess = await fetch('/api/session', { headers: { Accept: 'application/json' }, credentials: 'same-origin' });
      if (sess.ok) {
        csrf = (await sess.json()).csrf;
        return request(method, path, body, true);
      }
    }
    if (res.status === 401 && path !== '/api/login') {
      csrf = null;
      for (const fn of authListeners) fn(false);
    }
    const err = new ApiError(res.status, data);
    const ra = res.headers.get('Retry-After');
    if (ra !== null && ra !== '') err.retryAfter = Number(ra);
    throw err;
  }
  return data;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, String(x)));
    else q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

// While controld compiles one change it refuses another as busy (503, body.busy): a change
// is sent again until it gets its turn, for up to BUSY_WAIT_MS, as fgexctl's --wait does.
// fn({what, secs}) is told once a change has waited BUSY_NOTE_MS, and fn(null) when it is over.
const BUSY_WAIT_MS = 30000;
const BUSY_STEP_MS = 500;
const BUSY_NOTE_MS = 1000;
const busyListeners = new Set();

export function onBusy(fn) {
  busyListeners.add(fn);
  return () => busyListeners.delete(fn);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function requestWaiting(method, path, body) {
  const t0 = Date.now();
  let noted = false;
  try {
    for (;;) {
      try {
        return await request(method, path, body);
      } catch (e) {
        if (!(e instanceof ApiError) || e.status !== 503 || !e.body.busy) throw e;
        if (Date.now() - t0 + BUSY_STEP_MS > BUSY_WAIT_MS) {
          e.message = `${e.message} (waited ${Math.round((Date.now() - t0) / 1000)} s for its turn)`;
          throw e;
        }
        if (Date.now() - t0 >= BUSY_NOTE_MS) {
          noted = true;
          for (const fn of busyListeners) fn({ what: e.body.busy_what || 'another change', secs: e.body.busy_secs || 0 });
        }
        await sleep(BUSY_STEP_MS);
      }
    }
  } finally {
    if (noted) for (const fn of busyListeners) fn(null);
  }
}

// Run the fgexctl command cmd ("service/list", "filter/add") with params (docs/web.md);
// opts.method 'GET' for a command that changes nothing. Resolves to fgexctl's --json value.
export function call(cmd, params = {}, opts = {}) {
  const method = opts.method || 'POST';
  const path = `/api/cmd/${cmd}`;
  return method === 'GET' ? request('GET', path + query(params)) : requestWaiting(method, path, params);
}

export const get = (cmd, params = {}) => call(cmd, params, { method: 'GET' });

export function downloadUrl(cmd, params = {}) {
  return `/api/cmd/${cmd}${query(params)}`;
}

export async function login(password) {
  const r = await request('POST', '/api/login', { password });
  csrf = r.csrf;
  for (const fn of authListeners) fn(true);
  return r;
}

export async function logout() {
  try {
    await request('POST', '/api/logout', {});
  } finally {
    csrf = null;
    for (const fn of authListeners) fn(false);
  }
}

// The current session, or null when there is none (the page then shows the login).
export async function session() {
  try {
    const r = await request('GET', '/api/session');
    csrf = r.csrf;
    return r;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return null;
    throw e;
  }
}
