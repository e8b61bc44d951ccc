// Script filters (docs/scripts.md): a service's Python file in an editor of our own (a textarea
// over a backdrop of lines, with line numbers, completion and hover for the names of fgex's
// Python package), checked without storing or set with its check error marked at its line,
// get and rm; the functions with their counters, enabled and disabled; the live script log.
import { call, get } from '../lib/api.js';
import { on } from '../lib/live.js';
import { h, clear, toast, confirmBox, fmtCount, fmtTime, b64bytes } from '../lib/ui.js';

const TEMPLATE = `from firegex.nfproxy import pyfilter, ACCEPT, REJECT, DROP
from firegex.nfproxy.models import HttpRequest, TCPInputStream

@pyfilter
def no_flag_out(stream: TCPInputStream):
    if b"FLAG{" in stream.data:
        return REJECT
`;

const LOG_MAX = 500;

// "fgexctl: web.py:7: filter probe: ..." -> {line: 7, reason: "filter probe: ..."}; the file
// name may be any path (the server's temporary file), the first ":N:" after it is the line.
export function parseCheckError(msg) {
  const m = /^(.*?):(\d+):\s*(.*)$/s.exec(String(msg || ''));
  if (!m) return null;
  return { line: Number(m[2]), reason: m[3].replace(/;\s*nothing was stored\s*$/, '') };
}

function argService(args) {
  if (Array.isArray(args)) return args[0] || null;
  if (typeof args === 'string') return args || null;
  return (args && args.service) || null;
}

function sourceText(r) {
  if (r.source !== undefined) return r.source;
  if (r.source_b64 !== undefined) return new TextDecoder('utf-8').decode(b64bytes(r.source_b64));
  return '';
}

// The names a filter file can use (models with their members, verdicts, enums, settings, the
// decorator), read from the installed package at build time (tools/pyapi.py): fetched once.
let pyapiP = null;
export function pyapi() {
  if (!pyapiP)
    pyapiP = fetch('/lib/pyapi.json')
      .then((r) => (r.ok ? r.json() : { names: [] }))
      .then((d) => {
        const byName = new Map();
        for (const n of d.names || []) byName.set(n.name, n);
        return { names: d.names || [], byName };
      })
      .catch(() => ({ names: [], byName: new Map() }));
  return pyapiP;
}

// What `obj` is in the file: a name of the package (Action), or a parameter annotated with one
// (def f(req: HttpRequest) makes req an HttpRequest).
function typeOf(api, text, obj) {
  const own = api.byName.get(obj);
  if (own && own.members) return own;
  const m = new RegExp(`\\b${obj}\\s*:\\s*([A-Za-z_]\\w*)`).exec(text);
  const t = m && api.byName.get(m[1]);
  return t && t.members ? t : null;
}

// The candidates for the word before the caret: [{name, kind, doc}], and the prefix typed.
function complete(api, text, caret) {
  const line = text.slice(text.lastIndexOf('\n', caret - 1) + 1, caret);
  const m = /(?:([A-Za-z_]\w*)\.)?([A-Za-z_]\w*)?$/.exec(line);
  if (!m || (!m[1] && !m[2])) return null;
  const prefix = m[2] || '';
  let pool;
  if (m[1]) {
    const t = typeOf(api, text, m[1]);
    if (!t) return null;
    pool = t.members;
  } else {
    if (!prefix) return null;
    pool = api.names;
  }
  const items = pool.filter((n) => n.name.startsWith(prefix) && n.name !== prefix);
  return items.length ? { prefix, items: items.slice(0, 60) } : null;
}

