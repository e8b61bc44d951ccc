// Scripts view: a file refused by the check shows its error at its line in the editor, nothing
// stored; a good file is set and its functions listed with their counters; one is disabled.
import { check, mustApi, proxyService, view, toastText } from './b_util.js';

const BAD = `from fgex import *
# the annotation below has a typo: the check refuses the file at line 5

@pyfilter
def probe(req: HttpReqest):
    return None
`;

const GOOD = `from fgex import *

@pyfilter
def no_flag(stream: TCPInputStream):
    if b"FLAG{" in stream.data:
        return REJECT

@pyfilter
def no_export(req: HttpRequest):
    if req.url and req.url.startswith("/export"):
        return REJECT
`;

export default async function ({ page, base, shot, login }) {
  await login(page);
  const svc = await proxyService(page);
  await mustApi(page, 'script/rm', { service: svc }).catch(() => {});
  await view(page, base, 'scripts', svc);
  await page.waitForSelector(`[data-test=view-scripts][data-loaded=${svc}]`);

  // a local file opened into the editor (not stored until Set)
  await page.setInputFiles('[data-test=script-open-file]', { name: 'bad.py', mimeType: 'text/plain', buffer: Buffer.from(BAD) });
  await page.waitForFunction((b) => document.querySelector('[data-test=script-editor]').value === b, BAD);
  check((await page.locator('[data-test=script-editor] ~ *').count()) === 0 && (await page.locator('.ed-ln').count()) === BAD.split('\n').length, 'a line number per line');

  // refused: the error names line 5, the gutter marks it, nothing is stored
  await page.fill('[data-test=script-editor]', BAD);
  await page.click('[data-test=script-save]');
  const marked = page.locator('[data-test=script-error-line]');
  await marked.waitFor();
  check((await marked.getAttribute('data-line')) === '5', 'marked line', await marked.getAttribute('data-line'));
  check((await marked.count()) === 1, 'one line marked');
  const err = await page.locator('[data-test=script-error]').innerText();
  check(/^line 5: /.test(err) && /HttpReqest/.test(err), 'error text', err);
  // the cursor is put on the line: the textarea's selection is line 5
  const sel = await page.$eval('[data-test=script-editor]', (t) => t.value.slice(t.selectionStart, t.selectionEnd));
  check(sel === 'def probe(req: HttpReqest):', 'selection', sel);
  const stored = await page.evaluate(async (s) => {
    const a = await import('/lib/api.js');
    try {
      await a.get('script/get', { service: s });
      return true;
    } catch (e) {
      return e.status;
    }
  }, svc);
  check(stored === 404, 'a refused file is not stored', stored);
  await shot('error-marked');

  // accepted: the mark goes, the functions are listed
  await page.fill('[data-test=script-editor]', GOOD);
  await page.click('[data-test=script-save]');
  await page.locator('[data-test=script-fn-no_flag]').waitFor();
  await page.locator('[data-test=script-fn-no_export]').waitFor();
  check((await page.locator('[data-test=script-error-line]').count()) === 0, 'no line marked after a good set');
  check(await page.locator('[data-test=script-error]').isHidden(), 'the error box is hidden');
  const got = await mustApi(page, 'script/get', { service: svc }, 'GET');
  check(got.source === GOOD, 'stored byte for byte');
  const row = page.locator('[data-test=script-fn-no_flag]');
  check(/\b4\b/.test(await row.locator('td').nth(1).innerText()), 'no_flag is at line 4');

  // disable one function: the row says off, controld says inactive
  await page.click('[data-test=script-fn-toggle-no_export]');
  await page.waitForFunction(() => /off/.test(document.querySelector('[data-test=script-fn-no_export]').innerText));
  const list = await mustApi(page, 'script/list', { service: svc }, 'GET');
  const fx = list.functions.find((f) => f.name === 'no_export');
  check(fx && fx.active === false, 'no_export disabled in controld', list);

  // a reload of the view shows what controld holds
  await view(page, base, 'scripts', svc);
  await page.waitForSelector(`[data-test=view-scripts][data-loaded=${svc}]`);
  await page.waitForFunction((g) => document.querySelector('[data-test=script-editor]').value === g, GOOD);
  await shot('view');

  // another service picked: the address follows it, and coming back shows this file again
  const other = (await mustApi(page, 'service/list', {}, 'GET')).find((s) => s.proto === 'tcp' && s.name !== svc);
  if (other) {
    await page.selectOption('[data-test=script-service]', other.name);
    await page.waitForSelector(`[data-test=view-scripts][data-loaded="${other.name}"]`);
    check(decodeURIComponent(new URL(page.url()).hash) === `#/scripts/${other.name}`, 'the address names the service', page.url());
    await page.selectOption('[data-test=script-service]', svc);
    await page.waitForSelector(`[data-test=view-scripts][data-loaded=${svc}]`);
    check((await page.inputValue('[data-test=script-editor]')) === GOOD, 'back to the file');
  }

  // remove: confirmed, then the view shows no script
  await page.click('[data-test=script-rm]');
  await page.click('[data-test=confirm-ok]');
  await toastText(page, 'ok', /script removed/);
  await page.waitForSelector(`[data-test=view-scripts][data-loaded=${svc}]`);
  check(/no script/.test(await page.locator('[data-test=script-info]').innerText()), 'the view says no script');
}
