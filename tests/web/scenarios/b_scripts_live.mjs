// Scripts view, live: a file set from the editor on the core scenario's service (moved to the
// proxy layer for it) blocks real traffic (env.commands.evil, a client in the client namespace
// sending env.evil: reset, and none of its bytes reach the service, which test_web_ui checks
// on the server's side); the page shows the function's block and its print in the log as they
// happen, and its blocked counter, without a reload; a regex tried on the capture then finds
// the connection already blocked, by a script. The service is put back as it was.
import { check, mustApi, view, toastText } from './b_util.js';

const FILE = `from fgex import *

@pyfilter
def evil_marker(stream: TCPInputStream):
    if b"evil" in stream.data:
        print("evil seen by the script")
        return REJECT
`;

export default async function ({ page, base, shot, env, login, log }) {
  check(env.commands && env.commands.evil && env.service, 'the env gives no traffic to send');
  await login(page);
  const svc = env.service;
  const before = await mustApi(page, 'service/show', { service: svc }, 'GET');
  const filters = await mustApi(page, 'filter/list', { service: svc }, 'GET');
  // the core scenario's filters would block first: disabled while the script is judged
  const active = filters.filter((f) => f.active);
  for (const f of active) await mustApi(page, 'filter/disable', { filter: f.id });
  if (before.layer !== 'proxy') await mustApi(page, 'service/set', { service: svc, layer: 'proxy' });
  try {
    await view(page, base, 'scripts', svc);
    await page.waitForSelector(`[data-test=view-scripts][data-loaded=${svc}]`);
    await page.fill('[data-test=script-editor]', FILE);
    await page.click('[data-test=script-save]');
    await page.locator('[data-test=script-fn-evil_marker]').waitFor();
    await toastText(page, 'ok', /script set/);

    const sent = env.run('evil');
    log('client:', JSON.stringify(sent));
    // the client was cut off, with nothing back from the service; that none of its bytes
    // reached the service, test_web_ui checks on the server's side after the scenario
    const res = sent.find((e) => e.event === 'result');
    check(res && res.connected && res.end === 'reset' && Buffer.from(res.received || '', 'base64').length === 0,
      'the blocked client was not reset before any reply', sent);
    const logBlock = page.locator('[data-test=script-log-line]', { hasText: 'evil_marker' }).filter({ hasText: 'block' });
    await logBlock.first().waitFor({ timeout: 15000 });
    await page.locator('[data-test=script-log-line]', { hasText: 'evil seen by the script' }).first().waitFor({ timeout: 15000 });
    await page.waitForFunction(
      () => Number(document.querySelector('[data-test=script-fn-evil_marker] td:nth-child(4)').innerText) >= 1,
      null,
      { timeout: 15000 },
    );
    const list = await mustApi(page, 'script/list', { service: svc }, 'GET');
    check(list.functions[0].blocked >= 1, 'controld counted the block', list, sent);
    await shot('live-log');

    // the capture's view of it: a regex tried on the capture finds the connection the script
    // blocked, already blocked, by a script (no filter id)
    check(/^\d+$/.test(String(before.id)), 'service/show gives no id', before);
    await page.goto(`${base}/#/services/${before.id}`);
    await page.fill('[data-test=filter-regex-input]', env.test_regex);
    await page.click('[data-test=filter-test]');
    await page.waitForSelector('[data-test=test-results]');
    const byScript = page.locator('[data-test=test-hit]', { hasText: 'already blocked by script evil_marker' });
    check((await byScript.count()) >= 1, 'no filter test hit says the script\'s function blocked it',
      await page.textContent('[data-test=test-results]'));

    // the events view names the script's block by its function (the feed and the top
    // attackers), never "#0"
    await page.goto(`${base}/#/events`);
    await page.locator('[data-test=event] [data-test=event-judge]', { hasText: 'script reject evil_marker' }).first().waitFor({ timeout: 15000 });
    await page.locator('[data-test=top-judge]', { hasText: 'script evil_marker' }).first().waitFor({ timeout: 15000 });
    const judges = await page.locator('[data-test=top-judge]').allInnerTexts();
    check(!judges.some((t) => /#0\b/.test(t)), 'a top attackers row says #0', judges);
    const evItem = page.locator('[data-test=event]', { has: page.locator('[data-test=event-judge]', { hasText: 'script reject evil_marker' }) }).first();
    await evItem.locator('[data-test=event-show]').click();
    await evItem.locator('[data-test=event-detail-judge]', { hasText: 'blocked by script reject evil_marker' }).waitFor({ timeout: 15000 });
    await shot('events-script');
  } finally {
    await mustApi(page, 'script/rm', { service: svc }).catch(() => {});
    if (before.layer !== 'proxy') await mustApi(page, 'service/set', { service: svc, layer: before.layer });
    for (const f of active) await mustApi(page, 'filter/enable', { filter: f.id });
  }
}
