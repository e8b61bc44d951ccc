// Firewall view: add two rules, move one up, then changes with confirmation: one kept with the
// "Keep" button before the countdown ends, one left to run out and reverted by controld; a rule
// file applied with confirmation and kept.
import { check, api, mustApi, view, toastText } from './b_util.js';

const fwList = (page) => mustApi(page, 'fw/list', {}, 'GET');
const rule = (fw, name) => fw.rules.find((r) => r.name === name);
const pos = (fw, name) => fw.rules.findIndex((r) => r.name === name) + 1;

export default async function ({ page, base, shot, login }) {
  await login(page);
  for (const n of ['b_ssh', 'b_udp']) await api(page, 'fw/rule/rm', { rule: n });
  await view(page, base, 'fw');
  await page.waitForSelector('[data-test=view-fw][data-loaded]');
  await page.uncheck('[data-test=fw-confirm-on]');

  // add: every field of the form goes to fw rule add
  await page.fill('[data-test=fw-add-name]', 'b_ssh');
  await page.selectOption('[data-test=fw-add-proto]', 'tcp');
  await page.fill('[data-test=fw-add-src]', '10.77.0.0/16');
  await page.fill('[data-test=fw-add-dport]', '22');
  await page.selectOption('[data-test=fw-add-action]', 'accept');
  await page.click('[data-test=fw-add-submit]');
  await page.locator('[data-test=fw-rule-b_ssh]').waitFor();
  await page.fill('[data-test=fw-add-name]', 'b_udp');
  await page.selectOption('[data-test=fw-add-proto]', 'udp');
  await page.fill('[data-test=fw-add-dport]', '5000-5010');
  await page.selectOption('[data-test=fw-add-action]', 'drop');
  await page.click('[data-test=fw-add-submit]');
  await page.locator('[data-test=fw-rule-b_udp]').waitFor();
  let fw = await fwList(page);
  const ssh = rule(fw, 'b_ssh');
  check(ssh && ssh.proto === 'tcp' && ssh.src === '10.77.0.0/16' && ssh.dport === '22' && ssh.action === 'accept' && ssh.dir === 'in', 'b_ssh as given', ssh);
  check(rule(fw, 'b_udp').dport === '5000-5010', 'b_udp as given');
  const p0 = pos(fw, 'b_ssh');
  check(pos(fw, 'b_udp') === p0 + 1, 'added in order');

  // move b_udp up: it is now before b_ssh, in controld and on the page
  await page.click('[data-test=fw-rule-b_udp] [data-test=fw-up]');
  await page.waitForSelector(`[data-test=fw-rule-b_udp][data-pos="${p0}"]`);
  fw = await fwList(page);
  check(pos(fw, 'b_udp') === p0 && pos(fw, 'b_ssh') === p0 + 1, 'moved up', fw.rules);
  await shot('rules');

  // a policy and an option, set from the page and set back
  const until = async (what, fn) => {
    for (let i = 0; i < 50; i++) {
      const x = await fwList(page);
      if (fn(x)) return x;
      await page.waitForTimeout(100);
    }
    throw new Error(`firewall never showed ${what}`);
  };
  await page.selectOption('[data-test=fw-policy-forward]', 'drop');
  await until('policy forward drop', (x) => x.policy.forward === 'drop' && x.policy.in === 'accept');
  await page.selectOption('[data-test=fw-policy-forward]', 'accept');
  await until('policy forward accept', (x) => x.policy.forward === 'accept');
  const dhcp = (await fwList(page)).options.dhcp;
  await page.click('[data-test=fw-opt-dhcp]');
  await until('dhcp switched', (x) => x.options.dhcp === !dhcp);
  check((await page.isChecked('[data-test=fw-opt-dhcp]')) === !dhcp, 'the box shows the option');
  await page.click('[data-test=fw-opt-dhcp]');
  await until('dhcp back', (x) => x.options.dhcp === dhcp);

  // with confirmation, kept: the countdown shows, Keep confirms, the change stays
  await page.check('[data-test=fw-confirm-on]');
  await page.fill('[data-test=fw-confirm-secs]', '30');
  await page.click('[data-test=fw-rule-b_ssh] [data-test=fw-rule-toggle]');
  await page.locator('[data-test=fw-pending]').waitFor();
  const left = parseInt(await page.locator('[data-test=fw-countdown]').innerText(), 10);
  check(left > 20 && left <= 30, 'countdown from 30', left);
  fw = await fwList(page);
  check(fw.state.pending_secs > 0 && rule(fw, 'b_ssh').active === false, 'pending in controld', fw.state);
  await shot('pending');
  await page.click('[data-test=fw-keep]');
  await page.locator('[data-test=fw-pending]').waitFor({ state: 'hidden' });
  fw = await fwList(page);
  check(fw.state.pending_secs === 0 && rule(fw, 'b_ssh').active === false, 'kept', fw.state);

  // with confirmation, not kept: controld reverts it when the countdown ends, the page shows it
  await page.fill('[data-test=fw-confirm-secs]', '2');
  await page.click('[data-test=fw-rule-b_ssh] [data-test=fw-rule-toggle]');
  await page.locator('[data-test=fw-pending]').waitFor();
  fw = await fwList(page);
  check(rule(fw, 'b_ssh').active === true, 'enabled for now');
  await page.locator('[data-test=fw-pending]').waitFor({ state: 'hidden', timeout: 10000 });
  await page.waitForFunction(() => /Enable/.test(document.querySelector('[data-test=fw-rule-b_ssh] [data-test=fw-rule-toggle]').innerText), null, { timeout: 10000 });
  fw = await fwList(page);
  check(rule(fw, 'b_ssh').active === false && fw.state.pending_secs === 0, 'reverted by controld', fw);

  // a rule file, applied with confirmation, kept
  await page.click('summary:has-text("Rule file")');
  await page.click('[data-test=fw-file-current]');
  const text = await page.inputValue('[data-test=fw-file]');
  check(/--name b_udp --dir in --proto udp --dport 5000-5010 --action drop/.test(text), 'the file holds the rules', text);
  await page.fill('[data-test=fw-confirm-secs]', '30');
  await page.click('[data-test=fw-file-apply]');
  await page.click('[data-test=confirm-ok]');
  await page.locator('[data-test=fw-pending]').waitFor();
  await page.click('[data-test=fw-keep]');
  await toastText(page, 'ok', /kept/);
  fw = await fwList(page);
  check(fw.state.pending_secs === 0 && rule(fw, 'b_udp') && rule(fw, 'b_ssh'), 'file applied and kept', fw);
  await shot('view');

  // leave the firewall as it was
  await page.uncheck('[data-test=fw-confirm-on]');
  for (const n of ['b_ssh', 'b_udp']) await mustApi(page, 'fw/rule/rm', { rule: n });
}
