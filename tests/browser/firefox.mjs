// The same dashboard in Firefox ESR (Debian's firefox-esr), driven by puppeteer-core over WebDriver
// BiDi, for tst_control's aDashboardInFirefoxToo: the page shows the node's state from its pushes,
// its Pause and Resume buttons drive the node (checked through the API), every tab shows, it fits
// a phone's width, and no script error.
//
//   node firefox.mjs BASE_URL TOKEN [SCREENSHOT.png]
import puppeteer from 'puppeteer-core';

const [base, token, screenshot] = process.argv.slice(2);
const waitMs = Number(process.env.TESSERA_BROWSER_WAIT_MS || 300000); // a bound on each wait, never a goal

async function paused() {
  const response = await fetch(`${base}/api/v1/state`, { headers: { Authorization: `Bearer ${token}` } });
  return (await response.json()).paused;
}

function check(condition, why) {
  if (!condition) throw new Error(why);
}

const browser = await puppeteer.launch({
  browser: 'firefox',
  executablePath: process.env.TESSERA_FIREFOX || '/usr/bin/firefox-esr',
  headless: true,
  // Off a network it cannot reach: no update, captive-portal or telemetry pings.
  extraPrefsFirefox: { 'network.captive-portal-service.enabled': false, 'app.update.enabled': false,
    'datareporting.policy.dataSubmissionEnabled': false, 'toolkit.telemetry.enabled': false },
});
const problems = [];
try {
  const page = await browser.newPage();
  page.on('pageerror', (error) => problems.push(error.message));
  await page.setViewport({ width: 1100, height: 800 });
  await page.goto(`${base}/#token=${token}`);
  await page.waitForFunction(() => window.tessera && window.tessera.pushes > 0, { timeout: waitMs });
  check(!page.url().includes(token), 'the token stayed in the address bar');
  await page.click('#pause');
  await page.waitForFunction(() => window.tessera.state.paused === true, { timeout: waitMs });
  check(await paused(), 'Pause in the page did not pause the node');
  await page.click('#resume');
  await page.waitForFunction(() => window.tessera.state.paused === false, { timeout: waitMs });
  check(!(await paused()), 'Resume in the page did not resume the node');
  for (const tab of ['devices', 'earnings', 'verification', 'log', 'overview']) {
    await page.click(`nav a[data-tab="${tab}"]`);
    check(await page.$eval(`#tab-${tab}`, (element) => !element.hidden), `the ${tab} tab does not show`);
  }
  if (screenshot) await page.screenshot({ path: screenshot });
  await page.setViewport({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `the page is ${overflow} px wider than a phone`);
  check(problems.length === 0, 'the page logged errors: ' + problems.join('; '));
  console.log(JSON.stringify({ browser: await browser.version() }));
} catch (error) {
  console.error('firefox: ' + error.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
