// Holds N copies of a node's web dashboard open in Debian's Chromium for S seconds, for
// bench/controlbench.sh (the API's cost with dashboards open). Prints how many pushed states each
// page took.
//
//   node dashboards.mjs BASE_URL TOKEN N SECONDS
import { launchChromium } from './chromium.mjs';

const [base, token, count, seconds] = process.argv.slice(2);
const browser = await launchChromium();
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
