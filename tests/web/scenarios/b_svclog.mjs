// A service's health log in its view (#/services/ID): what was done to it so far (added) and
// the box's own entries (controld started, marked "box"), then, live, what happens while the
// page is open (a stop, fail_open turned on: a warning that stands out), newest first.
import { check, mustApi } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await login(page);
  const svc = await mustApi(page, 'service/add', { name: 'blog', proto: 'tcp', port: 18093 });
  await page.goto(`${base}/#/services/${svc.id}`);
  const panel = page.locator('[data-test=health-log]');
  await panel.waitFor();
  await panel
    .locator('[data-test=health-row][data-kind=added]')
    .waitFor({ timeout: 10000 })
    .catch(async (e) => {
      throw new Error(`no "added" entry: ${await panel.innerText()} (${e.message.split('\n')[0]})`);
    });
  const box = panel.locator('[data-test=health-row][data-kind=controld-started]').first();
  await box.waitFor();
  check((await box.innerText()).includes('box'), 'the box entry is marked', await box.innerText());

  // live: no reload, the /api/live stream brings them
  await mustApi(page, 'service/stop', { service: String(svc.id) });
  await panel.locator('[data-test=health-row][data-kind=stopped]').waitFor({ timeout: 5000 });
  await mustApi(page, 'service/set', { service: String(svc.id), fail_open: 'on' });
  const warn = panel.locator('[data-test=health-row][data-kind=fail-open]');
  await warn.waitFor({ timeout: 5000 });
  check((await warn.getAttribute('data-level')) === 'warn', 'fail_open on is a warning');
  check((await warn.getAttribute('class')).includes('health-warn'), 'the warning is marked', await warn.getAttribute('class'));
  // it stands out: its badge is not drawn as an info entry's
  const colour = (sel) => panel.locator(sel).first().locator('.badge').evaluate((b) => getComputedStyle(b).color);
  const wc = await colour('[data-test=health-row][data-kind=fail-open]');
  const ic = await colour('[data-test=health-row][data-kind=stopped]');
  check(wc !== ic, 'the warning looks like an info entry', wc, ic);
  // newest first
  const kinds = await panel.locator('[data-test=health-row]').evaluateAll((rs) => rs.map((r) => r.dataset.kind));
  check(kinds[0] === 'fail-open' && kinds.indexOf('stopped') < kinds.indexOf('added'), 'the order', kinds);
  // another service's entries are not this one's
  await mustApi(page, 'service/add', { name: 'blog2', proto: 'tcp', port: 18094 });
  await page.waitForTimeout(1500);
  const texts = await panel.locator('[data-test=health-text]').allInnerTexts();
  check(!texts.some((t) => t.includes('blog2')), 'another service in the log', texts);
  await shot('view');
  await mustApi(page, 'service/rm', { service: 'blog2' });
  await mustApi(page, 'service/rm', { service: String(svc.id) });
}
