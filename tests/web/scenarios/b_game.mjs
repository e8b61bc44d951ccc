// Game view (issue 28): set the game from the page (flag format, checker, teams), see it shown
// and in controld; a bad flag format is refused with the reason; clear it after a confirmation.
import { check, mustApi, view, toastText } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await login(page);
  await view(page, base, 'game');
  await page.locator('[data-test=game-facts] dd[data-k=none]').waitFor();

  await page.fill('[data-test=game-flag]', '[A-Z0-9]{31}=');
  await page.fill('[data-test=game-checker]', '10.10.0.1 fd00:10::1');
  await page.fill('[data-test=game-team]', '10.60.0.0/16');
  await page.click('[data-test=game-set]');
  await toastText(page, 'ok', /game set/);
  const g = await mustApi(page, 'game/show', {}, 'GET');
  check(g.set && g.flag === '[A-Z0-9]{31}=' && g.checker.join(' ') === '10.10.0.1 fd00:10::1' && g.team.join(' ') === '10.60.0.0/16', 'the game in controld', g);
  check((await page.locator('[data-test=game-facts] dd[data-k=flag]').innerText()) === '[A-Z0-9]{31}=', 'the flag shown');
  check((await page.locator('[data-test=game-facts] dd[data-k=checker]').innerText()) === '10.10.0.1 fd00:10::1', 'the checker shown');
  await shot('set');

  await page.fill('[data-test=game-flag]', 'ab(c');
  await page.click('[data-test=game-set]');
  await toastText(page, 'error', /invalid flag format/);
  check((await mustApi(page, 'game/show', {}, 'GET')).flag === '[A-Z0-9]{31}=', 'a refused set changed nothing');

  await page.click('[data-test=game-clear]');
  await page.click('[data-test=confirm-ok]');
  await toastText(page, 'ok', /game cleared/);
  check(!(await mustApi(page, 'game/show', {}, 'GET')).set, 'cleared in controld');
  await page.locator('[data-test=game-facts] dd[data-k=none]').waitFor();
}
