// The firewall (docs/fgexctl.md "fw"): the ordered rules with add, move, enable, disable and rm;
// the policies, the options, on/off; a rule file applied whole. With "confirm" ticked every
// change goes with --confirm SECS: it is in force at once and undone by controld unless "Keep"
// (fw confirm) is pressed before the countdown ends.
import { call, get } from '../lib/api.js';
import { on } from '../lib/live.js';
import { h, clear, toast, confirmBox, fmtCount } from '../lib/ui.js';

const DIRS = ['in', 'out', 'forward'];
const OPTIONS = [
  ['loopback', 'accept what goes in or out by lo'],
  ['established', 'accept packets of accepted connections and related ones'],
  ['invalid', 'drop what conntrack finds invalid'],
  ['icmp', 'accept ICMP and ICMPv6'],
  ['dhcp', 'accept DHCP and DHCPv6'],
];

export default {
  id: 'fw',
  title: 'Firewall',
  render(root) {
    let alive = true;
    let fw = null;
    let deadline = 0; // ms, when the change waiting for confirmation is undone (0: none)
    let tick = null;
    const offs = [];

    const confirmOn = h('input', { type: 'checkbox', checked: true, 'data-test': 'fw-confirm-on' });
    const confirmSecs = h('input', {
      type: 'number',
      min: 1,
      max: 86400,
      value: 60,
      class: 'num',
      'data-test': 'fw-confirm-secs',
      'aria-label': 'seconds to confirm',
    });
    // The confirmation box stays in the page while the rest of the bar is redrawn: a redraw
    // (every reply, every live change) that took it out and back would drop what is typed in it.
    const headState = h('span', { class: 'uib-bar' });
    const head = h('div', { class: 'uib-bar' }, headState, h('label', {}, confirmOn, ' confirm changes within ', confirmSecs, ' s'));
    const pending = h('div', { class: 'uib-pending', hidden: true, 'data-test': 'fw-pending' });
    const policyBox = h('div', { class: 'uib-bar' });
    const optBox = h('div', { class: 'uib-opts' });
    const rulesBody = h('tbody', {});
    const stateLine = h('p', { class: 'muted', 'data-test': 'fw-state' });
    const section = h('section', { class: 'uib-view', 'data-test': 'view-fw' });

    const withConfirm = (p = {}) => {
      if (confirmOn.checked) p.confirm = Number(confirmSecs.value) || 60;
      return p;
    };

    // Every fw command replies with the whole firewall: show it.
    const run = async (cmd, params, what) => {
      try {
        const r = await call(cmd, withConfirm(params));
        show(r);
        if (what) toast(what, 'ok');
        return r;
      } catch (e) {
        toast(e.message, 'error');
        reload(); // the selects and boxes show what is in force again, not what was refused
        return null;
      }
    };

    const reload = async () => {
      try {
        show(await get('fw/list'));
      } catch (e) {
        toast(e.message, 'error');
      }
    };

    const showPending = () => {
      const left = deadline ? Math.max(0, Math.ceil((deadline - Date.now()) / 1000)) : 0;
      if (!left) {
        pending.hidden = true;
        clearInterval(tick);
        tick = null;
        if (deadline) {
          deadline = 0;
          // controld has undone the change by now: show what is in force.
          setTimeout(() => alive && reload(), 800);
        }
        return;
      }
      pending.hidden = false;
      clear(pending);
      pending.append(
        h('strong', {}, 'Unconfirmed change: '),
        'reverted in ',
        h('span', { class: 'uib-count', 'data-test': 'fw-countdown' }, `${left}s`),
        ' unless kept. ',
        h(
          'button',
          {
            class: 'primary',
            'data-test': 'fw-keep',
            onclick: async () => {
              try {
                show(await call('fw/confirm', {}));
                deadline = 0;
                showPending();
                toast('firewall change kept', 'ok');
              } catch (e) {
                toast(e.message, 'error');
              }
            },
          },
          'Keep',
        ),
      );
    };

    const show = (r) => {
      if (!r || !alive) return;
      fw = r;
      section.dataset.loaded = String(Date.now()); // tests: the list was shown at least once
      const st = r.state || {};
      const secs = Number(st.pending_secs || 0);
      deadline = secs > 0 ? Date.now() + secs * 1000 : 0;
      if (deadline && !tick) tick = setInterval(showPending, 250);
      showPending();

      clear(headState);
      headState.append(
        h(
          'span',
          { class: r.enabled ? 'pill pill-ok' : 'pill pill-bad', 'data-test': 'fw-enabled' },
          r.enabled ? 'enabled' : 'disabled',
        ),
        h(
          'button',
          {
            'data-test': 'fw-toggle',
            class: r.enabled ? 'danger' : 'primary',
            onclick: () => run(r.enabled ? 'fw/disable' : 'fw/enable', {}, r.enabled ? 'firewall disabled' : 'firewall enabled'),
          },
          r.enabled ? 'Disable firewall' : 'Enable firewall',
        ),
      );
      stateLine.textContent =
        `kernel: ${st.mode || '-'}` +
        (st.mode === 'compiled'
          ? ` · ${fmtCount(st.maps)} maps, ${fmtCount(st.elements)} elements, ≤${st.lookups} lookups a packet` +
            (st.apply_us ? ` · last apply ${(st.apply_us / 1000).toFixed(1)} ms` : '')
          : '');

      clear(policyBox);
      policyBox.append(h('strong', {}, 'Policy'));
      for (const d of DIRS) {
        const sel = h(
          'select',
          { 'data-test': `fw-policy-${d}`, 'aria-label': `policy ${d}` },
          ['accept', 'drop'].map((a) => h('option', { value: a }, a)),
        );
        sel.value = (r.policy && r.policy[d]) || 'accept';
        // `fw policy accept|drop --dir D`: the choice is the parameter "policy"
        sel.addEventListener('change', () => run('fw/policy', { policy: sel.value, dir: d }, `policy ${d}: ${sel.value}`));
        policyBox.append(h('label', {}, `${d} `, sel));
      }

      clear(optBox);
      for (const [k, what] of OPTIONS) {
        const cb = h('input', { type: 'checkbox', checked: !!(r.options && r.options[k]), 'data-test': `fw-opt-${k}` });
        // `fw set OPTION on|off`: "option" and "value"
        cb.addEventListener('change', () => run('fw/set', { option: k, value: cb.checked ? 'on' : 'off' }, `${k} ${cb.checked ? 'on' : 'off'}`));
        optBox.append(h('label', { title: what }, cb, ` ${k}`));
      }

      clear(rulesBody);
      const rules = r.rules || [];
      if (!rules.length) rulesBody.append(h('tr', {}, h('td', { colspan: 12, class: 'muted' }, 'no rules: every packet gets its policy')));
      rules.forEach((x, i) => {
        const ref = x.name || String(x.id);
        rulesBody.append(
          h(
            'tr',
            { 'data-test': `fw-rule-${ref}`, 'data-pos': i + 1, class: x.active ? '' : 'uib-off' },
            h('td', { class: 'num' }, String(i + 1)),
            h('td', { class: 'num muted' }, String(x.id)),
            h('td', {}, x.name || ''),
            h('td', {}, x.dir),
            h('td', {}, x.proto),
            h('td', {}, x.src || '*'),
            h('td', {}, x.sport || '*'),
            h('td', {}, x.dst || '*'),
            h('td', {}, x.dport || '*'),
            h('td', {}, h('span', { class: x.action === 'accept' ? 'pill pill-ok' : 'pill pill-bad' }, x.action)),
            h('td', {}, x.active ? 'yes' : 'no'),
            h(
              'td',
              { class: 'uib-actions' },
              h('button', { title: 'move up', 'data-test': 'fw-up', disabled: i === 0, onclick: () => run('fw/rule/move', { rule: String(x.id), position: i }) }, '↑'),
              h('button', { title: 'move down', 'data-test': 'fw-down', disabled: i === rules.length - 1, onclick: () => run('fw/rule/move', { rule: String(x.id), position: i + 2 }) }, '↓'),
              h(
                'button',
                { 'data-test': 'fw-rule-toggle', onclick: () => run(`fw/rule/${x.active ? 'disable' : 'enable'}`, { rule: String(x.id) }) },
                x.active ? 'Disable' : 'Enable',
              ),
              h(
                'button',
                {
                  class: 'danger',
                  'data-test': 'fw-rule-rm',
                  onclick: async () => {
                    if (await confirmBox(`Remove rule ${ref}?`, 'Remove')) run('fw/rule/rm', { rule: String(x.id) }, `rule ${ref} removed`);
                  },
                },
                'Remove',
              ),
            ),
          ),
        );
      });
    };

    // The add form: fw rule add's options.
    const f = {
      name: h('input', { placeholder: 'name (optional)', 'data-test': 'fw-add-name', size: 10 }),
      dir: h('select', { 'data-test': 'fw-add-dir' }, DIRS.map((d) => h('option', { value: d }, d))),
      proto: h('select', { 'data-test': 'fw-add-proto' }, ['', 'tcp', 'udp', 'both', 'any'].map((p) => h('option', { value: p }, p || 'proto…'))),
      src: h('input', { placeholder: 'src addr/prefix/iface', 'data-test': 'fw-add-src', size: 14 }),
      sport: h('input', { placeholder: 'sport', 'data-test': 'fw-add-sport', size: 6 }),
      dst: h('input', { placeholder: 'dst addr/prefix/iface', 'data-test': 'fw-add-dst', size: 14 }),
      dport: h('input', { placeholder: 'dport', 'data-test': 'fw-add-dport', size: 6 }),
      action: h('select', { 'data-test': 'fw-add-action' }, ['drop', 'accept', 'reject'].map((a) => h('option', { value: a }, a))),
      at: h('input', { type: 'number', min: 1, placeholder: 'at (end)', class: 'num', 'data-test': 'fw-add-at' }),
      disabled: h('input', { type: 'checkbox', 'data-test': 'fw-add-disabled' }),
    };
    const addForm = h(
      'form',
      {
        class: 'uib-form',
        'data-test': 'fw-add',
        onsubmit: async (ev) => {
          ev.preventDefault();
          const p = { action: f.action.value, dir: f.dir.value };
          for (const k of ['name', 'proto', 'src', 'sport', 'dst', 'dport']) if (f[k].value.trim()) p[k] = f[k].value.trim();
          if (f.at.value) p.at = Number(f.at.value);
          if (f.disabled.checked) p.disabled = true;
          const r = await run('fw/rule/add', p, 'rule added');
          if (r) for (const k of ['name', 'src', 'sport', 'dst', 'dport', 'at']) f[k].value = '';
        },
      },
      f.name,
      f.dir,
      f.proto,
      f.src,
      f.sport,
      f.dst,
      f.dport,
      f.action,
      f.at,
      h('label', {}, f.disabled, ' disabled'),
      h('button', { type: 'submit', class: 'primary', 'data-test': 'fw-add-submit' }, 'Add rule'),
    );

    // A whole rule file: import (or apply, which reverts unless kept).
    const fileText = h('textarea', {
      class: 'uib-mono',
      rows: 6,
      spellcheck: 'false',
      'data-test': 'fw-file',
      placeholder: '# one rule a line, fw rule add\'s options\n--name ssh --dir in --proto tcp --dport 22 --action accept',
    });
    const applyFile = async () => {
      const secs = Number(confirmSecs.value) || 60;
      if (!(await confirmBox(`Replace every rule with this file? It is undone after ${secs} s unless you keep it.`, 'Apply'))) return;
      try {
        show(await call('fw/apply', { file: fileText.value, confirm: secs }));
        toast('rule file applied: keep it before the countdown ends', 'ok');
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const fileFromRules = () => {
      const lines = ['# fgex firewall rules, first match wins (fgexctl fw import)'];
      for (const x of (fw && fw.rules) || []) {
        const w = [];
        if (x.name) w.push('--name', x.name);
        w.push('--dir', x.dir, '--proto', x.proto);
        if (x.src) w.push('--src', x.src);
        if (x.sport) w.push('--sport', x.sport);
        if (x.dst) w.push('--dst', x.dst);
        if (x.dport) w.push('--dport', x.dport);
        w.push('--action', x.action);
        if (!x.active) w.push('--disabled');
        lines.push(w.join(' '));
      }
      fileText.value = lines.join('\n') + '\n';
    };

    clear(root);
    section.append(
        h('h2', {}, 'Firewall'),
        head,
        pending,
        stateLine,
        policyBox,
        h('div', { class: 'uib-bar' }, h('strong', {}, 'Options'), optBox),
        h('h3', {}, 'Rules ', h('span', { class: 'muted' }, '(first match wins)')),
        h(
          'div',
          { class: 'uib-scroll' },
          h(
            'table',
            { class: 'uib-table', 'data-test': 'fw-rules' },
            h(
              'thead',
              {},
              h('tr', {}, ['#', 'id', 'Name', 'Dir', 'Proto', 'Src', 'Sport', 'Dst', 'Dport', 'Action', 'Active', ''].map((t) => h('th', {}, t))),
            ),
            rulesBody,
          ),
        ),
        h('h3', {}, 'Add a rule'),
        addForm,
        h('details', { class: 'uib-details' },
          h('summary', {}, 'Rule file (replace every rule)'),
          fileText,
          h(
            'div',
            { class: 'uib-bar' },
            h('button', { 'data-test': 'fw-file-current', onclick: fileFromRules }, 'Fill with the current rules'),
            h('button', { class: 'primary', 'data-test': 'fw-file-apply', onclick: applyFile }, 'Apply with confirmation'),
          ),
        ),
    );
    root.append(section);

    offs.push(on('change', (c) => c && c.what === 'fw' && reload()));
    reload();
    return () => {
      alive = false;
      clearInterval(tick);
      offs.forEach((x) => x());
    };
  },
};
