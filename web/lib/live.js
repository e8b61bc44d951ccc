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
