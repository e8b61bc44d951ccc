// The "Done means", end to end through the page: log in, add a service and a filter,
// send real traffic through it, see the block event arrive live (no reload), a blocked
// connection's capture and its pcap download, test a regex on the capture, disable the filter
// (and the same traffic then passes).
import { readFileSync } from 'node:fs';

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

function result(lines) {
  const r = lines.find((l) => l.event === 'result');
  check(r, `the client printed no result: ${JSON.stringify(lines).slice(0, 300)}`);
  return r;
}

export default async function ({ page, base, shot, env, login, log }) {
  await login(page);
  const version = await page.textContent('[data-test=version]');
  check(/controld \S+/.test(version), `status bar shows no version: ${version}`);

  // add the service through the form
  await page.goto(`${base}/#/services`);
  await page.click('[data-test=svc-add-open]');
  await page.fill('[data-test=svc-name]', env.service);
  await page.selectOption('[data-test=svc-proto]', 'tcp');
  await page.fill('[data-test=svc-port]', String(env.port));
  await page.click('[data-test=svc-add]');
  await page.waitForSelector('[data-test=svc-title]');
  check((await page.textContent('[data-test=svc-title]')) === env.service, 'the new service is not shown');
  const id = decodeURIComponent(new URL(page.url()).hash.split('/')[2] || '');
  check(/^\d+$/.test(id), `no service id in ${page.url()}`);
  log(`service ${env.service} is ${id}`);

  // add a filter
  await page.fill('[data-test=filter-regex-input]', env.regex);
  await page.click('[data-test=filter-add]');
  const row = page.locator('[data-test^=filter-row-]');
  await row.first().waitFor();
  check((await row.count()) === 1, 'not exactly one filter row');
  const filterId = (await row.first().getAttribute('data-test')).replace('filter-row-', '');
  check((await row.first().getAttribute('data-active')) === 'true', 'the new filter is not active');
  await shot('service-with-filter');

  // the services list counts the block live (the /api/live stats), no reload
  await page.goto(`${base}/#/services`);
  const blockedCell = page.locator(`[data-test=svc-row-${env.service}] [data-test=svc-blocked]`);
  await blockedCell.waitFor();
  check((await blockedCell.textContent()) === '0', `blocks before any traffic: ${await blockedCell.textContent()}`);
  await page.evaluate(() => {
    window.__fgexSamePage = true;
  });
  await page.focus(`[data-test=svc-row-${env.service}] [data-test=svc-stop]`);
  const r0 = result(env.run('evil'));
  check(r0.end === 'reset', `the evil connection was not reset (end ${r0.end})`);
  await page.waitForFunction((sel) => document.querySelector(sel).textContent === '1', `[data-test=svc-row-${env.service}] [data-test=svc-blocked]`, {
    timeout: 15000,
  });
  check(await page.evaluate(() => window.__fgexSamePage === true), 'the page was reloaded');
  check(await page.evaluate(() => document.activeElement.dataset.test === 'svc-stop'), 'the live update took the keyboard focus away');

  // the events view, then real traffic: the block arrives over /api/live, no reload
  await page.click('[data-test=nav-events]');
  await page.waitForSelector('[data-test=feed]', { state: 'attached' });
  await page.waitForFunction(() => document.querySelector('[data-test=feed-count]').textContent !== '');
  const before = await page.locator('[data-test=event][data-action=block]').count();
  check(before === 1, `the feed shows ${before} blocks, not the first one`);
  const r = result(env.run('evil'));
  check(r.end === 'reset', `the evil connection was not reset (end ${r.end})`);
  await page.waitForFunction((n) => document.querySelectorAll('[data-test=event][data-action=block]').length > n, before, {
    timeout: 15000,
  });
  check(await page.evaluate(() => window.__fgexSamePage === true), 'the page was reloaded');
  const ev = page.locator('[data-test=event][data-action=block]').first();
  // its SEQ, what `events show SEQ` takes
  const seqText = await ev.locator('[data-test=event-seq]').textContent();
  check(seqText === `#${await ev.getAttribute('data-seq')}` && /^#\d+$/.test(seqText), `the event shows no SEQ: ${seqText}`);
  // the excerpt, with the match's end marked: hyperscan reports evil[0-9]+ after its first digit
  const ascii = await ev.locator('[data-test=excerpt-ascii]').textContent();
  const [pre, post] = ascii.split('|');
  check((pre + post).includes(env.evil), `the event's excerpt ${JSON.stringify(ascii)} lacks ${env.evil}`);
  check(pre.endsWith(env.evil.slice(0, 5)), `the match end is not marked after "${env.evil.slice(0, 5)}": ${ascii}`);
  const hex = await ev.locator('[data-test=hexdump]').textContent();
  check(/65 76 69 +6c/.test(hex), `the hex excerpt lacks "evil": ${hex.slice(0, 200)}`);
  await page.waitForSelector('[data-test=top-row]');
  const top = await page.textContent('[data-test=top]');
  check(top.includes(env.client), `top attackers do not show ${env.client}: ${top}`);
  await shot('event-live');

  // the blocked connection's capture, and its pcap
  await ev.locator('[data-test=event-show]').click();
  await ev.locator('[data-test=capture-c2s]').waitFor();
  const cap = await ev.locator('[data-test=capture-c2s]').textContent();
  check(/65 76 69 +6c/.test(cap), `the capture lacks the evil bytes: ${cap.slice(0, 300)}`);
  const [dl] = await Promise.all([page.waitForEvent('download'), ev.locator('[data-test=event-pcap]').click()]);
  const pcap = readFileSync(await dl.path());
  const magic = pcap.length >= 4 ? pcap.readUInt32LE(0) : 0;
  check(magic === 0xa1b2c3d4 || magic === 0xa1b23c4d, `the download is no pcap (magic ${magic.toString(16)}, ${pcap.length} bytes)`);
  check(pcap.length > 24 + 16, `the pcap holds no packet (${pcap.length} bytes)`);
  check(pcap.includes(Buffer.from(env.evil)), 'the pcap lacks the blocked bytes');
  await shot('event-capture');

  // test a regex on the capture before adding it
  await page.goto(`${base}/#/services/${id}`);
  await page.fill('[data-test=filter-regex-input]', env.test_regex);
  await page.click('[data-test=filter-test]');
  await page.waitForSelector('[data-test=test-results]');
  const summary = await page.textContent('[data-test=test-summary]');
  check(/Would have blocked [1-9]\d* of [1-9]\d*/.test(summary), `test summary: ${summary}`);
  const hit = page.locator('[data-test=test-hit]').first();
  check((await hit.locator('[data-test=excerpt-ascii]').textContent()).replace('|', '').includes(env.evil), 'the hit has no excerpt of the evil bytes');
  check((await hit.textContent()).includes(`already blocked by filter ${filterId}`), 'the hit does not say it was blocked by the filter');
  await shot('regex-test');

  // disable the filter: the same bytes then pass
  await page.click(`[data-test=filter-row-${filterId}] [data-test=filter-disable]`);
  await page.waitForSelector(`[data-test=filter-row-${filterId}][data-active=false]`);
  const r2 = result(env.run('evil'));
  check(r2.end === 'eof', `with the filter disabled the connection ended by ${r2.end}`);
  await shot('filter-disabled');

  // a filter that would block every connection: the page shows controld's reason in a dialog;
  // cancelled, nothing is stored; confirmed, it is sent again with force and stored
  await page.fill('[data-test=filter-regex-input]', '\\b');
  await page.click('[data-test=filter-add]');
  await page.waitForSelector('[data-test=confirm-ok]');
  const why = await page.textContent('[role=dialog], dialog, .modal');
  check(/matches any connection/.test(why) && /anyway/.test(why), `the force dialog does not say why: ${why}`);
  await shot('filter-force-ask');
  await page.click('[data-test=confirm-cancel]');
  await page.waitForFunction(() => /Not added/.test(document.querySelector('[data-test=filter-error]').textContent));
  check((await row.count()) === 1, 'a cancelled forced filter was stored');
  await page.click('[data-test=filter-add]');
  await page.click('[data-test=confirm-ok]');
  await page.waitForFunction(() => document.querySelectorAll('[data-test^=filter-row-]').length === 2);
  const forced = page.locator(`[data-test^=filter-row-]:not([data-test=filter-row-${filterId}])`);
  check((await forced.locator('[data-test=filter-regex]').textContent()) === '/\\b/', 'the forced filter is not \\b');
  await forced.locator('[data-test=filter-rm]').click();
  await page.click('[data-test=confirm-ok]');
  await page.waitForFunction(() => document.querySelectorAll('[data-test^=filter-row-]').length === 1);

  // the charts: the two blocks, per service and per filter, this last hour and the last 48 h
  for (const range of ['1h', '48h']) {
    let legend = '';
    for (let i = 0; i < 20 && !legend.includes(`${env.service} (2)`); i++) {
      await page.goto(`${base}/#/charts/${range}`);
      await page.waitForSelector('[data-test=chart-services], [data-test=charts-empty]');
      legend = await page.textContent('[data-test=charts]');
      if (!legend.includes(`${env.service} (2)`)) await page.waitForTimeout(500);
    }
    check(legend.includes(`${env.service} (2)`), `${range}: the services chart does not count 2 blocks: ${legend}`);
    const per = await page.textContent(`[data-test=chart-service-${env.service}]`);
    check(per.includes(`#${filterId} /${env.regex}/ (2)`), `${range}: the filter's chart: ${per}`);
    const d = await page.getAttribute(`[data-test=chart-services] path.line[data-series=${env.service}]`, 'd');
    check(d && d.split('L').length === (range === '1h' ? 60 : 96), `${range}: the line has not one point a bin: ${d && d.slice(0, 80)}`);
    await shot(`charts-${range}`);
  }
}
