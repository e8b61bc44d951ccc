// SVG charts drawn by fgex's own code (docs/web.md): a sparkline for table cells and a line
// chart with time axis and legend. Why not a chart library: the page takes no third-party code
// and has no build step, and these two shapes are all it draws; a library would be larger than
// the whole page and would have to be vendored or fetched.
import { h } from './ui.js';

const NS = 'http://www.w3.org/2000/svg';

function s(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A "nice" step (1, 2 or 5 times a power of ten) giving about n ticks up to max.
export function niceStep(max, n = 4) {
  if (!(max > 0)) return 1;
  const raw = max / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

// values: numbers, oldest first. Returns an <svg> of width x height.
export function sparkline(values, opts = {}) {
  const w = opts.width || 120;
  const ht = opts.height || 24;
  const svg = s('svg', { class: 'sparkline', width: w, height: ht, viewBox: `0 0 ${w} ${ht}`, role: 'img', 'aria-label': opts.label || 'trend', 'data-total': opts.total });
  if (opts.title) svg.append(s('title', {}, opts.title));
  if (!values.length) return svg;
  const max = Math.max(1e-9, ...values);
  const dx = values.length > 1 ? w / (values.length - 1) : 0;
  const pts = values.map((v, i) => [i * dx, ht - 1 - (v / max) * (ht - 3)]);
  const d = pts.map(([x, y], i) => `${i ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`).join('');
  svg.append(s('path', { class: 'area', d: `${d}L${w},${ht}L0,${ht}Z` }), s('path', { class: 'line', d }));
  return svg;
}

function fmtTick(t, spanS) {
  const d = new Date(t * 1000);
  const hm = `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  if (spanS <= 86400) return hm;
  return `${d.getDate()}/${d.getMonth() + 1} ${hm}`;
}

// Bucket (time, count) points into n bins of `bin` seconds from `from`: an array of counts.
export function bucket(points, from, bin, n) {
  const out = new Array(n).fill(0);
  for (const p of points) {
    const i = Math.floor((p.time - from) / bin);
    if (i >= 0 && i < n) out[i] += p.count;
  }
  return out;
}

// A step for a byte axis: 1, 2 or 5 times a power of ten of the binary unit (KiB, MiB, ...)
// that max is in, so that the ticks read 20 KiB, 40 KiB, not 19.5 KiB, 39.1 KiB.
export function niceByteStep(max, n = 4) {
  if (!(max > 0)) return 1;
  const u = 1024 ** Math.max(0, Math.min(4, Math.floor(Math.log(max) / Math.log(1024))));
  return niceStep(max / u, n) * u;
}

// series: [{name, values: [n bins]}], from: unix seconds of bin 0, bin: seconds a bin.
// (Colours are classes s1..s8: the CSP allows no inline style.) Returns a <figure> with the <svg> and its legend; values per bin on the y axis.
// opts.bytes: the values are bytes, the axis and the totals in binary units (opts.fmt formats
// them); each line and legend entry carries its total in data-total.
export function lineChart(series, opts) {
  const { from, bin } = opts;
  const fmt = opts.fmt || String;
  const n = series.length ? series[0].values.length : 0;
  // drawn at about its viewBox size (the cards are 400-700 px wide), so text stays readable
  const W = opts.width || 520;
  const H = opts.height || 220;
  const L = opts.bytes ? 64 : 40, R = 12, T = 10, B = 26;
  const pw = W - L - R, ph = H - T - B;
  const max = Math.max(0, ...series.flatMap((x) => x.values));
  const step = Math.max(1, opts.bytes ? niceByteStep(max || 1) : niceStep(max || 1)); // counts: whole numbers
  const top = Math.max(step, Math.ceil((max || 1) / step) * step);
  const x = (i) => L + (n > 1 ? (i / (n - 1)) * pw : pw / 2);
  const y = (v) => T + ph - (v / top) * ph;
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.label || 'chart' });
  for (let v = 0; v <= top + 1e-9; v += step) {
    svg.append(s('line', { class: v ? 'grid' : 'axis', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    svg.append(s('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, opts.fmt ? fmt(v) : Number.isInteger(v) ? v : v.toFixed(1)));
  }
  const span = n * bin;
  const ticks = span > 86400 ? 4 : 6; // day and time labels are longer
  for (let k = 0; k <= ticks; k++) {
    const i = Math.round((k / ticks) * (n - 1));
    const tx = x(i);
    svg.append(s('line', { class: 'axis', x1: tx, x2: tx, y1: T + ph, y2: T + ph + 4 }));
    svg.append(s('text', { x: tx, y: H - 8, 'text-anchor': k === 0 ? 'start' : k === ticks ? 'end' : 'middle' }, fmtTick(from + i * bin, span)));
  }
  const totals = series.map((ser) => ser.values.reduce((a, b) => a + b, 0));
  series.forEach((ser, si) => {
    const c = `s${(si % 8) + 1}`;
    const d = ser.values.map((v, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join('');
    if (si === 0 && opts.area !== false) {
      svg.append(s('path', { class: `area ${c}`, d: `${d}L${x(n - 1)},${y(0)}L${x(0)},${y(0)}Z` }));
    }
    const path = s('path', { class: `line ${c}`, d, 'data-series': ser.name, 'data-total': totals[si] });
    path.append(s('title', {}, `${ser.name}: ${fmt(totals[si])}`));
    svg.append(path);
  });
  const legend = h(
    'div',
    { class: 'legend' },
    series.map((ser, si) =>
      h(
        'span',
        { 'data-series': ser.name, 'data-total': totals[si] },
        h('span', { class: `swatch s${(si % 8) + 1}` }),
        `${ser.name} (${fmt(totals[si])})`,
      ),
    ),
  );
  return h('figure', { class: 'chart-figure' }, svg, legend);
}
