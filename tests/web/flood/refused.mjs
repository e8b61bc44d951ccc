// test_listen: the address already holds its most live streams; the page logs in and says why
// it gets no live updates (the server's 429), instead of failing silently or retrying at once.
export default async function ({ page, base, env }) {
  await page.goto(`${base}/`);
  await page.fill('[data-test=login-password]', env.password);
  await page.click('[data-test=login-submit]');
  await page.waitForSelector('[data-test=menu]');
  await page.waitForSelector('[data-test=live-state][data-state=refused]', { timeout: 15000 });
  const text = await page.textContent('[data-test=live-state]');
  if (!/too many live streams from this address/.test(text)) throw new Error(`the live state says: ${text}`);
}
