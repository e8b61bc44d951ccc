// Events (#/events): a live feed (new events prepended as /api/live brings them) with hex/ascii
// excerpts, the top attackers (events --top src), a blocked connection's capture (events show)
// and its pcap download.
import * as api from '../lib/api.js';
import * as live from '../lib/live.js';
import { h, clear, toast, fmtTime, fmtAgo, fieldBytes, hexdump } from '../lib/ui.js';
import { excerptView } from './filters.js';

const KEEP = 200; // events shown in the feed

function captureView(doc) {
  const c = doc.capture;
  if (!c) return h('p', { class: 'muted', 'data-test': 'capture-none' }, 'No capture of this connection (capture off, or it has rotated out).');
  const side = (dir) => {
    const bytes = fieldBytes(c, dir);
    const seen = c[`seen_${dir}`];
    if (!bytes.length) return h('p', { class: 'muted', 'data-test': `capture-${dir}` }, `${dir === 'c2s' ? 'client → server' : 'server → client'}: nothing sent`);
    return h(
      'div',
      { 'data-test': `capture-${dir}` },
      h('h4', {}, `${dir === 'c2s' ? 'client → server' : 'server → client'}: ${bytes.length} bytes kept of ${seen} seen`),
      h('div', { class: 'hexdump' }, hexdump(bytes).map((l) => h('div', {}, l.text))),
    );
  };
  return h('div', { class: 'capture', 'data-test': 'capture' }, side('c2s'), side('s2c'));
}

// What judged the event: a filter by its id, a script's block or failure by its function.
export function eventJudge(ev) {
  if (ev.filter_id) return `filter ${ev.filter_id}`;
  if (ev.script_function || ev.script_kind) return `script ${ev.script_kind ? `${ev.script_kind} ` : ''}${ev.script_function || ''}`.trim();
  return '';
}

