// Pattern tester (issue 27): several patterns over a pasted sample, as text and as hex; every
// match marked with its start and end, a pattern filter add would refuse shows its own error
// while the others still run.
import { check, view } from './b_util.js';

export default async function ({ page, base, shot, login }) {
  await login(page);
  await view(page, base, 'tester');
  await page.fill('[data-test=tester-patterns]', 'evil[0-9]+\n([a-\n(?i)flag\\{');
  await page.fill('[data-test=tester-sample]', 'GET /evil1 HTTP/1.0\nX: FLAG{x} evil22\n');
  await page.click('[data-test=tester-run]');
  await page.waitForSelector('[data-test=view-tester][data-done]');
  // (a textarea keeps \n line ends only)
  // evil[0-9]+: every end hyperscan reports, each with its start
  const spans0 = await page.locator('[data-test=tester-span-0]').allInnerTexts();
  check(JSON.stringify(spans0) === JSON.stringify(['5-10', '31-36', '31-37']), 'evil spans', spans0);
  check((await page.locator('[data-test=tester-count-0]').innerText()).startsWith('3 matches'), 'count');
  // the marks in the sample cover the matched bytes
  const marks = await page.locator('[data-test=tester-result-0] [data-test=tester-mark]').evaluateAll((ms) =>
    ms.map((m) => `${m.dataset.start}-${m.dataset.end}:${m.textContent}`),
  );
  check(JSON.stringify(marks) === JSON.stringify(['5-10:evil1', '31-37:evil22']), 'marks', marks);
  // the bad one's own error, and the pattern after it still ran
  const err = await page.locator('[data-test=tester-error-1]').innerText();
  check(/invalid regex/.test(err) && /\(\[a-/.test(err), 'error of the bad pattern', err);
  check((await page.locator('[data-test=tester-span-1]').count()) === 0, 'no spans for the bad one');
  const spans2 = await page.locator('[data-test=tester-span-2]').allInnerTexts();
  check(JSON.stringify(spans2) === JSON.stringify(['23-28']), '(?i)flag spans', spans2);
  await shot('tester-text');

  // hex: bytes the text box could not carry
  await page.selectOption('[data-test=tester-mode]', 'hex');
  await page.fill('[data-test=tester-patterns]', '\\x00\\xff');
  await page.fill('[data-test=tester-sample]', '41 00 ff 42 00ff');
  await page.click('[data-test=tester-run]');
  await page.waitForSelector('[data-test=view-tester][data-done]');
  const hx = await page.locator('[data-test=tester-span-0]').allInnerTexts();
  check(JSON.stringify(hx) === JSON.stringify(['1-3', '4-6']), 'hex spans', hx);
  const hm = await page.locator('[data-test=tester-result-0] [data-test=tester-mark]').first().innerText();
  check(/00 ff/.test(hm), 'hex marks show the bytes', hm);
  // not hex: said, nothing sent
  await page.fill('[data-test=tester-sample]', 'zz');
  await page.click('[data-test=tester-run]');
  await page.locator('[data-test=toast-error]', { hasText: /not hex/ }).waitFor();
}
