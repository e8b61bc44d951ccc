// The game's facts (fgexctl game show / game set, issue 28): the flag format, the checker's
// and the teams' addresses; set them, or clear them. The flag format is bytes: one that is not
// UTF-8 is shown with \xHH escapes, which hyperscan reads as the same bytes.
import { call, get } from '../lib/api.js';
import { on } from '../lib/live.js';
import { h, clear, toast, confirmBox, fmtTime, fieldBytes } from '../lib/ui.js';

const split = (s) => s.split(/[\s,]+/).filter(Boolean);

function flagText(g) {
  if (g.flag !== undefined) return g.flag;
  // bytes that are not UTF-8: \xHH for what is not printable ASCII
  return Array.from(fieldBytes(g, 'flag'), (b) =>
    b >= 0x20 && b < 0x7f && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`,
  ).join('');
}

export default {
  id: 'game',
  title: 'Game',
  render(root) {
    let alive = true;
    const offs = [];
    const facts = h('dl', { class: 'uib-kv', 'data-test': 'game-facts' });
    const flagIn = h('input', { type: 'text', size: 40, placeholder: '[A-Z0-9]{31}=', 'data-test': 'game-flag' });
    const checkerIn = h('input', { type: 'text', size: 40, placeholder: '10.10.0.0/24 fd00:10::1', 'data-test': 'game-checker' });
    const teamIn = h('input', { type: 'text', size: 40, placeholder: '10.60.0.0/16 (optional)', 'data-test': 'game-team' });

    const show = (g) => {
      if (!alive) return;
      clear(facts);
      if (!g || !g.set) {
        facts.append(h('dt', {}, 'game'), h('dd', { 'data-k': 'none' }, 'no game set: flags are not watched'));
        return;
      }
      const rows = [
        ['flag', h('code', {}, flagText(g))],
        ['checker', g.checker.join(' ')],
        ['team', g.team.length ? g.team.join(' ') : '-'],
      ];
      if (g.set_time) rows.push(['set', fmtTime(g.set_time)]);
      for (const [k, v] of rows) facts.append(h('dt', {}, k), h('dd', { 'data-k': k }, v));
      flagIn.value = flagText(g);
      checkerIn.value = g.checker.join(' ');
      teamIn.value = g.team.join(' ');
    };
    const reload = async () => {
      try {
        show(await get('game/show'));
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const set = async () => {
      const params = { flag: flagIn.value, checker: split(checkerIn.value).join(',') };
      const team = split(teamIn.value);
      if (team.length) params.team = team.join(',');
      try {
        show(await call('game/set', params));
        toast('game set', 'ok');
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const clearGame = async () => {
      if (!(await confirmBox('Clear the game? Flags are no longer watched.', 'Clear'))) return;
      try {
        show(await call('game/set', { clear: true }));
        toast('game cleared', 'ok');
      } catch (e) {
        toast(e.message, 'error');
      }
    };

    clear(root);
    root.append(
      h(
        'section',
        { class: 'uib-view', 'data-test': 'view-game' },
        h('h2', {}, 'Game'),
        facts,
        h(
          'div',
          { class: 'uib-bar' },
          h('label', {}, 'flag format ', flagIn),
          h('label', {}, 'checker ', checkerIn),
          h('label', {}, 'teams ', teamIn),
          h('button', { 'data-test': 'game-set', onclick: set }, 'Set'),
          h('button', { class: 'danger', 'data-test': 'game-clear', onclick: clearGame }, 'Clear'),
        ),
      ),
    );
    offs.push(on('change', (c) => c && c.what === 'game' && reload()));
    reload();
    return () => {
      alive = false;
      offs.forEach((f) => f());
    };
  },
};
