// test_listen: chromium's first pages, before the flood (its start-up is not the login's), and
// a login at the machine's own pace, for comparison.
export default async function ({ page, login, log }) {
  const t0 = Date.now();
  await login(page);
  await page.waitForSelector('[data-test=status-bar]');
  log(`logged in, page loaded and live in ${Date.now() - t0} ms`);
}
