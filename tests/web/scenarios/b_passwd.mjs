// Admin view, the password: two different entries are refused on the page; a change with
// "log out every other session" ends another browser's session, keeps this one, and the new
// password logs in (the old one no longer does); then the password is set back.
import { check, api, view, toastText } from './b_util.js';

const NEW = 'b-passwd-Zq7-new';

async function change(page, base, pw) {
  await view(page, base, 'admin');
  await page.fill('[data-test=admin-pw1]', pw);
  await page.fill('[data-test=admin-pw2]', pw);
  await page.check('[data-test=admin-expire]');
  await page.click('[data-test=admin-pw-submit]');
  return toastText(page, 'ok', /password changed/);
}

export default async function ({ page, context, base, shot, env, login }) {
  await login(page);
  const other = await context.browser().newContext({ ignoreHTTPSErrors: true });
  const op = await other.newPage();
  await login(op);
  check((await api(op, 'status', {}, 'GET')).ok, 'the other session works');

  await view(page, base, 'admin');
  await page.fill('[data-test=admin-pw1]', NEW);
  await page.fill('[data-test=admin-pw2]', `${NEW}x`);
  await page.click('[data-test=admin-pw-submit]');
  await toastText(page, 'error', /differ/);
  await shot('view');

  const said = await change(page, base, NEW);
  check(/every other session logged out/.test(said), 'the reply says the other sessions were expired', said);
  try {
    {
      const o = await api(op, 'status', {}, 'GET');
      check(!o.ok && o.status === 401, 'the other session was expired', o);
      check((await api(page, 'status', {}, 'GET')).ok, 'this session stays');
      await page.click('[data-test=logout]');
      await page.waitForSelector('[data-test=login]');
      await page.fill('[data-test=login-password]', env.password);
      await page.click('[data-test=login-submit]');
      await page.waitForSelector('[data-test=login-error][data-kind=wrong]');
      // that failure locked this address out for a moment: the new password once the wait is over
      for (let i = 0; ; i++) {
        await page.fill('[data-test=login-password]', NEW);
        await page.click('[data-test=login-submit]');
        await page.waitForSelector('[data-test=menu], [data-test=login-error][data-kind]:not(:empty)');
        if (await page.isVisible('[data-test=menu]')) break;
        const msg = await page.textContent('[data-test=login-error]');
        const m = /try again in (\d+) s/.exec(msg);
        check(m && i < 5, 'the new password was refused', msg);
        await page.waitForTimeout((Number(m[1]) + 0.5) * 1000);
      }
    }
  } finally {
    await change(page, base, env.password);
    await other.close();
  }
}
