// Small DOM helpers shared by the views: no framework, elements built with h().

// h('button', {class: 'x', onclick: fn, 'data-test': 'add'}, 'Add'): attributes starting with
// "on" are listeners, children may be strings, nodes, arrays, null or false.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  const add = (c) => {
    if (c === undefined || c === null || c === false) return;
    if (Array.isArray(c)) c.forEach(add);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  };
  children.forEach(add);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

let toasts = null;
// action: optional {label, fn, test} shown as a button in the toast (e.g. "Undo"); the toast
// then stays longer, and goes when the button is pressed.
export function toast(text, kind = 'info', action = null) {
  if (!toasts) {
    toasts = h('div', { class: 'toasts', role: 'status', 'aria-live': 'polite' });
    document.body.append(toasts);
  }
  const t = h('div', { class: `toast toast-${kind}`, 'data-test': `toast-${kind}` }, text);
  if (action) {
    t.append(
      ' ',
      h(
        'button',
        {
          class: 'link',
          'data-test': action.test || 'toast-action',
          onclick: () => {
            t.remove();
            action.fn();
          },
        },
        action.label,
      ),
    );
  }
  toasts.append(t);
  setTimeout(() => t.remove(), action ? 15000 : kind === 'error' ? 8000 : 4000);
}

// A modal question; resolves true when confirmed. Keyboard: the focus goes into the dialog (on
// Cancel, the safe answer), Escape cancels, and the focus goes back where it was.
export function confirmBox(text, ok = 'OK') {
  return new Promise((resolve) => {
    const before = document.activeElement;
    const close = (v) => {
      back.remove();
      if (before && before.isConnected && before.focus) before.focus();
      resolve(v);
    };
    const cancel = h('button', { onclick: () => close(false), 'data-test': 'confirm-cancel' }, 'Cancel');
    const back = h(
      'div',
      {
        class: 'modal-back',
        onkeydown: (e) => {
          if (e.key === 'Escape') close(false);
        },
      },
      h(
        'div',
        { class: 'modal', role: 'dialog', 'aria-modal': 'true' },
        h('p', {}, text),
        h(
          'div',
          { class: 'modal-buttons' },
          cancel,
          h('button', { class: 'danger', onclick: () => close(true), 'data-test': 'confirm-ok' }, ok),
        ),
      ),
    );
    document.body.append(back);
    cancel.focus();
  });
}

export function fmtCount(n) {
  n = Number(n || 0);
  if (n < 10000) return String(n);
  const u = ['k', 'M', 'G', 'T'];
  let i = -1;
  while (n >= 1000 && i < u.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n.toFixed(n < 10 ? 1 : 0)}${u[i]}`;
}

export function fmtBytes(n) {
  n = Number(n || 0);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(n < 10 ? 1 : 0) : n} ${u[i]}`;
}

// A time as milliseconds: unix seconds, milliseconds when huge, nanoseconds when huger (the
// *_ns members), or a date string (fgexctl's "time" members).
export function toMs(t) {
  if (typeof t === 'string') return Date.parse(t.replace(' ', 'T'));
  if (t > 1e15) return t / 1e6;
  return t > 1e12 ? t : t * 1000;
}

export function fmtTime(t) {
  if (!t) return '-';
  const ms = toMs(t);
  return Number.isNaN(ms) ? String(t) : new Date(ms).toLocaleString();
}

export function fmtAgo(t) {
  if (!t) return '-';
  const ms = toMs(t);
  if (Number.isNaN(ms)) return String(t);
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

// A string or *_b64 member of a JSON object as bytes (docs/fgexctl.md "Bytes in JSON").
export function fieldBytes(obj, key) {
  if (obj[`${key}_b64`] !== undefined) return b64bytes(obj[`${key}_b64`]);
  return new TextEncoder().encode(obj[key] || '');
}

export function b64bytes(s) {
  const bin = atob(s || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function bytesB64(bytes) {
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

// Lines of "offset  hex bytes  ascii", 16 bytes a line; marks: [start, end) ranges to flag.
export function hexdump(bytes, marks = []) {
  const lines = [];
  for (let off = 0; off < bytes.length; off += 16) {
    const row = bytes.subarray(off, off + 16);
    let hex = '';
    let asc = '';
    row.forEach((b, i) => {
      hex += b.toString(16).padStart(2, '0') + (i === 7 ? '  ' : ' ');
      asc += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.';
    });
    const marked = marks.some(([s, e]) => off < e && off + row.length > s);
    lines.push({ text: `${off.toString(16).padStart(6, '0')}  ${hex.padEnd(49)} ${asc}`, marked });
  }
  return lines;
}
