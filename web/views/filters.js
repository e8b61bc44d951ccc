// A service's filters (shown in #/services/ID): the list with enable/disable/remove (undo
// offered), add with direction, case, block/log and label, edit a regex in place (its id and
// counters kept), "test on the capture" before adding
// (the connections the regex would have blocked, with their excerpts), ruleset import/export.
import * as api from '../lib/api.js';
import * as live from '../lib/live.js';
import { h, clear, toast, confirmBox, fmtCount, fmtTime, fieldBytes, hexdump } from '../lib/ui.js';

const enc = new TextEncoder();

// A regex (bytes) for the page: printable ASCII as it is, other bytes as \xNN.
export function showBytes(bytes) {
  let out = '';
  for (const b of bytes) out += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
  return out;
}

// An excerpt (bytes) with the match end marked: ascii before, a marker, ascii after; and the
// hex dump with the line of the match's last byte marked.
export function excerptView(obj, key = 'excerpt') {
  const bytes = fieldBytes(obj, key);
  const end = Math.min(bytes.length, obj.match_end ?? bytes.length);
  const asc = (b) => Array.from(b, (c) => (c >= 0x20 && c < 0x7f ? String.fromCharCode(c) : '.')).join('');
  const lines = hexdump(bytes, end > 0 ? [[end - 1, end]] : []);
  return h(
    'div',
    { class: 'excerpt', 'data-test': 'excerpt' },
    h('div', { class: 'ascii', 'data-test': 'excerpt-ascii' }, asc(bytes.subarray(0, end)), h('mark', { title: 'the match ends here' }, '|'), asc(bytes.subarray(end))),
    h(
      'details',
      {},
      h('summary', {}, `hex (${bytes.length} bytes)`),
      h('div', { class: 'hexdump', 'data-test': 'hexdump' }, lines.map((l) => h('div', { class: l.marked ? 'marked' : '' }, l.text))),
    ),
  );
}

// The ruleset file line of a filter (docs/fgexctl.md "The ruleset file format"), as bytes.
function rulesetLine(f) {
  const words = [f.dir || 'both'];
  if (f.nocase) words.push('nocase');
  if (!f.active) words.push('disabled');
  if (f.action === 'log') words.push('log');
  if (f.label) words.push(`label="${f.label}"`);
  const head = enc.encode(`${words.join(' ')} /`);
  const re = fieldBytes(f, 'regex');
  const out = new Uint8Array(head.length + re.length + 2);
  out.set(head, 0);
  out.set(re, head.length);
  out.set(enc.encode('/\n'), head.length + re.length);
  return out;
}

