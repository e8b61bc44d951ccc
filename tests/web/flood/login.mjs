// test_listen: a player logs in and the page loads, with its live stream open, while other
// addresses hold hundreds of idle connections to the web listener (issue 24). Fails past
// env.budget_ms.
export default async function ({ page, login, env, log }) {
  const t0 = Date.now();
  await login(page);
  await page.waitForSelector('[data-test=status-bar]');
  const ms = Date.now() - t0;
  log(`logged in, page loaded and live in ${ms} ms`);
  if (ms > env.budget_ms) throw new Error(`the login and the page took ${ms} ms, over ${env.budget_ms}`);
  // the admin view shows what the listener's limits closed
  await page.click('[data-test=nav-admin]');
  await page.waitForFunction(() => /web listener/.test(document.querySelector('[data-test=admin-status]')?.textContent || ''));
  const text = await page.textContent('[data-test=admin-status]');
  if (!/web listener\d* open.*past 64 per address/.test(text)) throw new Error(`the admin view's listener line: ${text}`);
}
