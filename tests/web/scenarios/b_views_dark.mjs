// The scripts, firewall, workers, history and admin views in the dark theme, at a laptop's and
// a phone's width: each renders (its data loaded, no page error) and is saved for a person to
// look at.
import { proxyService, view } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await page.emulateMedia({ colorScheme: 'dark' });
  await login(page);
  const svc = await proxyService(page);
  const ready = {
    scripts: `[data-test=view-scripts][data-loaded=${svc}]`,
    fw: '[data-test=view-fw][data-loaded]',
    workers: '[data-test=worker-nfq]',
    history: '[data-test=history] tbody tr',
    admin: '[data-test=admin-status] dd',
  };
  for (const [width, tag] of [[1366, 'dark'], [390, 'phone-dark']]) {
    await page.setViewportSize({ width, height: 860 });
    for (const [id, sel] of Object.entries(ready)) {
      await view(page, base, id, ...(id === 'scripts' ? [svc] : []));
      await page.waitForSelector(sel);
      await shot(`${id}-${tag}`);
    }
  }
}
