// The pure helpers of uib's views, run in the page as the views run them: a script check's
// message mapped to its line, and a DIFF object written as fgexctl writes the diff.
import { check } from './b_util.js';

export default async function ({ page, login }) {
  await login(page);
  const r = await page.evaluate(async () => {
    const { parseCheckError } = await import('/views/scripts.js');
    const { diffLine } = await import('/views/history.js');
    return {
      e1: parseCheckError("fgexctl: web.py:7: filter probe: parameter req has an unknown annotation HttpReqest; nothing was stored"),
      e2: parseCheckError('fgexctl: /tmp/tmp9x2:12: running the file: NameError: a:1: b'),
      e3: parseCheckError('fgexctl: the script check did not run'),
      e4: parseCheckError('fgexctl: service web has no script'),
      d1: diffLine({ op: 'add', kind: 'filter', id: 12, service: 'web', regex: 'evil[0-9]+', dir: 'c2s', nocase: true, active: true }),
      d2: diffLine({ op: 'rm', kind: 'filter', id: 3, service: 'web', regex_b64: '//6AenE=', dir: 'both', nocase: false, active: false }),
      d3: diffLine({ op: 'change', kind: 'service', id: 2, service: 'web', active: true, what: 'port 80 -> 8080, stopped' }),
      d4: diffLine({ op: 'add', kind: 'filter', id: 0, service: 'web', regex: 'x', dir: 's2c', nocase: false, active: true }),
    };
  });
  check(r.e1 && r.e1.line === 7 && r.e1.reason === 'filter probe: parameter req has an unknown annotation HttpReqest', 'e1', r.e1);
  check(r.e2 && r.e2.line === 12 && r.e2.reason === 'running the file: NameError: a:1: b', 'e2: the first :N: after the file', r.e2);
  check(r.e3 === null && r.e4 === null, 'messages without a line', r.e3, r.e4);
  check(r.d1 === '+ filter 12 web c2s nocase /evil[0-9]+/', 'd1', r.d1);
  check(r.d2 === '- filter 3 web both disabled /\\xff\\xfe\\x80zq/', 'd2: bytes that are not UTF-8 escaped', r.d2);
  check(r.d3 === '~ service 2 web: port 80 -> 8080, stopped', 'd3', r.d3);
  check(r.d4 === '+ filter web s2c /x/', 'd4: id 0 (a dry run) is not shown', r.d4);
}
