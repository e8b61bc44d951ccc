// Regexes and payloads are bytes: a regex that is not UTF-8 (regex_b64) is shown escaped,
// exported to a ruleset file byte for byte, blocks real traffic whose excerpt (excerpt_b64)
// the feed shows in hex; and the page's byte helpers (lib/ui.js, lib/chart.js) on all 256 bytes.
import { readFileSync } from 'node:fs';

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

const RAW = Buffer.from([0xff, 0xfe, 0x7a, 0x71]); // \xff\xfe z q

async function api(page, cmd, params, method = 'POST') {
  return page.evaluate(
    async ([c, p, m]) => {
      const a = await import('/lib/api.js');
      return a.call(c, p, { method: m });
    },
    [cmd, params, method],
  );
}

export default async function ({ page, base, shot, env, login }) {
  await login(page);

  // the helpers, in the page
  const u = await page.evaluate(async () => {
    const ui = await import('/lib/ui.js');
    const ch = await import('/lib/chart.js');
    const all = new Uint8Array(256).map((_, i) => i);
    const back = ui.b64bytes(ui.bytesB64(all));
    const dump = ui.hexdump(all.subarray(0, 20), [[17, 18]]);
    return {
      roundtrip: back.length === 256 && back.every((b, i) => b === i),
      field: Array.from(ui.fieldBytes({ x_b64: btoa('\xff\x00a') }, 'x')),
      text: Array.from(ui.fieldBytes({ x: 'é' }, 'x')),
      dump: dump.map((l) => [l.text, l.marked]),
      bucket: ch.bucket([{ time: 100, count: 2 }, { time: 159, count: 1 }, { time: 160, count: 5 }, { time: 400, count: 9 }], 100, 60, 3),
      steps: [ch.niceStep(7), ch.niceStep(100), ch.niceStep(0)],
    };
  });
  check(u.roundtrip, 'bytesB64/b64bytes lose bytes');
  check(JSON.stringify(u.field) === '[255,0,97]', `fieldBytes of _b64: ${u.field}`);
  check(JSON.stringify(u.text) === '[195,169]', `fieldBytes of text is not UTF-8: ${u.text}`);
  check(u.dump.length === 2 && u.dump[0][0].startsWith('000000  00 01 02 03 04 05 06 07  08 09') && !u.dump[0][1] && u.dump[1][1],
    `hexdump: ${JSON.stringify(u.dump)}`);
  check(u.dump[1][0].endsWith('...'), `hexdump ascii of control bytes: ${u.dump[1][0]}`);
  check(JSON.stringify(u.bucket) === '[3,5,0]', `bucket: ${u.bucket}`);
  check(JSON.stringify(u.steps) === '[2,50,1]', `niceStep: ${u.steps}`);

  // a regex of raw bytes, through the API the views use
  const f = await api(page, 'filter/add', { service: env.service, regex_b64: RAW.toString('base64') });
  check(f.regex_b64 === RAW.toString('base64'), `filter add gave back ${JSON.stringify(f)}`);
  const svc = f.service_id;
  await page.goto(`${base}/#/services/${svc}`);
  const row = page.locator(`[data-test=filter-row-${f.id}]`);
  await row.waitFor();
  const shown = await row.locator('[data-test=filter-regex]').textContent();
  check(shown === '/\\xff\\xfezq/', `the raw regex is shown as ${shown}`);
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-test=ruleset-export]')]);
  const file = readFileSync(await dl.path());
  check(file.includes(Buffer.concat([Buffer.from('both /'), RAW, Buffer.from('/\n')])), `the export lacks the raw line: ${file.toString('hex')}`);

  // real traffic with those bytes: blocked, its excerpt in hex on the feed
  await page.goto(`${base}/#/events`);
  await page.waitForSelector('[data-test=feed]', { state: 'attached' });
  const before = await page.locator('[data-test=event]').first().getAttribute('data-seq').catch(() => '0');
  const r = env.run('raw').find((l) => l.event === 'result');
  check(r && r.end === 'reset', `the raw-bytes connection was not reset: ${JSON.stringify(r)}`);
  await page.waitForFunction((s) => {
    const e = document.querySelector('[data-test=event]');
    return e && e.dataset.seq !== s;
  }, before, { timeout: 15000 });
  const hex = await page.locator('[data-test=event]').first().locator('[data-test=hexdump]').textContent();
  check(/ff fe 7a 71/.test(hex), `the excerpt's hex lacks ff fe 7a 71: ${hex.slice(0, 200)}`);
  await shot('raw-event');
  await api(page, 'filter/rm', { filter: String(f.id) });
}
