// Services (#/services): the list with live throughput, connections and blocks (the /api/live
// stats), each service's traffic over the last hour (stats --history, so it shows what came
// before the page was opened), add, start/stop, remove with undo; #/services/ID: one service's settings (edit),
// its filters (views/filters.js) and its health log (views/svclog.js).
import * as api from '../lib/api.js';
import * as live from '../lib/live.js';
import { h, clear, toast, confirmBox, fmtBytes, fmtCount, fmtTime } from '../lib/ui.js';
import { sparkline, bucket } from '../lib/chart.js';
import { filtersPanel } from './filters.js';
import { healthPanel } from './svclog.js';

const HISTORY = 60; // samples of throughput kept for a sparkline (one a second at most)

// Per-service rates from successive stats messages; kept across views so that a return to the
// list shows the trend at once.
const rates = new Map(); // id -> {last: {t, bytes, packets}, bps: [..]}

export function noteStats(stats) {
  const now = performance.now() / 1000;
  for (const st of stats || []) {
    let r = rates.get(st.id);
    if (!r) rates.set(st.id, (r = { last: null, bps: [] }));
    if (r.last && now > r.last.t) {
      const bps = Math.max(0, (st.bytes - r.last.bytes) / (now - r.last.t));
      r.bps.push(bps);
      if (r.bps.length > HISTORY) r.bps.shift();
    }
    r.last = { t: now, bytes: st.bytes, packets: st.packets, stat: st };
  }
}

// Bytes per minute (both ways) of each service over the last hour, from stats --history:
// id -> [60 counts], oldest first. Fetched when the list is drawn and once a minute.
const hour = new Map();

async function loadHour() {
  const doc = await api.get('stats', { history: true, since: '1h' });
  const until = Math.ceil((doc.until || Date.now() / 1000) / 60) * 60;
  const from = until - 3600;
  hour.clear();
  for (const s of doc.series || []) {
    if (s.obj !== 'service' || (s.kind !== 'bytes_c2s' && s.kind !== 'bytes_s2c')) continue;
    const v = bucket(s.minutes, from, 60, 60);
    const had = hour.get(s.id);
    hour.set(s.id, had ? had.map((x, i) => x + v[i]) : v);
  }
}

function hourCell(s) {
  const v = hour.get(s.id) || [];
  const total = v.reduce((a, b) => a + b, 0);
  return [
    `${fmtBytes(total)} `,
    sparkline(v, { width: 80, height: 18, label: 'bytes per minute, last hour', total, title: `${fmtBytes(total)} in the last hour, per minute` }),
  ];
}

// After a removal: a toast offering the undo; after(): what to draw again once undone.
export async function withUndo(promise, text, after = () => {}) {
  await promise;
  toast(text, 'ok', {
    label: 'Undo',
    test: 'undo',
    fn: async () => {
      try {
        await api.call('undo');
        toast('Undone.', 'ok');
        after();
      } catch (e) {
        toast(`Undo failed: ${e.message}`, 'error');
      }
    },
  });
}

function errToast(what) {
  return (e) => toast(`${what}: ${e.message}`, 'error');
}

function addrText(s) {
  if (Array.isArray(s.addrs) && s.addrs.length) return s.addrs.map((a) => a.text).join(' ');
  return `${s.ip || '*'}:${s.port}`;
}

// ADDR:PORT as service set takes it (--ip ADDR|CIDR|any --port N), or null (an interface).
function ipPort(text) {
  let m = /^\[([0-9a-fA-F:./]+)\]:(\d+)$/.exec(text);
  if (!m) m = /^([0-9./]+|\*):(\d+)$/.exec(text);
  if (!m) return null;
  return { ip: m[1] === '*' ? 'any' : m[1], port: Number(m[2]) };
}

function readFile(input, b64 = false) {
  const f = input.files && input.files[0];
  if (!f) return Promise.resolve(null);
  return f.arrayBuffer().then((buf) => {
    const bytes = new Uint8Array(buf);
    if (!b64) return new TextDecoder().decode(bytes);
    let bin = '';
    bytes.forEach((b) => (bin += String.fromCharCode(b)));
    return btoa(bin);
  });
}

