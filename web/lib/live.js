// Live updates (docs/web.md "Live updates"): one EventSource for the whole page, shared by the
// views; on(type, fn) returns the function that unsubscribes.

const handlers = new Map();
let source = null;
let stateFn = null;

function dispatch(type, ev) {
  const fns = handlers.get(type);
  if (!fns) return;
  let data = null;
  try {
    data = ev.data ? JSON.parse(ev.data) : null;
  } catch {
    return;
  }
  for (const fn of fns) fn(data, ev);
}

function attach(type) {
  if (source) source.addEventListener(type, (ev) => dispatch(type, ev));
}

export function start(onState) {
  stop();
  stateFn = onState || null;
  source = new EventSource('/api/live');
  source.onopen = () => stateFn && stateFn('open');
  source.onerror = () => stateFn && stateFn(source && source.readyState === 2 ? 'closed' : 'retry');
  for (const type of handlers.keys()) attach(type);
}

// After the stream gave up: whether the server refuses a new one (too many open: 429/503, with
// why and when to try again, docs/web.md). null: it would open (the probe's own is dropped).
export async function probe() {
  const ctl = new AbortController();
  try {
    const res = await fetch('/api/live', { signal: ctl.signal, credentials: 'same-origin' });
    if (res.ok) {
      ctl.abort();
      return null;
    }
    let body = {};
    try {
      body = await res.json();
    } catch {
      /* not JSON: the status says enough */
    }
    const ra = Number(res.headers.get('Retry-After') || body.retry_after || 0);
    return { status: res.status, error: body.error || `HTTP ${res.status}`, retryAfter: ra > 0 ? ra : 30 };
  } catch {
    return null;
  }
}

export function stop() {
  if (source) source.close();
  source = null;
}

export function on(type, fn) {
  if (!handlers.has(type)) {
    handlers.set(type, new Set());
    attach(type);
  }
  handlers.get(type).add(fn);
  return () => handlers.get(type).delete(fn);
}
