// Workers view: every worker with its state and figures; restarting the nfq worker from the
// page gives it a new pid and one more restart, and the page shows both.
import { check, mustApi, view, toastText } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await login(page);
  await view(page, base, 'workers');
  await page.locator('[data-test=worker-nfq]').waitFor();
  await page.locator('[data-test=worker-proxy]').waitFor();
  const before = (await mustApi(page, 'worker/list', {}, 'GET')).find((w) => w.kind === 'nfq');
  check(/running/.test(await page.locator('[data-test=worker-nfq] [data-test=worker-state]').innerText()), 'nfq running');
  const shown = await page.locator('[data-test=worker-nfq] dd[data-k=restarts]').innerText();
  check(shown === String(before.restarts), 'restarts shown', shown, before.restarts);
  await shot('view');

  await page.click('[data-test=worker-restart-nfq]');
  await page.click('[data-test=confirm-ok]');
  await toastText(page, 'ok', /nfq restarted/);
  const after = (await mustApi(page, 'worker/list', {}, 'GET')).find((w) => w.kind === 'nfq');
  check(after.restarts === before.restarts + 1 && after.pid !== before.pid && after.state === 'running', 'restarted', before, after);
  await page.waitForFunction(
    (n) => document.querySelector('[data-test=worker-nfq] dd[data-k=restarts]').innerText === String(n),
    after.restarts,
  );
  check((await page.locator('[data-test=worker-nfq]').innerText()).includes(`pid ${after.pid}`), 'new pid shown');

  // a phone's width: the cards stack
  await page.setViewportSize({ width: 390, height: 800 });
  await shot('phone');
}