function download(name, parts, type) {
  const url = URL.createObjectURL(new Blob(parts, { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function undoToast(text, after) {
  toast(text, 'ok', {
    label: 'Undo',
    test: 'undo',
    fn: () =>
      api.call('undo').then(
        () => {
          toast('Undone.', 'ok');
          after();
        },
        (e) => toast(`Undo failed: ${e.message}`, 'error'),
      ),
  });
}

function testResults(r) {
  const hits = r.hits || [];
  return h(
    'div',
    { class: 'card', 'data-test': 'test-results' },
    h(
      'p',
      { 'data-test': 'test-summary' },
      h('strong', {}, `Would have blocked ${r.would_block} of ${r.total} captured connections`),
      r.spared !== undefined ? `; it spares ${r.spared}` : '',
      '.',
    ),
    // with the game set (issue 28): the SLA question first
    r.checker_total !== undefined
      ? h(
          'p',
          { class: r.checker_broken ? 'warn' : '', 'data-test': 'test-sla' },
          h('strong', {}, `Would break ${r.checker_broken} of ${r.checker_total} connections of the game's checker`),
          `; would stop ${r.flags_out_stopped} of ${r.flags_out_total} flag-out connections.`,
        )
      : null,
    (r.warnings || []).map((w) => h('p', { class: 'warn' }, `Warning: ${w}`)),
    hits.length
      ? h(
          'ul',
          { class: 'feed', 'data-test': 'test-hits' },
          hits.map((x) =>
            h(
              'li',
              { 'data-test': 'test-hit' },
              h(
                'div',
                { class: 'meta' },
                h('span', {}, fmtTime(x.time_ns || x.time)),
                h('span', { class: 'mono' }, `${x.src}:${x.sport}`),
                h('span', { class: 'badge' }, x.dir),
                x.blocked
                  ? h('span', { class: 'badge block' }, x.filter_id ? `already blocked by filter ${x.filter_id}` : x.script_function ? `already blocked by script ${x.script_function}` : 'already blocked by a script')
                  : null,
              ),
              excerptView(x),
            ),
          ),
        )
      : h('p', { class: 'muted' }, 'No captured connection matches.'),
  );
}

// A change controld refuses because the filter would block (nearly) every connection
// (needs_force): the reason is shown in a confirm, and only a yes sends it again with force. A
// no rejects with the refusal, marked declined.
async function callForcing(cmd, params) {
  try {
    return await api.call(cmd, params);
  } catch (x) {
    if (!(x.body && x.body.needs_force)) throw x;
    if (!(await confirmBox(`${x.message.replace(/ give --force to .*$/, '')} Do it anyway?`, 'Do it anyway'))) {
      x.declined = true;
      throw x;
    }
    return api.call(cmd, { ...params, force: true });
  }
}

export function filtersPanel(svc) {
  const service = String(svc.id);
  const body = h('tbody', { 'data-test': 'filter-rows' });
  const results = h('div');
  let filters = [];
  const load = () =>
    api.get('filter/list', { service }).then(
      (l) => {
        filters = l;
        draw();
      },
      (e) => toast(`Filters: ${e.message}`, 'error'),
    );
  const draw = () => {
    clear(body);
    if (!filters.length) body.append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No filter yet.')));
    for (const f of filters) {
      body.append(
        h(
          'tr',
          { class: f.active ? '' : 'inactive', 'data-test': `filter-row-${f.id}`, 'data-active': String(!!f.active) },
          h('td', { class: 'num' }, f.id),
          h('td', { class: 'regex', 'data-test': 'filter-regex' }, `/${showBytes(fieldBytes(f, 'regex'))}/`),
          h('td', {}, f.dir, f.nocase ? ' nocase' : ''),
          h('td', {}, h('span', { class: `badge ${f.action || 'block'}` }, f.action || 'block')),
          h('td', { class: 'hide-phone' }, f.label || ''),
          h('td', { class: 'num', 'data-test': 'filter-blocked' }, fmtCount(f.action === 'log' ? f.matched : f.blocked)),
          h('td', {}, h('span', { class: `badge ${f.active ? 'on' : 'off'}` }, f.active ? 'on' : 'off')),
          h(
            'td',
            { class: 'actions' },
            h(
              'button',
              {
                class: 'small',
                'data-test': f.active ? 'filter-disable' : 'filter-enable',
                onclick: () =>
                  (f.active ? api.call('filter/disable', { filter: String(f.id) }) : callForcing('filter/enable', { filter: String(f.id) })).then(load, (e) => {
                    if (!e.declined) toast(e.message, 'error');
                  }),
              },
              f.active ? 'Disable' : 'Enable',
            ),
            h(
              'button',
              {
                class: 'small',
                'data-test': 'filter-edit',
                title: 'Edit the regex in place: the id, counters and timeline stay',
                onclick: () => startEdit(f),
              },
              'Edit',
            ),
            h(
              'button',
              {
                class: 'small danger',
                'data-test': 'filter-rm',
                onclick: async () => {
                  if (!(await confirmBox(`Remove filter ${f.id} /${showBytes(fieldBytes(f, 'regex'))}/?`, 'Remove'))) return;
                  api.call('filter/rm', { filter: String(f.id) }).then(() => {
                    undoToast(`Filter ${f.id} removed.`, load);
                    load();
                  }, (e) => toast(e.message, 'error'));
                },
              },
              'Remove',
            ),
          ),
        ),
      );
    }
  };

  const regex = h('input', { name: 'regex', required: true, class: 'mono', placeholder: 'evil[0-9]+', 'data-test': 'filter-regex-input', autocomplete: 'off', spellcheck: 'false' });
  const dir = h('select', { name: 'dir', 'data-test': 'filter-dir' }, ['both', 'c2s', 's2c'].map((d) => h('option', { value: d }, d)));
  const nocase = h('input', { type: 'checkbox', name: 'nocase', 'data-test': 'filter-nocase' });
  const logOnly = h('input', { type: 'checkbox', name: 'log', 'data-test': 'filter-log' });
  const label = h('input', { name: 'label', maxlength: 64, placeholder: 'team12 sqli', 'data-test': 'filter-label' });
  const err = h('p', { class: 'error', role: 'alert', 'data-test': 'filter-error' });
  const params = () => {
    const p = { service, regex: regex.value };
    if (dir.value !== 'both') p.dir = dir.value;
    if (nocase.checked) p.nocase = true;
    return p;
  };
  const testButton = h(
    'button',
    {
      type: 'button',
      'data-test': 'filter-test',
      onclick: async () => {
        err.textContent = '';
        clear(results);
        if (!regex.value) return regex.focus();
        try {
          results.append(testResults(await api.get('filter/test', params())));
        } catch (e) {
          err.textContent = e.message;
        }
      },
    },
    'Test on the capture',
  );
  // `filter set --regex` (issue 27): the form edits filter `editing` in place instead of adding.
  let editing = null;
  const submit = h('button', { type: 'submit', class: 'primary', 'data-test': 'filter-add' }, 'Add filter');
  const cancel = h('button', { type: 'button', hidden: true, 'data-test': 'filter-edit-cancel', onclick: () => stopEdit() }, 'Cancel edit');
  const startEdit = (f) => {
    editing = f;
    regex.value = showBytes(fieldBytes(f, 'regex'));
    dir.value = f.dir || 'both';
    nocase.checked = !!f.nocase;
    logOnly.disabled = label.disabled = true;
    submit.textContent = `Save filter ${f.id}`;
    cancel.hidden = false;
    regex.focus();
  };
  const stopEdit = () => {
    editing = null;
    form.reset();
    logOnly.disabled = label.disabled = false;
    submit.textContent = 'Add filter';
    cancel.hidden = true;
  };
  const saveEdit = async () => {
    const p = { filter: String(editing.id), regex: regex.value, dir: dir.value };
    if (nocase.checked) p.nocase = true;
    const f = await callForcing('filter/set', p);
    toast(`Filter ${f.id} edited (revision ${f.revision}).`, 'ok');
    for (const w of f.warnings || []) toast(`Filter ${f.id}: ${w}`, 'info');
    stopEdit();
    clear(results);
    load();
  };
  const form = h(
    'form',
    {
      'data-test': 'filter-add-form',
      onsubmit: async (e) => {
        e.preventDefault();
        err.textContent = '';
        if (editing) {
          try {
            await saveEdit();
          } catch (x) {
            err.textContent = x.body && x.body.duplicate_of ? `${x.message} (filter ${x.body.duplicate_of})` : x.message;
            if (x.declined) err.textContent = `Not edited: ${x.message}`;
          }
          return;
        }
        const p = params();
        if (logOnly.checked) p.log = true;
        if (label.value) p.label = label.value;
        try {
          const f = await callForcing('filter/add', p);
          toast(`Filter ${f.id} added.`, 'ok');
          for (const w of f.warnings || []) toast(`Filter ${f.id}: ${w}`, 'info');
          form.reset();
          clear(results);
          load();
        } catch (x) {
          err.textContent = x.body && x.body.duplicate_of ? `${x.message} (filter ${x.body.duplicate_of})` : x.message;
          if (x.declined) err.textContent = `Not added: ${x.message}`;
        }
      },
    },
    h(
      'div',
      { class: 'form-grid' },
      h('label', { class: 'wide' }, 'Regex (hyperscan syntax, bytes: \\xNN)', regex),
      h('label', {}, 'Direction', dir),
      h('label', {}, 'Label', label),
      h('label', { class: 'check' }, nocase, 'Ignore case'),
      h('label', { class: 'check' }, logOnly, 'Log only (do not block)'),
    ),
    h('div', { class: 'form-buttons' }, testButton, cancel, submit),
    err,
  );

  const file = h('input', { type: 'file', accept: '.rules,.txt', 'data-test': 'ruleset-file' });
  const mode = h(
    'select',
    { 'data-test': 'ruleset-mode', 'aria-label': 'import mode' },
    h('option', { value: 'add' }, 'add to the filters'),
    h('option', { value: 'sync' }, 'sync (keep ids and counters)'),
    h('option', { value: 'replace' }, 'replace all'),
  );
  const ruleset = h(
    'div',
    { class: 'toolbar' },
    h('strong', {}, 'Ruleset file'),
    file,
    mode,
    h(
      'button',
      {
        'data-test': 'ruleset-import',
        onclick: async () => {
          const f = file.files && file.files[0];
          if (!f) return toast('Choose a ruleset file first.', 'error');
          const bytes = new Uint8Array(await f.arrayBuffer());
          let bin = '';
          bytes.forEach((b) => (bin += String.fromCharCode(b)));
          const p = { service, file_b64: btoa(bin) };
          if (mode.value !== 'add') p[mode.value] = true;
          try {
            await callForcing('filter/import', p);
            toast(`Imported ${f.name}.`, 'ok');
            load();
          } catch (e) {
            toast(`Import${e.declined ? ' not done' : ''}: ${e.message}`, 'error');
          }
        },
      },
      'Import',
    ),
    h(
      'button',
      {
        'data-test': 'ruleset-export',
        onclick: async () => {
          try {
            // POST: every command may be one (docs/web.md), a GET only those it lists
            const l = await api.call('filter/export', { service });
            download(`${svc.name}.rules`, [enc.encode(`# fgex filters of ${svc.name}\n`), ...l.map(rulesetLine)], 'text/plain');
          } catch (e) {
            toast(`Export: ${e.message}`, 'error');
          }
        },
      },
      'Export',
    ),
  );

  const el = h(
    'section',
    { class: 'card', 'data-test': 'filters' },
    h('h2', {}, 'Filters'),
    h('p', { class: 'muted', 'data-test': 'filters-order' }, "All of a service's regex filters are matched in one scan: their order has no effect (at the byte where a block filter matches, every log filter matching there still logs, and the block is the oldest matching filter's). A script's functions run after them, in file order, on the bytes they passed."),
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'stack-phone' },
        h(
          'thead',
          {},
          h('tr', {}, ['#', 'Regex', 'Dir', 'Action', 'Label', 'Blocks', 'On', ''].map((t, i) => h('th', { class: i === 5 ? 'num' : i === 4 ? 'hide-phone' : '' }, t))),
        ),
        body,
      ),
    ),
    h('h3', {}, 'Add a filter (or edit one: its Edit button)'),
    form,
    results,
    ruleset,
  );
  load();
  const offs = [
    live.on('change', (c) => c && c.what === 'filters' && load()),
    // a block of this service changes the filter counters
    live.on('event', (ev) => ev && ev.service_id === svc.id && setTimeout(load, 300)),
  ];
  return { el, cleanup: () => offs.forEach((o) => o()) };
}