// The add / edit form. svc: the service to edit, or null to add one. done(svc) after success.
function serviceForm(svc, done) {
  const edit = !!svc;
  const f = {
    name: h('input', { name: 'name', required: true, value: svc ? svc.name : '', 'data-test': 'svc-name', autocomplete: 'off' }),
    proto: h(
      'select',
      { name: 'proto', 'data-test': 'svc-proto' },
      ['tcp', 'udp', 'http'].map((p) => h('option', { value: p, selected: svc && svc.proto === p }, p)),
    ),
    port: h('input', { name: 'port', type: 'number', min: 1, max: 65535, value: svc ? svc.port || '' : '', 'data-test': 'svc-port' }),
    addrs: h('input', {
      name: 'addrs',
      placeholder: '10.60.1.2:80 [fd00::2]:80 eth1:80',
      value: svc && Array.isArray(svc.addrs) ? svc.addrs.map((a) => a.text).join(' ') : '',
      'data-test': 'svc-addrs',
    }),
    layer: h(
      'select',
      { name: 'layer', 'data-test': 'svc-layer' },
      ['nfqueue', 'proxy', 'external'].map((l) => h('option', { value: l, selected: svc && svc.layer === l }, l)),
    ),
    to: h('input', { name: 'to', placeholder: '127.0.0.1:9000', value: svc && svc.to ? svc.to : '', 'data-test': 'svc-to' }),
    cert: h('input', { type: 'file', name: 'tls_cert', accept: '.pem,.crt', 'data-test': 'svc-tls-cert' }),
    key: h('input', { type: 'file', name: 'tls_key', accept: '.pem,.key', 'data-test': 'svc-tls-key' }),
    failOpen: h('input', { type: 'checkbox', name: 'fail_open', checked: svc && svc.fail_open, 'data-test': 'svc-fail-open' }),
    capture: h('input', { type: 'checkbox', name: 'capture', checked: svc ? svc.capture !== false : true, 'data-test': 'svc-capture' }),
    noTls: h('input', { type: 'checkbox', name: 'no_tls', 'data-test': 'svc-no-tls' }),
    // its own limits (issue 27, proxy layer): service set --max-conns --over-limit --first-byte-timeout
    maxConns: h('input', { type: 'number', min: 0, name: 'max_conns', placeholder: '0: none', value: svc && svc.limits ? svc.limits.max_conns || '' : '', 'data-test': 'svc-max-conns' }),
    overLimit: h(
      'select',
      { name: 'over_limit', 'data-test': 'svc-over-limit' },
      ['refuse', 'forward'].map((o) => h('option', { value: o, selected: svc && svc.limits && svc.limits.over_limit === o }, o)),
    ),
    firstByte: h('input', { type: 'number', min: 0, name: 'first_byte_timeout', placeholder: "0: the proxy's", value: svc && svc.limits ? svc.limits.first_byte_timeout || '' : '', 'data-test': 'svc-first-byte' }),
  };
  const lim = svc && svc.limits;
  const hits = lim
    ? h(
        'p',
        { class: 'muted', 'data-test': 'svc-limit-hits' },
        lim.hits ? `At its connection limit ${lim.hits} time(s): first ${fmtTime(lim.first_hit)}, last ${fmtTime(lim.last_hit)}.` : 'Never at its connection limit.',
      )
    : null;
  const err = h('p', { class: 'error', role: 'alert', 'data-test': 'svc-error' });
  const submit = h('button', { type: 'submit', class: 'primary', 'data-test': edit ? 'svc-save' : 'svc-add' }, edit ? 'Save' : 'Add service');
  const form = h(
    'form',
    {
      class: 'card',
      'data-test': edit ? 'svc-edit-form' : 'svc-add-form',
      onsubmit: async (e) => {
        e.preventDefault();
        err.textContent = '';
        submit.disabled = true;
        try {
          const p = {};
          const addrs = f.addrs.value.split(/[\s,]+/).filter(Boolean);
          // an edit sends what changed only (service set leaves the rest as it is)
          if (f.port.value && (!edit || Number(f.port.value) !== svc.port)) p.port = Number(f.port.value);
          if (f.layer.value === 'external' && f.to.value && (!edit || f.to.value !== svc.to)) p.to = f.to.value;
          const cert = await readFile(f.cert);
          const key = await readFile(f.key);
          if (!!cert !== !!key) throw new Error('a TLS certificate and its key go together');
          if (cert) {
            p.tls_cert = cert;
            p.tls_key = key;
          }
          if (!edit || f.capture.checked !== (svc.capture !== false)) p.capture = f.capture.checked ? 'on' : 'off';
          let out;
          if (!edit) {
            p.name = f.name.value.trim();
            p.proto = f.proto.value;
            p.layer = f.layer.value;
            if (addrs.length) p.addr = addrs;
            if (f.failOpen.checked) p.fail_open = true;
            out = await api.call('service/add', p);
            toast(`Service ${out.name} added.`, 'ok');
          } else {
            p.service = String(svc.id);
            if (f.proto.value !== svc.proto) p.proto = f.proto.value;
            if (f.layer.value !== svc.layer) p.layer = f.layer.value;
            if (f.failOpen.checked !== !!svc.fail_open) p.fail_open = f.failOpen.checked ? 'on' : 'off';
            const l = svc.limits || {};
            if (Number(f.maxConns.value || 0) !== (l.max_conns || 0)) p.max_conns = Number(f.maxConns.value || 0);
            if (f.overLimit.value !== (l.over_limit || 'refuse')) p.over_limit = f.overLimit.value;
            if (Number(f.firstByte.value || 0) !== (l.first_byte_timeout || 0)) p.first_byte_timeout = Number(f.firstByte.value || 0);
            if (f.noTls.checked) {
              delete p.tls_cert;
              delete p.tls_key;
              p.no_tls = true;
            }
            const had = new Set((svc.addrs || []).map((a) => a.text));
            const want = new Set(addrs);
            const adds = addrs.filter((a) => !had.has(a));
            const rms = [...had].filter((a) => !want.has(a));
            // one address for another (*:80 -> 10.0.0.2:80): service set --ip --port, as a
            // service needs an address and two that overlap cannot be there at once
            const one = had.size === 1 && adds.length === 1 && rms.length === 1 ? ipPort(adds[0]) : null;
            if (one) {
              p.ip = one.ip;
              p.port = one.port;
            }
            // nothing but the name or the addresses changed: no service set (it needs an option)
            out = Object.keys(p).length > 1 ? await api.call('service/set', p) : svc;
            if (!one && addrs.length) {
              // removals first while another address stays, then the additions, then the rest
              const left = [...rms];
              let n = had.size;
              while (left.length && n > 1) {
                out = await api.call('service/addr/rm', { service: String(svc.id), addr: left.shift() });
                n--;
              }
              for (const a of adds) out = await api.call('service/addr/add', { service: String(svc.id), addr: a });
              for (const a of left) out = await api.call('service/addr/rm', { service: String(svc.id), addr: a });
            }
            const name = f.name.value.trim();
            if (name && name !== svc.name) out = await api.call('service/rename', { service: String(svc.id), newname: name });
            toast(`Service ${out.name} saved.`, 'ok');
          }
          done(out);
        } catch (x) {
          err.textContent = x.message;
        } finally {
          submit.disabled = false;
        }
      },
    },
    h('h2', {}, edit ? `Settings of ${svc.name}` : 'Add a service'),
    h(
      'div',
      { class: 'form-grid' },
      h('label', {}, 'Name', f.name),
      h('label', {}, 'Protocol', f.proto),
      h('label', {}, 'Port', f.port),
      h('label', { class: 'wide' }, 'Addresses (ADDR[:PORT], space separated; empty: every address)', f.addrs),
      h('label', {}, 'Layer', f.layer),
      h('label', {}, 'External proxy (layer external)', f.to),
      h('label', {}, 'TLS certificate (PEM, proxy layer)', f.cert),
      h('label', {}, 'TLS key (PEM)', f.key),
      h('label', { class: 'check' }, f.failOpen, 'Fail open (pass traffic when the worker cannot take it)'),
      h('label', { class: 'check' }, f.capture, 'Capture the last connections'),
      edit && svc.tls ? h('label', { class: 'check' }, f.noTls, 'Stop terminating TLS') : null,
      edit ? h('label', {}, 'Max connections (proxy layer)', f.maxConns) : null,
      edit ? h('label', {}, 'Past the limit', f.overLimit) : null,
      edit ? h('label', {}, 'First-byte timeout, s (proxy layer)', f.firstByte) : null,
    ),
    edit ? hits : null,
    h('div', { class: 'form-buttons' }, submit),
    err,
  );
  if (edit) f.proto.disabled = false;
  return form;
}

