// fgex dashboard end-to-end runner: Debian's chromium, headless, driven by playwright-core.
// tests/integration/test_web_ui.py starts controld and runs this; it can be
// run by hand too:
//   node tests/web/run.mjs --base https://10.77.0.1:8443 --env env.json --shots build/web-shots [--only NAME | --stdin 1]
// (--scenarios DIR: the scenarios of another directory, e.g. tests/web/flood for test_listen).
// Every scenarios/*.mjs (in name order, or the one --only names) exports an async function
// receiving {page, context, base, shot(name), env, login(page), log}; it throws to fail. One JSON
// line per scenario on stdout: {scenario, ok, ms, error}. Exit status 1 when one failed.
import { readdirSync, readFileSync, mkdirSync, unlinkSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join, dirname, basename } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const nodeModules = args.modules || process.env.FGX_WEB_NODE_MODULES || join(here, 'node_modules');
const { chromium } = await import(pathToFileURL(join(nodeModules, 'playwright-core', 'index.mjs')).href);

const base = args.base;
const envDoc = args.env ? JSON.parse(readFileSync(args.env, 'utf8')) : {};
const shots = args.shots || 'web-shots';
const scenDir = args.scenarios || join(here, 'scenarios');
mkdirSync(shots, { recursive: true });

// env.run(name, ...extra): runs the command the python side named (env.commands[name], an argv),
// returns the JSON lines it printed, parsed.
const env = {
  ...envDoc,
  run(name, ...extra) {
    const argv = envDoc.commands && envDoc.commands[name];
    if (!argv) throw new Error(`no command ${name} in the env`);
    const out = execFileSync(argv[0], [...argv.slice(1), ...extra], { encoding: 'utf8', timeout: 60000 });
    return out
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          return { text: l };
        }
      });
  },
};

// The first load in a fresh browser may see chromium notice the test namespace's network
// come up (its addresses settling): net::ERR_NETWORK_CHANGED, or the navigation replaced by
// chromium's own error page. That, and only on the page's first load, is retried after a
// moment; any other error fails the scenario.
async function gotoFirst(page, url) {
  for (let i = 0; ; i++) {
    try {
      return await page.goto(url);
    } catch (e) {
      if (i >= 4 || !/ERR_NETWORK_CHANGED|chrome-error:\/\/chromewebdata/.test(String(e))) throw e;
      await page.waitForTimeout(300);
    }
  }
}

async function login(page, password = envDoc.password) {
  await gotoFirst(page, `${base}/`);
  await page.fill('[data-test=login-password]', password);
  await page.click('[data-test=login-submit]');
  await page.waitForSelector('[data-test=menu]');
  await page.waitForSelector('[data-test=live-state][data-state=open]', { timeout: 10000 });
}

let files = readdirSync(scenDir).filter((f) => f.endsWith('.mjs')).sort();
if (args.only) files = files.filter((f) => basename(f, '.mjs') === args.only || f === args.only);
if (!files.length && !args.stdin) {
  console.error(`run.mjs: no scenario ${args.only || ''}`);
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: args.chromium || process.env.FGX_CHROMIUM || '/usr/bin/chromium',
  // root in a test namespace: chromium's own sandbox needs user namespaces it may not get
  args: ['--no-sandbox', '--disable-dev-shm-usage'],
});

async function runOne(name) {
  const t0 = Date.now();
  // this scenario's screenshots of an earlier run go: what is there is this run's
  for (const old of readdirSync(shots)) if (old.startsWith(`${name}-`) && old.endsWith('.png')) unlinkSync(join(shots, old));
  const context = await browser.newContext({
    ignoreHTTPSErrors: true, // controld's own certificate: test_web_ui checks its fingerprint apart
    viewport: { width: 1366, height: 860 },
    acceptDownloads: true,
  });
  const page = await context.newPage();
  const jsErrors = [];
  page.on('pageerror', (e) => jsErrors.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Uncaught|SyntaxError|TypeError|ReferenceError/.test(m.text())) jsErrors.push(`console: ${m.text()}`);
  });
  const shot = async (n, p = page) => {
    await p.screenshot({ path: join(shots, `${name}-${n}.png`), fullPage: true });
  };
  const log = (...a) => console.error(`[${name}]`, ...a);
  let error = null;
  try {
    const mod = await import(pathToFileURL(join(scenDir, `${name}.mjs`)).href);
    await mod.default({ page, context, base, shot, env, login, log });
    if (jsErrors.length) throw new Error(`the page had errors: ${jsErrors.join('; ')}`);
  } catch (e) {
    error = String((e && e.stack) || e).split('\n').slice(0, 6).join('\n');
    try {
      await shot('FAILED');
    } catch {
      /* the page may be gone */
    }
  }
  await context.close().catch(() => {});
  console.log(JSON.stringify({ scenario: name, ok: !error, ms: Date.now() - t0, error }));
  return !error;
}

let failed = 0;
if (args.stdin) {
  // --stdin 1: one browser for many scenarios; each line read names one, its result line is
  // printed when it ends (test_web_ui runs one test per scenario so)
  const { createInterface } = await import('node:readline');
  for await (const line of createInterface({ input: process.stdin })) {
    const name = line.trim();
    if (name && !(await runOne(name))) failed++;
  }
} else {
  for (const f of files) if (!(await runOne(basename(f, '.mjs')))) failed++;
}
await browser.close();
process.exit(failed ? 1 : 0);
