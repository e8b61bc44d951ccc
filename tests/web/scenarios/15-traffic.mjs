// The charts' traffic (issue 18: "traffic per service over the last hour and 48 hours"): real
// bytes sent through the service (one connection of env.bulk_bytes bytes that no filter
// matches, "ok\n" back) show in its traffic chart, the bytes each way and the connection, in
// the 1 h and 48 h views, and in the services list's last-hour sparkline; in both themes.
import { check, mustApi } from './b_util.js';

// NFQUEUE layer: the history counts the IP packets (headers included, acks too): a 60 000-byte
// send is a few dozen segments each way, 100 packets of 60 bytes of headers is plenty
const HEADERS_MAX = 100 * 60;
const C2S = 'client → server';
const S2C = 'server → client';

async function totals(page, base, range, name) {
  // a goto to the URL the page is at changes no hash: no new render; another view first
  await page.goto(`${base}/#/history`);
  await page.goto(`${base}/#/charts/${range}`);
  await page.waitForSelector('[data-test=charts] > *');
  const card = `[data-test=chart-traffic-${name}]`;
  if (!(await page.locator(card).count())) return { c2s: 0, s2c: 0, flows: 0, card: false };
  const total = async (chart, series) =>
    Number(await page.getAttribute(`${card} [data-test=${chart}] path.line[data-series="${series}"]`, 'data-total'));
  return {
    c2s: await total('chart-bytes', C2S),
    s2c: await total('chart-bytes', S2C),
    flows: await total('chart-flows', 'connections'),
    card: true,
  };
}

export default async function ({ page, base, shot, env, login, log }) {
  await login(page);
  // the service of 10-core (made here when this scenario runs alone)
  const list = await mustApi(page, 'service/list', {}, 'GET');
  if (!list.some((s) => s.name === env.service)) {
    await mustApi(page, 'service/add', { name: env.service, proto: 'tcp', port: env.port });
  }
  const before = {};
  for (const range of ['1h', '48h']) before[range] = await totals(page, base, range, env.service);
  log(`before: ${JSON.stringify(before)}`);

  const lines = env.run('bulk');
  const r = lines.find((l) => l.event === 'result');
  check(r && r.end === 'eof' && r.sent === env.bulk_bytes, 'the bulk connection did not pass:', r || lines);
  check(Buffer.from(r.received, 'base64').toString() === 'ok\n', 'the server did not answer:', r);

  for (const range of ['1h', '48h']) {
    const b = before[range];
    let t = b;
    // the workers report once a second, controld folds it into the minute: a few seconds
    for (let i = 0; i < 30 && !(t.flows >= b.flows + 1 && t.c2s >= b.c2s + env.bulk_bytes); i++) {
      if (i) await page.waitForTimeout(500);
      t = await totals(page, base, range, env.service);
    }
    log(`${range} after: ${JSON.stringify(t)}`);
    check(t.card, `${range}: no traffic chart for ${env.service}`);
    check(t.flows === b.flows + 1, `${range}: connections ${b.flows} -> ${t.flows}, one was made`);
    const up = t.c2s - b.c2s;
    const down = t.s2c - b.s2c;
    check(up >= env.bulk_bytes && up <= env.bulk_bytes + HEADERS_MAX, `${range}: client -> server grew by ${up} bytes for ${env.bulk_bytes} sent`);
    check(down >= 3 && down <= 3 + HEADERS_MAX, `${range}: server -> client grew by ${down} bytes for 3 sent`);
    // readable units: the totals and the axis in KiB, as the page formats them
    const card = page.locator(`[data-test=chart-traffic-${env.service}]`);
    const legend = await card.locator(`[data-test=chart-bytes] .legend [data-series="${C2S}"]`).textContent();
    const kib = (t.c2s / 1024).toFixed(t.c2s / 1024 < 10 ? 1 : 0);
    check(legend === `${C2S} (${kib} KiB)`, `${range}: the legend says ${JSON.stringify(legend)}, not ${kib} KiB`);
    const axis = await card.locator('[data-test=chart-bytes] svg text').allTextContents();
    check(axis.some((x) => / KiB$/.test(x)), `${range}: the byte axis has no KiB tick: ${axis.join(', ')}`);
    const conns = await card.locator('[data-test=chart-flows] .legend').textContent();
    check(conns.includes(`connections (${t.flows})`), `${range}: the connections legend: ${conns}`);
    // the line has one point a bin and rises somewhere
    const d = await card.locator(`[data-test=chart-bytes] path.line[data-series="${C2S}"]`).getAttribute('d');
    check(d.split('L').length === (range === '1h' ? 60 : 96), `${range}: not one point a bin: ${d.slice(0, 80)}`);
    await card.scrollIntoViewIfNeeded();
    await shot(`traffic-${range}`);
  }

  // the services list: the last hour's bytes, both ways, from the history
  const t1 = await totals(page, base, '1h', env.service);
  await page.goto(`${base}/#/services`);
  const cell = page.locator(`[data-test=svc-row-${env.service}] [data-test=svc-hour]`);
  await cell.waitFor();
  const again = Number(await cell.locator('svg').getAttribute('data-total'));
  check(again === t1.c2s + t1.s2c, `the list's last hour: ${again} bytes, the chart's ${t1.c2s} + ${t1.s2c}`);
  check(again >= env.bulk_bytes, `the list's last hour shows ${again} bytes, ${env.bulk_bytes} were sent`);
  await shot('services-hour');

  // the dark theme
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.goto(`${base}/#/charts/1h`);
  await page.waitForSelector(`[data-test=chart-traffic-${env.service}]`);
  check(
    (await page.evaluate(() => getComputedStyle(document.body).backgroundColor)) !== 'rgb(255, 255, 255)',
    'the dark theme has a white page',
  );
  await page.locator(`[data-test=chart-traffic-${env.service}]`).scrollIntoViewIfNeeded();
  await shot('traffic-1h-dark');
  await page.emulateMedia({ colorScheme: 'light' });
}