// The live cells of a service's row (throughput, connections, blocks), from the latest stats.
function liveCells(s) {
  const r = rates.get(s.id);
  const st = r && r.last ? r.last.stat : null;
  // stats come only when a counter changed: none for a while means no traffic
  const fresh = r && r.last && performance.now() / 1000 - r.last.t < 3;
  const bps = fresh && r.bps.length ? r.bps[r.bps.length - 1] : 0;
  return {
    rate: [`${fmtBytes(bps)}/s`, ' ', sparkline(r ? r.bps : [], { width: 80, height: 18, label: 'throughput' })],
    conns: st ? fmtCount(st.flows_active) : '-',
    blocked: fmtCount(st ? st.blocked : s.blocked),
  };
}

// Update the live cells in place: the row (and a button focused in it) stays.
function refreshRow(tr, s) {
  const c = liveCells(s);
  for (const k of ['rate', 'conns', 'blocked']) {
    const td = tr.querySelector(`[data-test=svc-${k}]`);
    if (td) {
      clear(td);
      td.append(...[c[k]].flat());
    }
  }
}

function serviceRow(s, reload) {
  const c = liveCells(s);
  const active = s.status === 'active';
  return h(
    'tr',
    { class: active ? '' : 'inactive', 'data-test': `svc-row-${s.name}`, 'data-id': s.id },
    h('td', {}, h('a', { href: `#/services/${s.id}`, 'data-test': 'svc-link' }, s.name)),
    h('td', { class: 'hide-phone' }, s.proto),
    h('td', { class: 'mono hide-phone' }, addrText(s)),
    h('td', { class: 'hide-phone' }, s.layer, s.tls ? ' + TLS' : ''),
    h('td', {}, h('span', { class: `badge ${active ? 'active' : 'stopped'}`, 'data-test': 'svc-status' }, s.status)),
    h('td', { class: 'num', 'data-test': 'svc-rate' }, c.rate),
    h('td', { class: 'num', 'data-test': 'svc-conns' }, c.conns),
    h('td', { class: 'num hide-phone', 'data-test': 'svc-hour' }, hourCell(s)),
    h('td', { class: 'num hide-phone' }, fmtCount(s.filters)),
    h('td', { class: 'num', 'data-test': 'svc-blocked' }, c.blocked),
    h(
      'td',
      { class: 'actions' },
      h(
        'button',
        {
          class: 'small',
          'data-test': active ? 'svc-stop' : 'svc-start',
          onclick: () =>
            api
              .call(active ? 'service/stop' : 'service/start', { service: String(s.id) })
              .then(reload, errToast(active ? 'Stop' : 'Start')),
        },
        active ? 'Stop' : 'Start',
      ),
      h('a', { href: `#/services/${s.id}`, class: 'button small', 'data-test': 'svc-edit' }, 'Edit'),
      h(
        'button',
        {
          class: 'small danger',
          'data-test': 'svc-rm',
          onclick: async () => {
            if (!(await confirmBox(`Remove the service ${s.name} and its ${s.filters} filters?`, 'Remove'))) return;
            withUndo(api.call('service/rm', { service: String(s.id) }), `Service ${s.name} removed.`, reload)
              .then(reload)
              .catch(errToast('Remove'));
          },
        },
        'Remove',
      ),
    ),
  );
}