// The doc of the name at col of line (a member when it follows "obj."), or null.
function describe(api, text, line, col) {
  const isw = (c) => /[A-Za-z0-9_]/.test(c);
  if (col < 0 || col >= line.length || !isw(line[col])) return null;
  let a = col;
  let b = col;
  while (a > 0 && isw(line[a - 1])) a--;
  while (b < line.length && isw(line[b])) b++;
  const word = line.slice(a, b);
  if (a > 0 && line[a - 1] === '.') {
    let o = a - 1;
    while (o > 0 && isw(line[o - 1])) o--;
    const t = typeOf(api, text, line.slice(o, a - 1));
    const mem = t && t.members.find((x) => x.name === word);
    if (mem) return { name: `${t.name}.${word}`, kind: mem.kind, signature: mem.signature, doc: mem.doc };
    return null;
  }
  const n = api.byName.get(word);
  return n ? { name: n.name, kind: n.kind, doc: n.doc, members: n.members } : null;
}

// The editor: line numbers in a gutter, a backdrop of one div per line behind a transparent
// textarea (so a line can be marked), all three scrolled together.
function makeEditor() {
  const gutter = h('div', { class: 'ed-gutter', 'aria-hidden': 'true' });
  const back = h('div', { class: 'ed-back', 'aria-hidden': 'true' });
  const ta = h('textarea', {
    class: 'ed-text',
    spellcheck: 'false',
    wrap: 'off',
    autocapitalize: 'off',
    autocomplete: 'off',
    'data-test': 'script-editor',
    'aria-label': 'script file',
  });
  const pop = h('div', { class: 'ed-pop', hidden: true, 'data-test': 'script-complete', role: 'listbox' });
  const tip = h('div', { class: 'ed-hover', hidden: true, 'data-test': 'script-hover' });
  const main = h('div', { class: 'ed-main' }, back, pop, tip, ta);
  const wrap = h('div', { class: 'ed' }, gutter, main);
  let api = null;
  pyapi().then((a) => (api = a));
  let comp = null; // {prefix, items, sel} while the list is shown
  let errLine = 0;
  let errText = '';
  let painted = ''; // the line count and mark drawn last: a keystroke within a line redraws nothing

  const paint = () => {
    let n = 1;
    for (let i = ta.value.indexOf('\n'); i !== -1; i = ta.value.indexOf('\n', i + 1)) n++;
    const key = `${n}:${errLine}:${errText}`;
    if (key === painted) return scroll();
    painted = key;
    clear(gutter);
    clear(back);
    for (let i = 1; i <= n; i++) {
      const bad = i === errLine;
      gutter.append(
        h(
          'div',
          {
            class: bad ? 'ed-ln ed-err' : 'ed-ln',
            'data-line': i,
            'data-test': bad ? 'script-error-line' : null,
            title: bad ? errText : null,
          },
          String(i),
        ),
      );
      back.append(h('div', { class: bad ? 'ed-row ed-err' : 'ed-row' }, '\u200b'));
    }
    scroll();
  };
  const scroll = () => {
    gutter.style.transform = `translateY(${-ta.scrollTop}px)`;
    back.style.transform = `translateY(${-ta.scrollTop}px)`;
  };
  // The textarea's metrics: a monospace character's width, the line height, the padding.
  const metrics = () => {
    const cs = getComputedStyle(ta);
    const cv = metrics.cv || (metrics.cv = document.createElement('canvas').getContext('2d'));
    cv.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    return {
      cw: cv.measureText('M'.repeat(20)).width / 20 || 8,
      lh: parseFloat(cs.lineHeight) || 18,
      pl: parseFloat(cs.paddingLeft) || 0,
      pt: parseFloat(cs.paddingTop) || 0,
    };
  };
  const hidePop = () => {
    comp = null;
    pop.hidden = true;
  };
  const showPop = () => {
    clear(pop);
    comp.items.forEach((n, i) =>
      pop.append(
        h(
          'div',
          {
            class: i === comp.sel ? 'ed-sel' : null,
            role: 'option',
            'data-test': `script-complete-${n.name}`,
            onmousedown: (e) => {
              e.preventDefault();
              comp.sel = i;
              accept();
            },
          },
          h('code', {}, n.name),
          h('span', { class: 'muted' }, n.kind),
        ),
      ),
    );
    const m = metrics();
    const caret = ta.selectionStart;
    const before = ta.value.slice(0, caret);
    const line = before.split('\n').length;
    const col = caret - (before.lastIndexOf('\n') + 1);
    pop.style.top = `${m.pt + line * m.lh - ta.scrollTop}px`;
    pop.style.left = `${m.pl + col * m.cw - ta.scrollLeft}px`;
    pop.hidden = false;
  };
  const accept = () => {
    const n = comp.items[comp.sel];
    const caret = ta.selectionStart;
    ta.setRangeText(n.name, caret - comp.prefix.length, caret, 'end');
    hidePop();
    paint();
    ta.focus();
  };
  const suggest = () => {
    const c = api && ta.selectionStart === ta.selectionEnd ? complete(api, ta.value, ta.selectionStart) : null;
    if (!c) return hidePop();
    comp = { ...c, sel: 0 };
    showPop();
  };
  ta.addEventListener('input', (e) => {
    paint();
    if (e.inputType && e.inputType.startsWith('insert') && e.inputType !== 'insertFromPaste') suggest();
    else hidePop();
  });
  ta.addEventListener('blur', hidePop);
  ta.addEventListener('click', hidePop);
  // Hover: the name under the pointer, its kind and its doc from the package.
  ta.addEventListener('mousemove', (e) => {
    if (!api) return;
    const m = metrics();
    const r = ta.getBoundingClientRect();
    const ln = Math.floor((e.clientY - r.top - m.pt + ta.scrollTop) / m.lh);
    const col = Math.floor((e.clientX - r.left - m.pl + ta.scrollLeft) / m.cw);
    const lines = ta.value.split('\n');
    const d = ln >= 0 && ln < lines.length ? describe(api, ta.value, lines[ln], col) : null;
    if (!d) {
      tip.hidden = true;
      return;
    }
    clear(tip);
    tip.append(
      h('div', {}, h('code', {}, d.name + (d.signature || '')), h('span', { class: 'muted' }, ` ${d.kind}`)),
      d.doc ? h('div', {}, d.doc) : null,
      d.members && d.members.length ? h('div', { class: 'muted' }, d.members.map((x) => x.name).join(', ')) : null,
    );
    tip.style.top = `${e.clientY - r.top + 14}px`;
    tip.style.left = `${Math.max(0, e.clientX - r.left - 20)}px`;
    tip.dataset.name = d.name;
    tip.hidden = false;
  });
  ta.addEventListener('mouseleave', () => (tip.hidden = true));
  ta.addEventListener('scroll', scroll);
  ta.addEventListener('keydown', (e) => {
    if (comp) {
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        comp.sel = (comp.sel + (e.key === 'ArrowDown' ? 1 : comp.items.length - 1)) % comp.items.length;
        showPop();
        return;
      }
      if (e.key === 'Enter' || e.key === 'Tab') {
        e.preventDefault();
        accept();
        return;
      }
      if (e.key === 'Escape') {
        e.preventDefault();
        hidePop();
        return;
      }
    }
    // Tab indents (four spaces, as Python wants) instead of leaving the editor.
    if (e.key === 'Tab' && !e.shiftKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      ta.setRangeText('    ', ta.selectionStart, ta.selectionEnd, 'end');
      paint();
    }
  });

  return {
    el: wrap,
    textarea: ta,
    get value() {
      return ta.value;
    },
    set value(v) {
      ta.value = v;
      ta.scrollTop = 0;
      paint();
    },
    mark(line, text) {
      errLine = line || 0;
      errText = text || '';
      paint();
      if (errLine) this.goto(errLine);
    },
    goto(line) {
      const lines = ta.value.split('\n');
      let start = 0;
      for (let i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
      const end = start + (lines[line - 1] || '').length;
      ta.focus();
      ta.setSelectionRange(start, end);
      const lh = parseFloat(getComputedStyle(ta).lineHeight) || 18;
      ta.scrollTop = Math.max(0, (line - 4) * lh);
      scroll();
    },
  };
}

