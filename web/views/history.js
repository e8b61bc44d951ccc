// The change history (fgexctl history): who changed what and when; undo and redo, with the diff
// each returns. Fetched again on every live "change".
import { call, get } from '../lib/api.js';
import { on } from '../lib/live.js';
import { h, clear, toast, fmtTime, fmtAgo, fieldBytes } from '../lib/ui.js';

const LIMIT = 200;
const OPS = { add: '+', rm: '-', change: '~', keep: '=' };

function regexText(d) {
  if (d.regex !== undefined) return d.regex;
  if (d.regex_b64 !== undefined) {
    // bytes that are not UTF-8: shown escaped, as fgexctl prints them
    let s = '';
    for (const b of fieldBytes(d, 'regex')) s += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
    return s;
  }
  return '';
}

// One DIFF object (docs/fgexctl.md "The diff") as the line fgexctl prints.
export function diffLine(d) {
  const op = OPS[d.op] || d.op;
  const id = d.id ? ` ${d.id}` : '';
  if (d.kind === 'filter') {
    const words = [d.dir, d.nocase ? 'nocase' : null, d.active === false ? 'disabled' : null].filter(Boolean).join(' ');
    return `${op} filter${id} ${d.service || ''} ${words} /${regexText(d)}/`;
  }
  return `${op} ${d.kind}${id} ${d.service || ''}${d.what ? `: ${d.what}` : ''}`;
}

export function diffView(diff, test = 'diff') {
  const rows = (diff || []).filter((d) => d.op !== 'keep');
  return h(
    'pre',
    { class: 'uib-diff', 'data-test': test },
    rows.length ? rows.map((d) => h('div', { class: `uib-diff-${d.op}` }, diffLine(d))) : h('div', { class: 'muted' }, 'no change'),
  );
}

export default {
  id: 'history',
  title: 'History',
  render(root) {
    let alive = true;
    const offs = [];
    const body = h('tbody', {});
    const result = h('div', { class: 'uib-result', 'data-test': 'history-result' });

    const reload = async () => {
      try {
        show(await get('history', { limit: LIMIT }));
      } catch (e) {
        toast(e.message, 'error');
      }
    };

    const show = (list) => {
      if (!alive) return;
      clear(body);
      const rows = (list || []).slice().reverse(); // newest first
      if (!rows.length) body.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'no change recorded yet')));
      for (const c of rows) {
        body.append(
          h(
            'tr',
            { 'data-test': `history-${c.seq}`, class: c.undone ? 'uib-off' : '' },
            h('td', { class: 'num' }, String(c.seq)),
            h('td', { title: fmtTime(c.time) }, fmtAgo(c.time)),
            h('td', {}, c.who),
            h('td', {}, h('span', { class: `pill uib-kind-${c.kind}` }, c.kind)),
            h('td', {}, h('code', {}, c.what), c.target ? h('span', { class: 'muted' }, ` (of #${c.target})`) : null),
            h('td', {}, c.undone ? h('span', { class: 'pill', 'data-test': 'history-undone' }, 'undone') : ''),
          ),
        );
      }
    };

    const act = async (what) => {
      try {
        const r = await call(what, {});
        clear(result);
        const c = r.change || {};
        result.append(
          h('p', {}, h('strong', {}, `${what === 'undo' ? 'Undo' : 'Redo'} recorded as #${c.seq}: `), h('code', {}, c.what || '')),
          diffView(r.diff, `${what}-diff`),
        );
        toast(what === 'undo' ? 'change undone' : 'change redone', 'ok');
        reload();
      } catch (e) {
        if (e.exit === 3 || e.status === 404) toast(what === 'undo' ? 'nothing to undo' : 'nothing to redo', 'info');
        else toast(e.message, 'error');
      }
    };

    clear(root);
    root.append(
      h(
        'section',
        { class: 'uib-view', 'data-test': 'view-history' },
        h('h2', {}, 'History'),
        h(
          'div',
          { class: 'uib-bar' },
          h('button', { class: 'primary', 'data-test': 'history-undo', onclick: () => act('undo') }, 'Undo the last change'),
          h('button', { 'data-test': 'history-redo', onclick: () => act('redo') }, 'Redo'),
          h('button', { 'data-test': 'history-reload', onclick: reload }, 'Reload'),
        ),
        result,
        h(
          'div',
          { class: 'uib-scroll' },
          h(
            'table',
            { class: 'uib-table', 'data-test': 'history' },
            h('thead', {}, h('tr', {}, ['#', 'When', 'Who', 'Kind', 'What', ''].map((t) => h('th', {}, t)))),
            body,
          ),
        ),
      ),
    );
    offs.push(on('change', () => reload()));
    reload();
    return () => {
      alive = false;
      offs.forEach((f) => f());
    };
  },
};