function renderList(root) {
  const body = h('tbody', { 'data-test': 'svc-rows' });
  const empty = h('p', { class: 'muted', hidden: true }, 'No service yet: add one below.');
  let services = [];
  // A teammate's change redraws the rows: a control focused in one gets the focus back in
  // its redrawn row, so a live update never takes the keyboard away.
  const draw = () => {
    const f = document.activeElement;
    const row = f && body.contains(f) ? f.closest('tr[data-id]') : null;
    const keep = row && f.dataset.test ? [row.dataset.id, f.dataset.test] : null;
    clear(body);
    services.forEach((s) => body.append(serviceRow(s, load)));
    empty.hidden = services.length > 0;
    if (keep) {
      const again = body.querySelector(`tr[data-id="${keep[0]}"] [data-test="${keep[1]}"]`);
      if (again) again.focus();
    }
  };
  const load = () =>
    Promise.all([api.get('service/list'), loadHour().catch(() => {})]).then(([l]) => {
      services = l;
      draw();
    }, errToast('Services'));
  const addCard = h('div', { hidden: true });
  const toggle = h(
    'button',
    {
      class: 'primary',
      'data-test': 'svc-add-open',
      'aria-expanded': 'false',
      onclick: () => {
        addCard.hidden = !addCard.hidden;
        toggle.setAttribute('aria-expanded', String(!addCard.hidden));
        if (!addCard.hidden) addCard.querySelector('input').focus();
      },
    },
    'Add a service',
  );
  const added = (svc) => {
    addCard.hidden = true;
    load();
    location.hash = `#/services/${svc.id}`;
  };
  addCard.append(serviceForm(null, added));
  root.append(
    h('div', { class: 'toolbar' }, h('h1', {}, 'Services'), h('span', { class: 'spacer' }), toggle),
    addCard,
    h(
      'div',
      { class: 'card table-wrap' },
      h(
        'table',
        { class: 'stack-phone', 'data-test': 'svc-table' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            h('th', {}, 'Service'),
            h('th', { class: 'hide-phone' }, 'Proto'),
            h('th', { class: 'hide-phone' }, 'Addresses'),
            h('th', { class: 'hide-phone' }, 'Layer'),
            h('th', {}, 'Status'),
            h('th', { class: 'num' }, 'Throughput'),
            h('th', { class: 'num' }, 'Conns'),
            h('th', { class: 'num hide-phone' }, 'Last hour'),
            h('th', { class: 'num hide-phone' }, 'Filters'),
            h('th', { class: 'num' }, 'Blocks'),
            h('th', {}, ''),
          ),
        ),
        body,
      ),
      empty,
    ),
  );
  load();
  // the last hour's traffic moves on a minute at a time
  const hourTimer = setInterval(
    () =>
      loadHour().then(() => {
        for (const sv of services) {
          const td = body.querySelector(`tr[data-id="${sv.id}"] [data-test=svc-hour]`);
          if (td) {
            clear(td);
            td.append(...hourCell(sv));
          }
        }
      }, () => {}),
    60000,
  );
  const offs = [
    live.on('stats', (st) => {
      noteStats(st);
      for (const sv of services) {
        const tr = body.querySelector(`tr[data-id="${sv.id}"]`);
        if (tr) refreshRow(tr, sv);
      }
    }),
    live.on('change', (c) => {
      if (c && (c.what === 'services' || c.what === 'filters')) load();
    }),
  ];
  return () => {
    clearInterval(hourTimer);
    offs.forEach((o) => o());
  };
}

