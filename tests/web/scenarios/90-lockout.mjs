// A wrong password is refused, a second try at once finds the address locked out (with the
// wait shown), and the right password works once the wait is over. The lockout is per address:
// the scenario ends logged in, so the ones after it (b_*, sorted after the numbered ones) are
// not locked out.
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

export default async function ({ page, base, shot, env }) {
  await page.goto(`${base}/`);
  await page.fill('[data-test=login-password]', 'not-the-password');
  await page.click('[data-test=login-submit]');
  await page.waitForSelector('[data-test=login-error][data-kind]');
  check((await page.getAttribute('[data-test=login-error]', 'data-kind')) === 'wrong', 'a wrong password was not refused as such');
  check(/Wrong password/.test(await page.textContent('[data-test=login-error]')), 'no wrong-password message');
  check(!(await page.isVisible('[data-test=menu]')), 'a wrong password opened the dashboard');
  await shot('wrong-password');
  // the failure locked the address out (1 s, doubling with each failure): the next try at once
  // finds it locked (a slow machine may need a second try, the first wait having passed)
  for (let i = 0; i < 3; i++) {
    await page.fill('[data-test=login-password]', 'not-the-password-either');
    await page.click('[data-test=login-submit]');
    await page.waitForFunction(() => !document.querySelector('[data-test=login-submit]').disabled);
    if ((await page.getAttribute('[data-test=login-error]', 'data-kind')) === 'locked') break;
  }
  check((await page.getAttribute('[data-test=login-error]', 'data-kind')) === 'locked', 'repeated wrong passwords never locked the address out');
  const msg = await page.textContent('[data-test=login-error]');
  check(/locked out, try again in \d+ s/.test(msg), `the lockout message does not show the wait: ${msg}`);
  await shot('locked-out');
  const wait = Number(/try again in (\d+) s/.exec(msg)[1]);
  await page.waitForTimeout((wait + 1.5) * 1000);
  await page.fill('[data-test=login-password]', env.password);
  await page.click('[data-test=login-submit]');
  await page.waitForSelector('[data-test=menu]', { timeout: 10000 });
}