function eventItem(ev, fresh) {
  const more = h('div');
  const blocked = ev.action === 'block';
  // src is the connection's client, of an s2c block too: the capture is found by it
  const pcap = api.downloadUrl('capture', {
    service: String(ev.service_id),
    pcap: true,
    blocked: blocked || undefined,
    src: ev.src,
    filter: ev.filter_id || undefined,
  });
  return h(
    'li',
    { class: fresh ? 'new' : '', 'data-test': 'event', 'data-seq': ev.seq, 'data-action': ev.action },
    h(
      'div',
      { class: 'meta' },
      h('span', { class: 'mono muted', 'data-test': 'event-seq', title: 'events show SEQ' }, `#${ev.seq}`),
      h('span', { class: `badge ${ev.action}` }, ev.action),
      h('strong', {}, ev.service),
      h('span', { 'data-test': 'event-judge' }, eventJudge(ev)),
      ev.label ? h('span', { class: 'badge' }, ev.label) : null,
      // a script call's failure carries no connection: no addresses rather than ":0 → :0"
      ev.src ? h('span', { class: 'mono', 'data-test': 'event-flow' }, `${ev.src}:${ev.sport} → ${ev.dst}:${ev.dport}`) : null,
      // an HTTP/2 block names its stream (its capture is that exchange's, rendered as HTTP/1.1)
      h('span', { class: 'muted', 'data-test': 'event-dir' }, `${ev.proto} ${ev.dir}${ev.h2_stream ? ` h2#${ev.h2_stream}` : ''}${ev.edge ? ` ${ev.edge}` : ''}`),
      h('span', { class: 'muted', title: fmtTime(ev.time_ns || ev.time) }, fmtAgo(ev.time_ns || ev.time)),
      h(
        'button',
        {
          class: 'small',
          'data-test': 'event-show',
          onclick: async () => {
            clear(more);
            try {
              const judge = eventJudge(ev);
              more.append(
                judge ? h('p', { class: 'muted', 'data-test': 'event-detail-judge' }, `${ev.action === 'block' ? 'blocked by' : 'from'} ${judge}`) : '',
                captureView(await api.get('events/show', { seq: ev.seq })),
              );
            } catch (e) {
              more.append(h('p', { class: 'error' }, e.message));
            }
          },
        },
        'Capture',
      ),
      ev.src ? h('a', { href: pcap, download: `fgex-${ev.service}-${ev.seq}.pcap`, title: `pcap of this connection${eventJudge(ev) ? ` (${eventJudge(ev)})` : ''}`, 'data-test': 'event-pcap' }, 'pcap') : null,
    ),
    excerptView(ev),
    more,
  );
}

export default {
  id: 'events',
  title: 'Events',
  render(root) {
    const feed = h('ul', { class: 'feed', 'data-test': 'feed' });
    const top = h('tbody', { 'data-test': 'top-rows' });
    const since = h(
      'select',
      { 'aria-label': 'top attackers since', 'data-test': 'top-since', onchange: () => loadTop() },
      ['15m', '1h', '6h', '1d', '2d'].map((s) => h('option', { value: s, selected: s === '1h' }, `last ${s}`)),
    );
    const count = h('span', { class: 'muted', 'data-test': 'feed-count' });
    const seen = new Set();
    const add = (ev, fresh) => {
      if (!ev || seen.has(ev.seq)) return;
      seen.add(ev.seq);
      const li = eventItem(ev, fresh);
      // newest first: an event older than the first shown goes after it
      const first = feed.firstElementChild;
      if (fresh || !first) feed.prepend(li);
      else feed.append(li);
      while (feed.children.length > KEEP) feed.lastElementChild.remove();
      count.textContent = `${feed.children.length} shown`;
    };
    let topTimer = null;
    const loadTop = () =>
      api.get('events', { top: 'src', since: since.value }).then(
        (r) => {
          clear(top);
          if (!r.rows.length) top.append(h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No blocks.')));
          for (const row of r.rows.slice(0, 30)) {
            top.append(
              h(
                'tr',
                { 'data-test': 'top-row' },
                h('td', { class: 'mono' }, row.src),
                h('td', { 'data-test': 'top-judge' }, row.service, ' ', h('span', { class: 'muted' }, row.filter_id ? `#${row.filter_id}` : row.script_function ? `script ${row.script_function}` : 'script'), row.label ? ` ${row.label}` : ''),
                h('td', { class: 'num' }, row.blocks),
                h('td', { class: 'muted' }, fmtAgo(row.last_ns || row.last)),
              ),
            );
          }
        },
        (e) => toast(`Top attackers: ${e.message}`, 'error'),
      );
    root.append(
      h('div', { class: 'toolbar' }, h('h1', {}, 'Events'), count),
      h(
        'div',
        { class: 'grid-2' },
        h('section', { class: 'card' }, h('h2', {}, 'Live feed'), feed),
        h(
          'section',
          { class: 'card' },
          h('div', { class: 'toolbar' }, h('h2', {}, 'Top attackers'), h('span', { class: 'spacer' }), since),
          h(
            'div',
            { class: 'table-wrap' },
            h('table', { 'data-test': 'top' }, h('thead', {}, h('tr', {}, h('th', {}, 'Source'), h('th', {}, 'Filter'), h('th', { class: 'num' }, 'Blocks'), h('th', {}, 'Last'))), top),
          ),
        ),
      ),
    );
    api.get('events', { limit: 100 }).then(
      (l) => {
        l.sort((a, b) => b.seq - a.seq).forEach((ev) => add(ev, false));
        if (!l.length) count.textContent = 'no event yet';
      },
      (e) => toast(`Events: ${e.message}`, 'error'),
    );
    loadTop();
    const off = live.on('event', (ev) => {
      add(ev, true);
      clearTimeout(topTimer);
      topTimer = setTimeout(loadTop, 1000);
    });
    return () => {
      off();
      clearTimeout(topTimer);
    };
  },
};
