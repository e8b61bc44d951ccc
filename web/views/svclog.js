// A service's health log (service log), for its view (#/services/ID): what happened to fgex
// itself for it, newest first — started, stopped, layer switches, addresses, fail_open, and the
// box's own entries (a worker restarted, limits hit, traffic passed unfiltered, with counts),
// marked "box". Warnings and errors stand out. Kept current by /api/live's `health` messages.
import * as api from '../lib/api.js';
import * as live from '../lib/live.js';
import { h, clear, fmtTime, fmtCount } from '../lib/ui.js';

const SHOWN = 200; // entries drawn at most

export function healthPanel(svc) {
  const body = h('tbody', { 'data-test': 'health-rows' });
  let entries = []; // oldest first
  let newest = 0;

  const row = (e) =>
    h(
      'tr',
      { class: `health-${e.level}`, 'data-test': 'health-row', 'data-kind': e.kind, 'data-level': e.level, 'data-seq': String(e.seq) },
      h('td', { class: 'muted nowrap' }, fmtTime(e.time_ns)),
      h('td', {}, h('span', { class: `badge health-${e.level}` }, e.level)),
      h('td', { class: 'mono hide-phone' }, e.box ? h('span', { class: 'muted', title: 'the whole box: every service\'s log shows it' }, 'box · ') : null, e.kind),
      h('td', { class: 'num hide-phone' }, e.count ? fmtCount(e.count) : ''),
      h('td', { 'data-test': 'health-text' }, e.box ? h('span', { class: 'muted show-phone' }, 'box · ') : null, e.text),
    );
  const draw = () => {
    clear(body);
    if (!entries.length) body.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'Nothing logged yet.')));
    for (const e of entries.slice(-SHOWN).reverse()) body.append(row(e));
  };
  const add = (e) => {
    if (!e || e.seq <= newest) return;
    if (!e.box && e.service_id !== svc.id) return;
    newest = e.seq;
    entries.push(e);
    if (entries.length > SHOWN) entries = entries.slice(-SHOWN);
    draw();
  };
  api.get('service/log', { service: String(svc.id), limit: SHOWN }).then(
    (list) => {
      // what came live meanwhile is newer: keep it after the fetched ones
      const later = entries.filter((e) => !list.some((x) => x.seq === e.seq));
      entries = [...list, ...later].sort((a, b) => a.seq - b.seq);
      newest = entries.length ? entries[entries.length - 1].seq : 0;
      draw();
    },
    (err) => {
      clear(body);
      body.append(h('tr', {}, h('td', { colspan: 5, class: 'error' }, `Health log: ${err.message}`)));
    },
  );
  draw();
  const off = live.on('health', add);
  const el = h(
    'section',
    { class: 'card', 'data-test': 'health-log' },
    h('h2', {}, 'Health log'),
    h(
      'p',
      { class: 'muted' },
      'What happened to fgex itself for this service, newest first; "box" entries concern every service.',
    ),
    h(
      'table',
      { class: 'health stack-phone' },
      h(
        'thead',
        {},
        h('tr', {}, h('th', {}, 'Time'), h('th', {}, 'Level'), h('th', { class: 'hide-phone' }, 'Kind'), h('th', { class: 'num hide-phone' }, 'Count'), h('th', {}, 'Text')),
      ),
      body,
    ),
  );
  return { el, cleanup: off };
}
