// Screenshots of every view of the menu (laptop and phone widths, light and dark) for a person
// to look at, and the layout checks that can be made by a program: no page wider than the
// screen (tables scroll in their box), the phone menu collapsed behind its button, the theme
// toggle kept across a reload.
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

const SIZES = {
  laptop: { width: 1366, height: 860 },
  phone: { width: 390, height: 844 },
};

// Until the view's data arrived and is drawn: no /api/cmd/ call in flight for 150 ms (a view
// that loads in steps starts its next call within that), then two frames; at most 5 s (a view
// that keeps asking is taken as it is then).
function settler(page) {
  let inflight = 0;
  const cmd = (r) => r.url().includes('/api/cmd/');
  page.on('request', (r) => cmd(r) && inflight++);
  page.on('requestfinished', (r) => cmd(r) && inflight--);
  page.on('requestfailed', (r) => cmd(r) && inflight--);
  return async () => {
    const deadline = Date.now() + 5000;
    let quiet = Date.now();
    while (Date.now() < deadline) {
      if (inflight > 0) quiet = Date.now();
      else if (Date.now() - quiet >= 150) break;
      await page.waitForTimeout(25);
    }
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  };
}

export default async function ({ page, base, shot, login }) {
  const settled = settler(page);
  await login(page);
  const views = await page.$$eval('[data-test=menu] a', (as) => as.map((a) => a.dataset.view));
  check(views.includes('services') && views.includes('events') && views.includes('charts'), `menu: ${views}`);
  const firstService = await page.evaluate(async () => {
    const r = await fetch('/api/cmd/service/list', { headers: { Accept: 'application/json' } });
    const l = await r.json();
    return l.length ? l[0].id : null;
  });
  const routes = views.map((v) => [v, `#/${v}`]);
  if (firstService !== null) routes.splice(1, 0, ['service', `#/services/${firstService}`]);
  routes.push(['charts-48h', '#/charts/48h']);
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [size, vp] of Object.entries(SIZES)) {
      await page.setViewportSize(vp);
      for (const [name, hash] of routes) {
        await page.goto(`${base}/${hash}`);
        await page.waitForSelector('main#view > *');
        await settled(); // the view's data arrives
        const theme = await page.evaluate(() => getComputedStyle(document.documentElement).colorScheme);
        check(theme.includes(scheme), `${name}: the page is not ${scheme} (${theme})`);
        const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        check(over <= 1, `${name} at ${size} width is ${over}px wider than the screen`);
        await shot(`${name}-${size}-${scheme}`);
      }
      if (size === 'phone') {
        check(!(await page.isVisible('[data-test=menu]')), 'the phone menu is not collapsed');
        await page.click('[data-test=menu-button]');
        check(await page.isVisible('[data-test=menu]'), 'the menu button does not open the menu');
        await shot(`menu-phone-${scheme}`);
        await page.click('[data-test=nav-events]');
        await page.waitForSelector('[data-test=feed]', { state: 'attached' });
        check(!(await page.isVisible('[data-test=menu]')), 'the menu stays open after choosing a view');
      }
    }
  }

  // the toggle beats the system's choice and is kept
  await page.setViewportSize(SIZES.laptop);
  await page.emulateMedia({ colorScheme: 'light' });
  await page.goto(`${base}/#/services`);
  await page.waitForSelector('[data-test=theme-toggle]');
  await page.click('[data-test=theme-toggle]');
  await page.reload();
  await page.waitForSelector('[data-test=menu]');
  const kept = await page.evaluate(() => [document.documentElement.dataset.theme, getComputedStyle(document.documentElement).colorScheme]);
  check(kept[0] === 'dark' && kept[1].includes('dark'), `the theme toggle was not kept: ${kept}`);
  // keyboard focus is visible: a focused link gets an outline
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  const outline = await page.evaluate(() => {
    const el = document.activeElement;
    return el && el !== document.body ? getComputedStyle(el).outlineStyle : 'none';
  });
  check(outline !== 'none', `the focused element shows no outline (${outline})`);
  await page.click('[data-test=logout]');
  await page.waitForSelector('[data-test=login]');
  await shot('login-laptop-dark');
}