function renderOne(root, id) {
  const head = h('div', { class: 'toolbar' });
  const settings = h('div');
  const filters = h('div');
  const health = h('div');
  root.append(h('p', {}, h('a', { href: '#/services' }, '← Services')), head, filters, health, settings);
  let panelCleanup = null;
  let healthCleanup = null;
  let svc = null;
  let formDirty = false;
  const draw = () => {
    clear(head);
    const active = svc.status === 'active';
    head.append(
      h('h1', { 'data-test': 'svc-title' }, svc.name),
      h('span', { class: `badge ${active ? 'active' : 'stopped'}`, 'data-test': 'svc-status' }, svc.status),
      h('span', { class: 'muted mono' }, `${svc.proto} ${addrText(svc)} · ${svc.layer}${svc.tls ? ' + TLS' : ''}`),
      h('span', { class: 'spacer' }),
      h(
        'a',
        {
          href: api.downloadUrl('capture', { service: String(svc.id), pcap: true }),
          download: `fgex-${svc.name}.pcap`,
          'data-test': 'svc-pcap',
        },
        'Capture (pcap)',
      ),
      h(
        'button',
        {
          'data-test': active ? 'svc-stop' : 'svc-start',
          onclick: () =>
            api.call(active ? 'service/stop' : 'service/start', { service: String(svc.id) }).then((s) => {
              svc = s;
              draw();
            }, errToast('Start/stop')),
        },
        active ? 'Stop' : 'Start',
      ),
      h(
        'button',
        {
          class: 'danger',
          'data-test': 'svc-rm',
          onclick: async () => {
            if (!(await confirmBox(`Remove the service ${svc.name} and its filters?`, 'Remove'))) return;
            const back = () => (location.hash = `#/services/${svc.id}`);
            withUndo(api.call('service/rm', { service: String(svc.id) }), `Service ${svc.name} removed.`, back)
              .then(() => (location.hash = '#/services'))
              .catch(errToast('Remove'));
          },
        },
        'Remove',
      ),
    );
    // a teammate's change redraws the form, unless this user is editing it
    if (formDirty) return;
    clear(settings);
    const form = serviceForm(svc, (s) => {
      svc = s;
      formDirty = false;
      draw();
    });
    form.addEventListener('input', () => (formDirty = true));
    form.addEventListener('change', () => (formDirty = true));
    settings.append(form);
  };
  const load = () =>
    api.get('service/show', { service: String(id) }).then(
      (s) => {
        const first = !svc;
        svc = s;
        draw();
        if (first) {
          const p = filtersPanel(svc);
          filters.append(p.el);
          panelCleanup = p.cleanup;
          const hp = healthPanel(svc);
          health.append(hp.el);
          healthCleanup = hp.cleanup;
        }
      },
      (e) => {
        clear(head);
        head.append(h('p', { class: 'error' }, `Service ${id}: ${e.message}`));
      },
    );
  load();
  const off = live.on('change', (c) => {
    if (c && c.what === 'services') load();
  });
  return () => {
    off();
    if (panelCleanup) panelCleanup();
    if (healthCleanup) healthCleanup();
  };
}

export default {
  id: 'services',
  title: 'Services',
  render(root, args) {
    return args[0] ? renderOne(root, args[0]) : renderList(root);
  },
};
