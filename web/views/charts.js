// Charts (#/charts, #/charts/48h): blocks per minute of each service and each of its filters
// over the last hour (or per half hour over 48 hours), and each service's traffic in the same
// bins (bytes each way, connections), from stats --history, drawn by lib/chart.js.
import * as api from '../lib/api.js';
import { h, clear, toast, fieldBytes, fmtBytes, fmtCount } from '../lib/ui.js';
import { lineChart, bucket } from '../lib/chart.js';
import { showBytes } from './filters.js';

const RANGES = {
  '1h': { span: 3600, bin: 60, unit: 'minute' },
  '48h': { span: 48 * 3600, bin: 1800, unit: '30 minutes' },
};

const TRAFFIC = ['bytes_c2s', 'bytes_s2c', 'flows'];

// Each service's traffic series (bytes_c2s, bytes_s2c, flows), by service, in name order.
function trafficOf(series) {
  const by = new Map();
  for (const s of series) {
    if (s.obj !== 'service' || !TRAFFIC.includes(s.kind)) continue;
    if (!by.has(s.id)) by.set(s.id, { id: s.id, name: s.name || `#${s.id}` });
    by.get(s.id)[s.kind] = s;
  }
  return [...by.values()].sort((a, b) => a.name.localeCompare(b.name));
}

// One service's traffic: bytes each way (binary units), then connections, in the same bins.
function trafficCard(t, from, R, n) {
  const pts = (k) => bucket(t[k] ? t[k].minutes : [], from, R.bin, n);
  const bytes = [
    { name: 'client → server', values: pts('bytes_c2s') },
    { name: 'server → client', values: pts('bytes_s2c') },
  ];
  const conns = [{ name: 'connections', values: pts('flows') }];
  return h(
    'section',
    { class: 'card', 'data-test': `chart-traffic-${t.name}` },
    h('h2', {}, `${t.name}: traffic per ${R.unit}`),
    h(
      'div',
      { 'data-test': 'chart-bytes' },
      lineChart(bytes, { from, bin: R.bin, label: `${t.name} bytes per ${R.unit}`, bytes: true, fmt: fmtBytes, area: false }),
    ),
    h(
      'div',
      { class: 'chart-sub', 'data-test': 'chart-flows' },
      lineChart(conns, { from, bin: R.bin, label: `${t.name} connections per ${R.unit}`, fmt: fmtCount, height: 150 }),
    ),
  );
}

export default {
  id: 'charts',
  title: 'Charts',
  render(root, args) {
    const key = RANGES[args[0]] ? args[0] : '1h';
    const R = RANGES[key];
    const body = h('div', { 'data-test': 'charts' });
    root.append(
      h(
        'div',
        { class: 'toolbar' },
        h('h1', {}, 'Charts'),
        h('span', { class: 'muted' }, `blocks and traffic per ${R.unit}`),
        h('span', { class: 'spacer' }),
        Object.keys(RANGES).map((k) =>
          h('a', { href: `#/charts/${k}`, class: 'badge', 'aria-current': k === key ? 'page' : null, 'data-test': `range-${k}` }, `last ${k}`),
        ),
      ),
      body,
    );
    const load = () =>
      api.get('stats', { history: true, since: key }).then(
        (doc) => {
          clear(body);
          const n = Math.round(R.span / R.bin);
          const until = Math.ceil((doc.until || Date.now() / 1000) / R.bin) * R.bin;
          const from = until - n * R.bin;
          const series = doc.series || [];
          const blocked = series.filter((s) => s.kind === 'blocked' || s.kind === 'matched');
          const svcs = blocked.filter((s) => s.obj === 'service');
          const traffic = trafficOf(series);
          if (!svcs.length && !traffic.length) {
            body.append(h('p', { class: 'muted card', 'data-test': 'charts-empty' }, 'No block and no traffic in this period.'));
            return;
          }
          const all = svcs.filter((s) => s.kind === 'blocked').map((s) => ({ name: s.name, values: bucket(s.minutes, from, R.bin, n) }));
          const grid = h('div', { class: 'charts-grid' });
          if (all.length) {
            grid.append(h('section', { class: 'card', 'data-test': 'chart-services' }, h('h2', {}, 'Blocks per service'), lineChart(all, { from, bin: R.bin, label: 'blocks per service' })));
          }
          for (const sv of svcs) {
            const fs = blocked.filter((s) => s.obj === 'filter' && s.service_id === sv.id && s.kind === sv.kind);
            const lines = fs.map((f) => ({ name: `#${f.id} /${showBytes(fieldBytes(f, 'regex'))}/`, values: bucket(f.minutes, from, R.bin, n) }));
            if (!lines.length) continue;
            grid.append(
              h(
                'section',
                { class: 'card', 'data-test': `chart-service-${sv.name}` },
                h('h2', {}, `${sv.name}: ${sv.kind === 'matched' ? 'log matches' : 'blocks'} per filter`),
                lineChart(lines, { from, bin: R.bin, label: `${sv.name} per filter`, area: false }),
              ),
            );
          }
          for (const t of traffic) grid.append(trafficCard(t, from, R, n));
          body.append(grid);
        },
        (e) => toast(`Charts: ${e.message}`, 'error'),
      );
    load();
    const t = setInterval(load, 30000);
    return () => clearInterval(t);
  },
};
