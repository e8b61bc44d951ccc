// Helpers of the b_* scenarios (scripts, firewall, workers, history, admin views). Not a
// scenario itself: run.mjs only runs *.mjs files.

// Run an fgexctl command through the page's own API module (its session and CSRF token), as the
// views do; resolves to {ok, status, value | error}.
export async function api(page, cmd, params = {}, method = 'POST') {
  return page.evaluate(
    async ([c, p, m]) => {
      const a = await import('/lib/api.js');
      try {
        return { ok: true, value: await a.call(c, p, { method: m }) };
      } catch (e) {
        return { ok: false, status: e.status, exit: e.exit, error: e.message };
      }
    },
    [cmd, params, method],
  );
}

export async function mustApi(page, cmd, params = {}, method = 'POST') {
  const r = await api(page, cmd, params, method);
  if (!r.ok) throw new Error(`${cmd}: ${r.status} ${r.error}`);
  return r.value;
}

export function check(cond, ...what) {
  if (!cond) throw new Error(what.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' '));
}

// A TCP service on the proxy layer for the scenarios (scripts need one); made once.
export async function proxyService(page, name = 'bweb', port = 18081) {
  const list = await mustApi(page, 'service/list', {}, 'GET');
  if (list.some((s) => s.name === name)) return name;
  await mustApi(page, 'service/add', { name, proto: 'tcp', port, layer: 'proxy' });
  return name;
}

export async function view(page, base, id, ...args) {
  await page.goto(`${base}/#/${[id, ...args].map(encodeURIComponent).join('/')}`);
  await page.waitForSelector(`[data-test=view-${id}]`);
}

// Wait for a toast of this kind (ok, error, info) saying what matches re; return its text.
export async function toastText(page, kind, re = /./) {
  const t = page.locator(`[data-test=toast-${kind}]`, { hasText: re }).last();
  await t.waitFor({ timeout: 15000 });
  return t.innerText();
}
