// Script editor help (issue 27): Check judges a file without storing it (its error marked at its
// line, or its functions named); completion offers the package's names (models, verdicts,
// settings) and a parameter's members from its annotation; hover shows a name's doc.
import { check, mustApi, proxyService, view, toastText } from './b_util.js';

const FILE = `from firegex.nfproxy import pyfilter, ACCEPT, REJECT
from firegex.nfproxy.models import HttpRequest

@pyfilter
def no_admin(req: HttpRequest):
    if req.url.startswith("/admin"):
        return REJECT
`;

export default async function ({ page, base, shot, login }) {
  await login(page);
  const svc = await proxyService(page);
  await mustApi(page, 'script/rm', { service: svc }).catch(() => {});
  await view(page, base, 'scripts', svc);
  await page.waitForSelector(`[data-test=view-scripts][data-loaded=${svc}]`);

  // Check: a bad file's error at its line, nothing stored
  await page.fill('[data-test=script-editor]', FILE.replace('HttpRequest)', 'HttpReqest)'));
  await page.click('[data-test=script-check]');
  const marked = page.locator('[data-test=script-error-line]');
  await marked.waitFor();
  check((await marked.getAttribute('data-line')) === '5', 'marked line', await marked.getAttribute('data-line'));
  await toastText(page, 'error', /check failed/);
  // a good file: its function named, the mark gone, still nothing stored
  await page.fill('[data-test=script-editor]', FILE);
  await page.click('[data-test=script-check]');
  const ok = await toastText(page, 'ok', /check passed/);
  check(/no_admin/.test(ok) && /nothing was stored/.test(ok), 'check toast', ok);
  check((await page.locator('[data-test=script-error-line]').count()) === 0, 'no line marked');
  const stored = await page.evaluate(async (s) => {
    const a = await import('/lib/api.js');
    try {
      await a.get('script/get', { service: s });
      return true;
    } catch (e) {
      return e.status;
    }
  }, svc);
  check(stored === 404, 'a checked file is not stored', stored);

  // completion of a top-level name: the package's models
  const ed = page.locator('[data-test=script-editor]');
  await ed.click();
  await page.keyboard.press('Control+End');
  await page.keyboard.type('\n@pyfilter\ndef raw(p: RawP');
  await page.locator('[data-test=script-complete-RawPacket]').waitFor();
  await page.keyboard.press('Enter');
  await page.keyboard.type('):\n    if p.');
  // the parameter's members, from its annotation
  const pop = page.locator('[data-test=script-complete]');
  await page.locator('[data-test=script-complete-server_port]').waitFor();
  const names = await pop.locator('[role=option] code').allInnerTexts();
  check(names.includes('data') && names.includes('is_input') && !names.includes('HttpRequest'), 'members of RawPacket', names);
  await page.keyboard.type('data_s');
  await page.locator('[data-test=script-complete-data_size]').waitFor();
  await page.keyboard.press('Tab');
  await page.keyboard.type(' > 10:\n        return DR');
  await page.locator('[data-test=script-complete-DROP]').waitFor();
  await page.keyboard.press('Enter');
  await page.keyboard.press('Enter');
  await page.keyboard.type('FGEX_MAX');
  await page.locator('[data-test=script-complete-FGEX_MAX_HISTORY_SIZE]').waitFor();
  await page.keyboard.press('Escape');
  check(await pop.isHidden(), 'Escape closes the list');
  const text = await ed.inputValue();
  check(text.includes('def raw(p: RawPacket):\n    if p.data_size > 10:\n        return DROP\n'), 'completed text', text);
  await shot('completion');

  // hover: the doc of the name under the pointer
  const pos = await ed.evaluate((ta, word) => {
    const cs = getComputedStyle(ta);
    const cv = document.createElement('canvas').getContext('2d');
    cv.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const cw = cv.measureText('M'.repeat(20)).width / 20;
    const lh = parseFloat(cs.lineHeight);
    const lines = ta.value.split('\n');
    const ln = lines.findIndex((l) => l.includes(word));
    const col = lines[ln].indexOf(word) + 2;
    const r = ta.getBoundingClientRect();
    return { x: r.left + parseFloat(cs.paddingLeft) + (col + 0.5) * cw - ta.scrollLeft, y: r.top + parseFloat(cs.paddingTop) + (ln + 0.5) * lh - ta.scrollTop };
  }, 'RawPacket):');
  await page.mouse.move(pos.x, pos.y);
  const tip = page.locator('[data-test=script-hover]');
  await tip.waitFor();
  const said = await tip.innerText();
  check((await tip.getAttribute('data-name')) === 'RawPacket' && /model/.test(said) && /chunk/.test(said), 'hover RawPacket', said);
  await shot('hover');
}
