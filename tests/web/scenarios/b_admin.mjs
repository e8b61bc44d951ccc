// Admin view: status and the TLS fingerprint shown; the backup exported (a download that is the
// export file, with the secrets warning when asked for); a backup imported: the dry run's diff
// first, nothing changed, then applied.
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, api, mustApi, view, toastText } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await login(page);
  await api(page, 'service/rm', { service: 'bimp' });
  await view(page, base, 'admin');
  const status = await mustApi(page, 'status', {}, 'GET');
  await page.waitForFunction((v) => document.querySelector('[data-test=admin-status]').innerText.includes(v), status.version);
  // issue 24: the rules and the store as status has them
  const rules = await page.locator('[data-test=admin-rules]').innerText();
  check(status.rules.restored ? rules.startsWith(`restored ${status.rules.restored} times`) : rules === 'in place (never restored)', 'admin rules', rules);
  const store = await page.locator('[data-test=admin-store]').innerText();
  check(status.store.degraded ? store.startsWith('DEGRADED since') : store.startsWith('ok'), 'admin store', store);
  check((await page.locator('[data-test=status-health]').count()) === 1, 'no health part in the status bar');
  // the page is served over controld's TLS: there is always a certificate to show
  const cert = await mustApi(page, 'cert', {}, 'GET');
  check(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/.test(cert.fingerprint), 'cert fingerprint', cert);
  await page.waitForFunction((f) => document.querySelector('[data-test=admin-cert]').innerText === f, cert.fingerprint);
  await shot('view');

  // export: the download is the configuration
  check(await page.locator('[data-test=admin-export-warning]').isHidden(), 'no warning without secrets');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-test=admin-export]')]);
  check(/^fgex-backup-.*\.json$/.test(dl.suggestedFilename()), 'file name', dl.suggestedFilename());
  const file = join(tmpdir(), `b_admin-${process.pid}.json`);
  await dl.saveAs(file);
  const raw = readFileSync(file, 'utf8');
  const doc = JSON.parse(raw);
  const direct = await page.evaluate(async () => (await fetch('/api/cmd/export', { credentials: 'same-origin' })).text());
  check(raw === direct, 'the download is the export file byte for byte');
  const list = await mustApi(page, 'service/list', {}, 'GET');
  check(doc.format === 'fgex-config' && doc.services.length === list.length, 'the export holds every service', doc.services.length, list.length);
  await page.check('[data-test=admin-export-secrets]');
  check(await page.locator('[data-test=admin-export-warning]').isVisible(), 'the secrets warning shows');
  const [dl2] = await Promise.all([page.waitForEvent('download'), page.click('[data-test=admin-export]')]);
  check(JSON.parse(readFileSync(await dl2.path(), 'utf8')).format === 'fgex-config', 'export with secrets');
  await page.uncheck('[data-test=admin-export-secrets]');

  // a malformed file: refused with its line and column, nothing offered to apply
  writeFileSync(file, '{"services": [\n  {"name": "x",}\n]}\n');
  await page.setInputFiles('[data-test=admin-import-file]', file);
  const bad = await page.locator('[data-test=admin-import-error]').innerText();
  check(/line 2/.test(bad), 'the error names the line', bad);
  check((await page.locator('[data-test=admin-import-apply]').count()) === 0, 'nothing to apply');

  // import: the backup plus one service; the dry run shows it and changes nothing
  const ports = new Set(doc.services.map((s) => s.port));
  let port = 18100;
  while (ports.has(port)) port++;
  doc.services.push({ name: 'bimp', proto: 'tcp', port, filters: [{ regex: 'bimp[0-9]+', dir: 'c2s' }] });
  writeFileSync(file, JSON.stringify(doc));
  await page.setInputFiles('[data-test=admin-import-file]', file);
  const diff = page.locator('[data-test=admin-import-diff]');
  await diff.waitFor();
  const d = await diff.innerText();
  check(/^\+ service \d* ?bimp/m.test(d) && /^\+ filter \d* ?bimp c2s \/bimp\[0-9\]\+\//m.test(d), 'dry-run diff', d);
  check(!(await mustApi(page, 'service/list', {}, 'GET')).some((s) => s.name === 'bimp'), 'the dry run changed nothing');
  await shot('import-dry-run');
  await page.click('[data-test=admin-import-apply]');
  await page.click('[data-test=confirm-ok]');
  await page.locator('[data-test=admin-import-done]').waitFor();
  await toastText(page, 'ok', /imported/);
  check((await mustApi(page, 'service/list', {}, 'GET')).some((s) => s.name === 'bimp' && s.port === port), 'imported');
  await mustApi(page, 'service/rm', { service: 'bimp' });
}
