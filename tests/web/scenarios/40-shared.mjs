// One view for the whole team: what a teammate changes on another page shows on this one
// without a reload (the change messages of /api/live), filters added, disabled and removed.
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

export default async function ({ page, context, base, shot, env, login }) {
  await login(page);
  const other = await context.browser().newContext({ ignoreHTTPSErrors: true });
  try {
    const mate = await other.newPage();
    await login(mate);
    const id = await page.evaluate(async (name) => {
      const r = await fetch('/api/cmd/service/list');
      return (await r.json()).find((s) => s.name === name).id;
    }, env.service);
    await page.goto(`${base}/#/services/${id}`);
    await mate.goto(`${base}/#/services/${id}`);
    await page.waitForSelector('[data-test^=filter-row-]');
    await page.evaluate(() => {
      window.__fgexSamePage = true;
    });
    const n = await page.locator('[data-test^=filter-row-]').count();

    await mate.fill('[data-test=filter-regex-input]', 'mate[0-9]{3}');
    await mate.click('[data-test=filter-add]');
    const row = page.locator('[data-test^=filter-row-]', { hasText: 'mate[0-9]{3}' });
    await row.waitFor({ timeout: 15000 });
    check((await page.locator('[data-test^=filter-row-]').count()) === n + 1, 'the teammate\'s filter is not one more row');
    check((await row.getAttribute('data-active')) === 'true', 'the new filter is not shown active');

    const mrow = mate.locator('[data-test^=filter-row-]', { hasText: 'mate[0-9]{3}' });
    await mrow.locator('[data-test=filter-disable]').click();
    await page.waitForSelector('[data-test^=filter-row-][data-active=false]:has-text("mate[0-9]{3}")', { timeout: 15000 });

    await mrow.locator('[data-test=filter-rm]').click();
    await mate.click('[data-test=confirm-ok]');
    await row.waitFor({ state: 'detached', timeout: 15000 });
    check(await page.evaluate(() => window.__fgexSamePage === true), 'the page was reloaded');
    await shot('after-teammate');
  } finally {
    await other.close();
  }
}
