// Managing services and filters through the page: add a service, edit it, stop and start it,
// add a log-only filter with a label, import a ruleset file and export it again, edit a regex
// in place, remove a
// filter and a service (each after a confirm) and undo both from the toast; add a TLS service
// with its certificate and key uploaded, and give it limits of its own. test_web_ui checks the result with fgexctl after.
import { readFileSync } from 'node:fs';

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

const RULES = 'c2s /foo[0-9]+/\nboth nocase /bar\\x41/\n';

export default async function ({ page, base, shot, env, login }) {
  await login(page);
  await page.goto(`${base}/#/services`);
  await page.click('[data-test=svc-add-open]');
  await page.fill('[data-test=svc-name]', 'admin');
  await page.fill('[data-test=svc-port]', String(env.port2));
  await page.click('[data-test=svc-add]');
  await page.waitForSelector('[data-test=svc-title]');
  const id = new URL(page.url()).hash.split('/')[2];

  // edit: a new port
  await page.fill('[data-test=svc-edit-form] [data-test=svc-port]', String(env.port2 + 1));
  await page.click('[data-test=svc-save]');
  await page.waitForFunction((p) => document.body.textContent.includes(`*:${p}`), env.port2 + 1);
  // edit: its address, one of the box's only (service addr add, then rm of the old one)
  await page.fill('[data-test=svc-edit-form] [data-test=svc-addrs]', `${env.server}:${env.port2 + 1}`);
  await page.click('[data-test=svc-save]');
  await page.waitForFunction((a) => document.querySelector('[data-test=svc-title]').parentElement.textContent.includes(`tcp ${a} `), `${env.server}:${env.port2 + 1}`);

  // stop, start
  await page.click('[data-test=svc-stop]');
  await page.waitForSelector('[data-test=svc-status]:text("stopped")');
  await page.click('[data-test=svc-start]');
  await page.waitForSelector('[data-test=svc-status]:text("active")');

  // a log-only filter with a label, c2s, nocase
  await page.fill('[data-test=filter-regex-input]', 'sqli[0-9]');
  await page.selectOption('[data-test=filter-dir]', 'c2s');
  await page.check('[data-test=filter-nocase]');
  await page.check('[data-test=filter-log]');
  await page.fill('[data-test=filter-label]', 'team12 sqli');
  await page.click('[data-test=filter-add]');
  const logRow = page.locator('[data-test^=filter-row-]', { hasText: 'sqli[0-9]' });
  await logRow.waitFor();
  const lt = await logRow.textContent();
  check(lt.includes('log') && lt.includes('team12 sqli') && lt.includes('c2s nocase'), `the log filter row: ${lt}`);

  // import a ruleset file, export it again
  await page.setInputFiles('[data-test=ruleset-file]', { name: 'admin.rules', mimeType: 'text/plain', buffer: Buffer.from(RULES) });
  await page.click('[data-test=ruleset-import]');
  await page.waitForFunction(() => document.querySelectorAll('[data-test^=filter-row-]').length === 3);
  check((await page.textContent('[data-test=filters]')).includes('/bar\\x41/'), 'the imported regex is not shown as it is');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-test=ruleset-export]')]);
  const text = readFileSync(await dl.path(), 'utf8');
  for (const line of ['c2s nocase log label="team12 sqli" /sqli[0-9]/', 'c2s /foo[0-9]+/', 'both nocase /bar\\x41/']) {
    check(text.split('\n').includes(line), `the exported ruleset lacks ${line}:\n${text}`);
  }
  await shot('filters');

  // remove a filter (confirm), then undo
  const foo = page.locator('[data-test^=filter-row-]', { hasText: 'foo[0-9]+' });
  await foo.locator('[data-test=filter-rm]').click();
  await page.click('[data-test=confirm-ok]');
  await page.waitForFunction(() => document.querySelectorAll('[data-test^=filter-row-]').length === 2);
  await page.click('[data-test=undo]');
  await foo.waitFor();

  // edit a regex in place (issue 27): the form takes the filter, saving keeps its id
  const bar = page.locator('[data-test^=filter-row-]', { hasText: 'bar\\x41' });
  const barId = await bar.getAttribute('data-test');
  await bar.locator('[data-test=filter-edit]').click();
  check((await page.inputValue('[data-test=filter-regex-input]')) === 'bar\\x41', 'the edit form does not hold the regex');
  check(await page.isChecked('[data-test=filter-nocase]'), 'the edit form lost nocase');
  await page.fill('[data-test=filter-regex-input]', 'baz\\x42');
  await page.click('[data-test=filter-add]');
  const baz = page.locator(`[data-test=${barId}]`, { hasText: 'baz\\x42' });
  await baz.waitFor();
  check(!(await page.isVisible('[data-test=filter-edit-cancel]')), 'the form stayed in edit mode');

  // remove the service from the list (cancel first, then confirm), then undo
  await page.goto(`${base}/#/services`);
  const row = page.locator('[data-test=svc-row-admin]');
  await row.waitFor();
  await row.locator('[data-test=svc-rm]').click();
  await page.click('[data-test=confirm-cancel]');
  check(await row.isVisible(), 'cancel removed the service');
  await row.locator('[data-test=svc-rm]').click();
  check(await page.evaluate(() => document.activeElement.dataset.test === 'confirm-cancel'), 'the focus is not on Cancel');
  await page.keyboard.press('Escape');
  await page.locator('.modal-back').waitFor({ state: 'detached' });
  check(await row.isVisible(), 'Escape removed the service');
  await row.locator('[data-test=svc-rm]').click();
  await shot('confirm-remove');
  await page.click('[data-test=confirm-ok]');
  await row.waitFor({ state: 'detached' });
  await page.click('[data-test=undo]');
  await row.waitFor();
  check((await row.getAttribute('data-id')) === id, 'the service came back with another id');

  // a TLS service: certificate and key uploaded from files
  await page.click('[data-test=svc-add-open]');
  await page.fill('[data-test=svc-add-form] [data-test=svc-name]', 'tlsweb');
  await page.fill('[data-test=svc-add-form] [data-test=svc-port]', String(env.port2 + 2));
  await page.selectOption('[data-test=svc-add-form] [data-test=svc-layer]', 'proxy');
  await page.setInputFiles('[data-test=svc-add-form] [data-test=svc-tls-cert]', { name: 'c.pem', mimeType: 'application/x-pem-file', buffer: Buffer.from(env.tls_cert) });
  await page.setInputFiles('[data-test=svc-add-form] [data-test=svc-tls-key]', { name: 'k.pem', mimeType: 'application/x-pem-file', buffer: Buffer.from(env.tls_key) });
  await page.click('[data-test=svc-add-form] [data-test=svc-add]');
  await page.waitForSelector('[data-test=svc-title]:text("tlsweb")');
  check((await page.textContent('main')).includes('proxy + TLS'), 'the TLS service does not say TLS');

  // its own limits (issue 27): the settings form sends service set --max-conns --over-limit
  await page.fill('[data-test=svc-edit-form] [data-test=svc-max-conns]', '5');
  await page.selectOption('[data-test=svc-edit-form] [data-test=svc-over-limit]', 'forward');
  await page.fill('[data-test=svc-edit-form] [data-test=svc-first-byte]', '7');
  await page.click('[data-test=svc-save]');
  await page.waitForFunction(() => document.querySelector('[data-test=svc-edit-form] [data-test=svc-max-conns]').value === '5');
  await page.waitForSelector('[data-test=svc-limit-hits]:text("Never at its connection limit")');
}
