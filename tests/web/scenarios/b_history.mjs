// History view: a change made (a service added) is listed with who and what; "Undo" reverts it
// and shows the diff it returned (the service removed), "Redo" brings it back.
import { check, api, mustApi, view, toastText } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await login(page);
  await api(page, 'service/rm', { service: 'bhist' });
  await mustApi(page, 'service/add', { name: 'bhist', proto: 'tcp', port: 18090 });
  const hist = await mustApi(page, 'history', { limit: 5 }, 'GET');
  const mine = hist[hist.length - 1];
  check(/service add bhist/.test(mine.what), 'recorded', mine);

  await view(page, base, 'history');
  const row = page.locator(`[data-test=history-${mine.seq}]`);
  await row.waitFor();
  const text = await row.innerText();
  check(text.includes('service add bhist') && text.includes(mine.who), 'row shows what and who', text);
  await shot('view');

  await page.click('[data-test=history-undo]');
  const diff = page.locator('[data-test=undo-diff]');
  await diff.waitFor();
  const d = await diff.innerText();
  check(/^- service \d+ bhist/m.test(d), 'the undo diff removes bhist', d);
  let list = await mustApi(page, 'service/list', {}, 'GET');
  check(!list.some((s) => s.name === 'bhist'), 'bhist gone after undo');
  await page.locator(`[data-test=history-${mine.seq}] [data-test=history-undone]`).waitFor();
  await shot('undone');

  await page.click('[data-test=history-redo]');
  await toastText(page, 'ok', /redone/);
  const rd = await page.locator('[data-test=redo-diff]').innerText();
  check(/^\+ service \d+ bhist/m.test(rd), 'the redo diff adds bhist', rd);
  list = await mustApi(page, 'service/list', {}, 'GET');
  check(list.some((s) => s.name === 'bhist'), 'bhist back after redo');
  await mustApi(page, 'service/rm', { service: 'bhist' });
}
