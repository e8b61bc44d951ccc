// controld's workers (fgexctl worker list): kind, pid, state, restarts and each one's figures;
// restart one (fgexctl worker restart nfq|proxy|script|all); each one's last heartbeat, whether
// it was adopted from an earlier controld and why the last one was replaced (issue 24). The figures are fetched again when the
// live stats say counters moved, at most every few seconds.
import { call, get } from '../lib/api.js';
import { on } from '../lib/live.js';
import { h, clear, toast, confirmBox, fmtCount, fmtBytes, fmtAgo } from '../lib/ui.js';

const MAIN = ['kind', 'pid', 'state', 'generation', 'restarts', 'flows', 'queue_drops', 'rss_bytes'];
const LABELS = {
  queue_drops: 'queue drops',
  rss_bytes: 'memory',
  verdict_errors: 'verdict errors',
  midstream_resets: 'midstream resets',
  midstream_rescan: 'midstream rescans',
  flows_evicted: 'flows evicted',
  conns_refused: 'connections refused',
  connect_failed: 'connects failed',
  scan_errors: 'scan errors',
  src_refused: 'sources refused',
  silent_closed: 'closed silently',
};
const RESTARTABLE = new Set(['nfq', 'proxy', 'script']);
const OWN_ROWS = new Set(['heartbeat_age_ms', 'old_pid']);
const REFRESH_MS = 3000;

export default {
  id: 'workers',
  title: 'Workers',
  render(root) {
    let alive = true;
    let last = 0;
    let timer = null;
    const offs = [];
    const cards = h('div', { class: 'uib-cards', 'data-test': 'workers' });
    const stamp = h('span', { class: 'muted', 'data-test': 'workers-stamp' });

    const restart = async (kind) => {
      const what = kind === 'all' ? 'every data-path worker' : `the ${kind} worker`;
      if (!(await confirmBox(`Restart ${what}? Its connections in flight are cut.`, 'Restart'))) return;
      try {
        show(await call('worker/restart', { kind }));
        toast(`${kind} restarted`, 'ok');
      } catch (e) {
        toast(e.message, 'error');
      }
    };

    const show = (list) => {
      if (!alive) return;
      last = Date.now();
      stamp.textContent = `updated ${new Date(last).toLocaleTimeString()}`;
      clear(cards);
      for (const w of list || []) {
        const good = w.state === 'running';
        const rows = [];
        for (const k of MAIN.slice(3)) {
          if (w[k] === undefined) continue;
          if (k === 'generation' && !w[k]) continue;
          rows.push([LABELS[k] || k, k === 'rss_bytes' ? fmtBytes(w[k]) : fmtCount(w[k])]);
        }
        if (w.started) rows.push(['started', fmtAgo(w.started)]);
        rows.push([
          'heartbeat',
          typeof w.heartbeat_age_ms === 'number' ? `${(w.heartbeat_age_ms / 1000).toFixed(1)} s ago` : 'none yet',
        ]);
        if (w.adopted) rows.push(['adopted', 'from an earlier controld']);
        if (w.replaced_why) rows.push(['last replaced', w.replaced_why]);
        for (const [k, v] of Object.entries(w)) {
          if (MAIN.includes(k) || OWN_ROWS.has(k) || k === 'started' || typeof v !== 'number') continue;
          rows.push([LABELS[k] || k.replace(/_/g, ' '), fmtCount(v)]);
        }
        cards.append(
          h(
            'div',
            { class: 'uib-card', 'data-test': `worker-${w.kind}` },
            h(
              'div',
              { class: 'uib-card-head' },
              h('strong', {}, w.kind),
              h('span', { class: good ? 'pill pill-ok' : 'pill pill-bad', 'data-test': 'worker-state' }, w.state),
              h('span', { class: 'muted' }, `pid ${w.pid || '-'}`),
              RESTARTABLE.has(w.kind)
                ? h('button', { 'data-test': `worker-restart-${w.kind}`, onclick: () => restart(w.kind) }, 'Restart')
                : null,
            ),
            h(
              'dl',
              { class: 'uib-kv' },
              rows.map(([k, v]) => [h('dt', {}, k), h('dd', { 'data-k': k }, v)]),
            ),
          ),
        );
      }
      if (!(list || []).length) cards.append(h('p', { class: 'muted' }, 'no workers'));
    };

    const reload = async () => {
      try {
        show(await get('worker/list'));
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const soon = () => {
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        if (alive) reload();
      }, Math.max(0, REFRESH_MS - (Date.now() - last)));
    };

    clear(root);
    root.append(
      h(
        'section',
        { class: 'uib-view', 'data-test': 'view-workers' },
        h('h2', {}, 'Workers'),
        h(
          'div',
          { class: 'uib-bar' },
          h('button', { 'data-test': 'workers-reload', onclick: reload }, 'Reload'),
          h('button', { class: 'danger', 'data-test': 'worker-restart-all', onclick: () => restart('all') }, 'Restart all'),
          stamp,
        ),
        cards,
      ),
    );
    offs.push(on('stats', soon));
    reload();
    return () => {
      alive = false;
      clearTimeout(timer);
      offs.forEach((f) => f());
    };
  },
};
