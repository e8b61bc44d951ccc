// test_listen: chromium's first page load, before the flood (its start-up is not the login's).
export default async function ({ page, base }) {
  await page.goto(`${base}/`);
  await page.waitForSelector('[data-test=login-password]');
}
