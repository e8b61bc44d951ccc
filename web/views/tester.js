// The pattern tester (issue 27): several patterns against a pasted sample, text or hex. controld
// judges each pattern as `filter add` would and runs it with hyperscan (regex/match, docs/web.md),
// so what is shown is what a filter sees: each pattern's own error, or every match with its
// start and end, marked in the sample.
import { call } from '../lib/api.js';
import { h, clear, toast } from '../lib/ui.js';

// "47 45 54", "474554", "0x47,0x45" -> bytes; null when it is not hex.
export function hexBytes(s) {
  const t = String(s).replace(/0x/gi, '').replace(/[\s,:]/g, '');
  if (t.length % 2 || /[^0-9a-f]/i.test(t)) return null;
  const out = new Uint8Array(t.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(t.substr(i * 2, 2), 16);
  return out;
}

function b64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

// One byte as shown: printable ASCII as itself, the rest escaped (hex mode: two hex digits).
function shown(b, hex) {
  if (hex) return b.toString(16).padStart(2, '0') + ' ';
  if (b === 0x0a) return '\\n';
  if (b === 0x0d) return '\\r';
  if (b === 0x09) return '\\t';
  if (b >= 0x20 && b < 0x7f) return String.fromCharCode(b);
  return `\\x${b.toString(16).padStart(2, '0')}`;
}

// The sample with the bytes any match covers marked (overlapping matches merged into runs).
function marked(bytes, matches, hex) {
  const on = new Uint8Array(bytes.length);
  for (const m of matches) for (let i = m.start; i < m.end && i < bytes.length; i++) on[i] = 1;
  const pre = h('pre', { class: 'tester-sample' });
  let i = 0;
  while (i < bytes.length) {
    let j = i;
    let s = '';
    while (j < bytes.length && on[j] === on[i]) s += shown(bytes[j++], hex);
    pre.append(on[i] ? h('mark', { 'data-test': 'tester-mark', 'data-start': i, 'data-end': j }, s) : s);
    i = j;
  }
  return pre;
}

export default {
  id: 'tester',
  title: 'Patterns',
  render(root) {
    const patterns = h('textarea', {
      rows: 4,
      class: 'tester-patterns',
      spellcheck: 'false',
      placeholder: 'one pattern a line, e.g.\nevil[0-9]+\n(?i)flag\\{',
      'data-test': 'tester-patterns',
      'aria-label': 'patterns, one a line',
    });
    const sample = h('textarea', {
      rows: 6,
      class: 'tester-input',
      spellcheck: 'false',
      placeholder: 'the sample: paste a request, or its bytes as hex',
      'data-test': 'tester-sample',
      'aria-label': 'sample',
    });
    const mode = h(
      'select',
      { 'data-test': 'tester-mode', 'aria-label': 'the sample is' },
      h('option', { value: 'text' }, 'text'),
      h('option', { value: 'hex' }, 'hex'),
    );
    const proto = h(
      'select',
      { 'data-test': 'tester-proto', 'aria-label': 'judged for a service of' },
      h('option', { value: 'tcp' }, 'tcp'),
      h('option', { value: 'udp' }, 'udp'),
    );
    const nocase = h('input', { type: 'checkbox', 'data-test': 'tester-nocase' });
    const out = h('div', { 'data-test': 'tester-results' });
    const section = h('section', { class: 'uib-view', 'data-test': 'view-tester' });

    const run = async () => {
      const lines = patterns.value.split('\n').map((l) => l.replace(/\r$/, '')).filter((l) => l !== '');
      if (!lines.length) return toast('give at least one pattern', 'error');
      const hex = mode.value === 'hex';
      const bytes = hex ? hexBytes(sample.value) : new TextEncoder().encode(sample.value);
      if (!bytes) return toast('the sample is not hex (pairs of 0-9 a-f, spaces allowed)', 'error');
      delete section.dataset.done;
      let res;
      try {
        res = await call('regex/match', {
          patterns: lines.join('\n'),
          file_b64: b64(bytes),
          nocase: nocase.checked || undefined,
          proto: proto.value,
        });
      } catch (e) {
        toast(e.message, 'error');
        return;
      }
      clear(out);
      (res || []).forEach((r, i) => {
        const box = h('div', { class: 'tester-result', 'data-test': `tester-result-${i}` }, h('h3', {}, h('code', {}, r.regex)));
        if (r.error) {
          box.append(h('div', { class: 'uib-err', 'data-test': `tester-error-${i}` }, r.error));
        } else {
          const ms = r.matches || [];
          box.append(
            h(
              'p',
              { 'data-test': `tester-count-${i}` },
              `${ms.length} match${ms.length === 1 ? '' : 'es'}${r.truncated ? ' (the first 1000)' : ''}`,
              r.start_unknown ? h('span', { class: 'muted' }, ' (ends only: hyperscan cannot track its starts)') : null,
            ),
          );
          for (const w of r.warnings || []) box.append(h('p', { class: 'muted' }, `warning: ${w}`));
          if (ms.length) {
            box.append(
              h(
                'p',
                { class: 'tester-spans' },
                ms.map((m, k) => [k ? ', ' : '', h('span', { 'data-test': `tester-span-${i}`, title: 'start-end: bytes start to end-1' }, `${m.start}-${m.end}`)]),
              ),
            );
            box.append(marked(bytes, ms, hex));
          }
        }
        out.append(box);
      });
      section.dataset.done = '1';
    };

    clear(root);
    section.append(
      h('h2', {}, 'Pattern tester'),
      h('p', { class: 'muted' }, 'Every match of each pattern, as a filter would judge it (its own error if filter add would refuse it). Offsets are bytes of the sample.'),
      h('label', {}, 'Patterns', patterns),
      h('div', { class: 'uib-bar' }, h('label', {}, 'Sample is ', mode), h('label', {}, 'Judged for ', proto), h('label', {}, nocase, ' case-insensitive')),
      h('label', {}, 'Sample', sample),
      h('div', { class: 'uib-bar' }, h('button', { class: 'primary', 'data-test': 'tester-run', onclick: run }, 'Test')),
      out,
    );
    root.append(section);
    return () => {};
  },
};
