// Holds N copies of a node's web dashboard open in Debian's Chromium for S seconds, for
// bench/controlbench.sh (the API's cost with dashboards open). Prints how many pushed states each
// page took.
//
//   node dashboards.mjs BASE_URL TOKEN N SECONDS
import { chromium } from 'playwright-core';

const [base, token, count, seconds] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.TESSERA_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
try {
  const pages = [];
  for (let i = 0; i < Number(count); i++) {
    const page = await browser.newPage();
    await page.goto(`${base}/#token=${token}`);
    await page.waitForFunction(() => window.tessera.pushes > 0);
    pages.push(page);
  }
  console.log(`dashboards: ${pages.length} open`);
  await new Promise((resolve) => setTimeout(resolve, Number(seconds) * 1000));
  const pushes = await Promise.all(pages.map((page) => page.evaluate(() => window.tessera.pushes)));
  console.log(`dashboards: pushed states taken: ${pushes.join(' ')}`);
} finally {
  await browser.close();
}