export default {
  id: 'scripts',
  title: 'Scripts',
  render(root, args) {
    let service = argService(args);
    let serviceId = null;
    let alive = true;
    const offs = [];
    const ed = makeEditor();
    const pick = h('select', { 'data-test': 'script-service', 'aria-label': 'service' });
    const deadline = h('input', {
      type: 'number',
      min: 1,
      max: 10000,
      placeholder: '100',
      class: 'num',
      'data-test': 'script-deadline',
      'aria-label': 'deadline in milliseconds',
    });
    const info = h('span', { class: 'muted', 'data-test': 'script-info' });
    const errBox = h('div', { class: 'uib-err', hidden: true, 'data-test': 'script-error' });
    const fnBody = h('tbody', {});
    const logList = h('div', { class: 'uib-log', 'data-test': 'script-log' });
    let seenSeq = 0;

    const btn = (label, test, fn, cls) =>
      h('button', { 'data-test': test, class: cls, onclick: fn }, label);

    const showError = (e) => {
      const pe = parseCheckError(e.message);
      clear(errBox);
      errBox.hidden = false;
      if (pe) {
        errBox.append(
          h(
            'a',
            { href: '#', 'data-test': 'script-error-goto', onclick: (ev) => (ev.preventDefault(), ed.goto(pe.line)) },
            `line ${pe.line}`,
          ),
          `: ${pe.reason}`,
        );
        ed.mark(pe.line, pe.reason);
      } else {
        errBox.append(e.message);
        ed.mark(0);
      }
    };
    const clearError = () => {
      errBox.hidden = true;
      clear(errBox);
      ed.mark(0);
    };

    const renderFunctions = (r) => {
      clear(fnBody);
      const fns = (r && r.functions) || [];
      if (!fns.length) {
        fnBody.append(h('tr', {}, h('td', { colspan: 9, class: 'muted' }, 'no script on this service')));
        return;
      }
      // a call that failed for every connection of the service (its file not loaded where the
      // call went): said above the functions until the file is set again
      if (r.error) {
        const e = r.error;
        fnBody.append(
          h('tr', { 'data-test': 'script-error' }, h('td', { colspan: 9, class: 'error' }, `ERROR: ${e.text} (${e.count} time${e.count === 1 ? '' : 's'}, last ${fmtTime(Math.floor(e.time_ns / 1e6))})`)),
        );
      }
      for (const f of fns) {
        fnBody.append(
          h(
            'tr',
            { 'data-test': `script-fn-${f.name}`, class: f.active ? '' : 'uib-off' },
            h('td', {}, h('code', {}, f.name)),
            h('td', {}, h('a', { href: '#', onclick: (ev) => (ev.preventDefault(), ed.goto(f.line)) }, String(f.line))),
            h('td', {}, (f.params || []).join(', ')),
            h('td', { class: 'num' }, fmtCount(f.blocked)),
            h('td', { class: 'num' }, fmtCount(f.edited || 0)),
            h('td', { class: 'num' }, fmtCount(f.errors)),
            h('td', { class: 'num' }, fmtCount(f.timeouts)),
            h('td', {}, h('span', { class: f.active ? 'pill pill-ok' : 'pill' }, f.active ? 'on' : 'off')),
            h(
              'td',
              {},
              btn(f.active ? 'Disable' : 'Enable', `script-fn-toggle-${f.name}`, async () => {
                try {
                  const x = await call(`script/${f.active ? 'disable' : 'enable'}`, { service, function: f.name });
                  renderFunctions(x);
                } catch (e) {
                  toast(e.message, 'error');
                }
              }),
            ),
          ),
        );
      }
    };

    const renderInfo = (r) => {
      if (!r) {
        info.textContent = 'no script: write one and set it';
        return;
      }
      info.textContent = `${r.filename || 'script'} · deadline ${r.deadline_ms} ms · set ${fmtTime(r.updated)}`;
    };

    const logLine = (x) => {
      const t = x.time_ns ? fmtTime(Math.floor(x.time_ns / 1e6)) : '';
      return h(
        'div',
        { class: `uib-logline uib-log-${x.kind}`, 'data-test': 'script-log-line' },
        h('span', { class: 'muted' }, t),
        ' ',
        h('span', { class: 'pill' }, x.kind),
        x.function ? [' ', h('code', {}, x.function)] : null,
        h('pre', {}, x.text || ''),
      );
    };
    const addLog = (x) => {
      if (x.seq && x.seq <= seenSeq) return;
      if (x.seq) seenSeq = x.seq;
      logList.prepend(logLine(x));
      while (logList.childNodes.length > LOG_MAX) logList.lastChild.remove();
    };

    // Counters move with blocks and errors: fetch the functions again, at most once a second.
    let refetchTimer = null;
    const refetchSoon = () => {
      if (refetchTimer) return;
      refetchTimer = setTimeout(async () => {
        refetchTimer = null;
        if (!alive || !service) return;
        try {
          renderFunctions(await get('script/list', { service }));
        } catch {
          /* the next event tries again */
        }
      }, 1000);
    };

    const section = h('section', { class: 'uib-view', 'data-test': 'view-scripts' });
    // data-loaded names the service whose file the editor holds (tests wait for it)
    // The log's new entries (seq after the newest shown), at most once a second.
    let logTimer = null;
    const logSoon = () => {
      if (logTimer) return;
      logTimer = setTimeout(async () => {
        logTimer = null;
        if (!alive || !service) return;
        try {
          const log = await get('script/log', { service });
          for (const x of Array.isArray(log) ? log : []) addLog(x);
        } catch {
          /* the next entry tries again */
        }
        refetchSoon();
      }, 1000);
    };

    let loads = 0; // a load overtaken by a later one (another service picked) shows nothing
    const load = async () => {
      const mine = ++loads;
      delete section.dataset.loaded;
      clearError();
      clear(logList);
      seenSeq = 0;
      serviceId = null;
      if (!service) return;
      try {
        const r = await get('script/get', { service });
        if (mine !== loads) return;
        serviceId = r.service_id;
        ed.value = sourceText(r);
        renderInfo(r);
        renderFunctions(r);
        deadline.value = r.deadline_ms || '';
      } catch (e) {
        if (mine !== loads) return;
        if (e.status === 404 || e.exit === 3) {
          ed.value = TEMPLATE;
          renderInfo(null);
          renderFunctions(null);
        } else toast(e.message, 'error');
      }
      try {
        const log = await get('script/log', { service });
        if (mine !== loads) return;
        for (const x of Array.isArray(log) ? log : []) addLog(x);
      } catch {
        /* no script, no log */
      }
      if (mine === loads) section.dataset.loaded = service;
    };

    const save = async () => {
      if (!service) return;
      const p = { service, file: ed.value };
      if (deadline.value) p.deadline = Number(deadline.value);
      try {
        const r = await call('script/set', p);
        serviceId = r.service_id;
        clearError();
        renderInfo(r);
        renderFunctions(r);
        const n = (r.functions || []).length;
        toast(`script set: ${n} function${n === 1 ? '' : 's'}`, 'ok');
      } catch (e) {
        showError(e);
        toast('script refused: nothing was stored', 'error');
      }
    };

    // Check: the file judged as Set judges it (controld's sandboxed check), nothing stored.
    const checkFile = async () => {
      if (!service) return;
      const p = { service, file: ed.value, dry_run: true };
      if (deadline.value) p.deadline = Number(deadline.value);
      try {
        const r = await call('script/set', p);
        clearError();
        const fns = (r.functions || []).map((f) => f.name);
        toast(`check passed: ${fns.length} function${fns.length === 1 ? '' : 's'} (${fns.join(', ') || 'none'}); nothing was stored`, 'ok');
      } catch (e) {
        showError(e);
        toast('check failed: nothing was stored', 'error');
      }
    };

    const remove = async () => {
      if (!service || !(await confirmBox(`Remove the script of ${service}?`, 'Remove'))) return;
      try {
        await call('script/rm', { service });
        toast('script removed', 'ok');
        load();
      } catch (e) {
        toast(e.message, 'error');
      }
    };

    const opener = h('input', { type: 'file', accept: '.py,text/x-python,text/plain', hidden: true, 'data-test': 'script-open-file' });
    opener.addEventListener('change', async () => {
      const f = opener.files && opener.files[0];
      if (!f) return;
      ed.value = await f.text();
      ed.mark(0);
      opener.value = '';
      toast(`${f.name} loaded into the editor: Set stores it`, 'info');
    });

    pick.addEventListener('change', () => {
      service = pick.value;
      // the address names the service shown (a reload keeps it), without routing anew
      history.replaceState(null, '', `#/scripts/${encodeURIComponent(service)}`);
      load();
    });

    clear(root);
    section.append(
        h('h2', {}, 'Script filters'),
        h(
          'div',
          { class: 'uib-bar' },
          h('label', {}, 'Service ', pick),
          h('label', {}, 'Deadline (ms) ', deadline),
          btn('Check', 'script-check', checkFile),
          btn('Set', 'script-save', save, 'primary'),
          btn('Reload', 'script-load', load),
          btn('Open a file…', 'script-open', () => opener.click()),
          opener,
          btn('Remove', 'script-rm', remove, 'danger'),
          info,
        ),
        errBox,
        ed.el,
        h('h3', {}, 'Functions'),
        h(
          'div',
          { class: 'uib-scroll' },
          h(
            'table',
            { class: 'uib-table', 'data-test': 'script-functions' },
            h(
              'thead',
              {},
              h('tr', {}, ['Function', 'Line', 'Receives', 'Blocked', 'Edited', 'Errors', 'Timeouts', 'State', ''].map((t) => h('th', {}, t))),
            ),
            fnBody,
          ),
        ),
        h('h3', {}, 'Log ', h('span', { class: 'muted' }, '(live, newest first)')),
        logList,
    );
    root.append(section);

    offs.push(
      on('script_log', (x) => {
        if (!x || !alive || !service) return;
        if (x.service === undefined && x.service_id === undefined) {
          // an entry that does not say its service: ask for this service's log instead
          logSoon();
          return;
        }
        if (x.service !== undefined ? x.service !== service : x.service_id !== serviceId) return;
        addLog(x);
        if (x.kind === 'block' || x.kind === 'exception' || x.kind === 'timeout' || x.kind === 'error') refetchSoon();
      }),
    );
    offs.push(
      on('change', (c) => {
        if (c && c.what === 'script') refetchSoon();
      }),
    );

    (async () => {
      try {
        const list = await get('service/list');
        const tcp = (list || []).filter((s) => s.proto === 'tcp');
        clear(pick);
        for (const s of tcp)
          pick.append(h('option', { value: s.name }, `${s.name}${s.layer === 'proxy' ? '' : ` (${s.layer})`}`));
        if (!tcp.length) {
          pick.append(h('option', { value: '' }, 'no TCP service'));
          return;
        }
        if (!service || !tcp.some((s) => s.name === service)) {
          const px = tcp.find((s) => s.layer === 'proxy');
          service = (px || tcp[0]).name;
        }
        pick.value = service;
        load();
      } catch (e) {
        toast(e.message, 'error');
      }
    })();

    return () => {
      alive = false;
      clearTimeout(refetchTimer);
      clearTimeout(logTimer);
      offs.forEach((f) => f());
    };
  },
};
