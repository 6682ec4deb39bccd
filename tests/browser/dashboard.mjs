// Drives a node's web dashboard in Debian's Chromium (docs/CONTROL.md, "The dashboard"), for the
// e2e test tst_dashboard: the page shows the node's state, its shard's progress moves, a change made
// through the API reaches the page (pushed, and how long it took), its Pause and Resume buttons
// drive the node (checked through the API), it fits a phone's width, and a screenshot is kept.
//
//   node dashboard.mjs BASE_URL TOKEN SCREENSHOT.png
//
// Prints one line of JSON with what it measured; exits 1 with the reason when a check fails.
import { launchChromium } from './chromium.mjs';

const [base, token, screenshot] = process.argv.slice(2);
const waitMs = Number(process.env.TESSERA_BROWSER_WAIT_MS || 300000); // a bound on each wait, never a goal

async function api(method, action, body) {
  const response = await fetch(`${base}/api/v1/${action}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${action}: ${response.status} ${answer.error}`);
  return answer;
}

function check(condition, why) {
  if (!condition) throw new Error(why);
}

const browser = await launchChromium();
const measured = {};
const problems = [];
let page = null;
try {
  page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
  page.on('pageerror', (error) => problems.push(error.message));
  page.on('console', (message) => { if (message.type() === 'error') problems.push(message.text()); });

  // The token in the fragment, as `tessera-node ctl url` gives it: the page takes it out of the address.
  await page.goto(`${base}/#token=${token}`);
  await page.waitForFunction(() => window.tessera.pushes > 0, null, { timeout: waitMs });
  check(!page.url().includes(token), 'the token stayed in the address bar');
  check((await page.textContent('#state')) === 'paused', 'the page does not say the node is paused');

  // A limit set in the page's form (checked by the node as its settings file is): training at a tenth
  // of the time, so that its progress is seen between pushes on a fast machine too.
  await page.click('nav a[data-tab="devices"]');
  await page.fill('input[name="Compute/CpuPercent"]', '5');
  await page.click('#limits button[type="submit"]');
  await page.waitForFunction(() => /from 10 to 100/.test(document.getElementById('limits-error').textContent), null,
    { timeout: waitMs });
  problems.splice(0, problems.length, ...problems.filter((text) => !/status of 400/.test(text))); // that refusal
  await page.fill('input[name="Compute/CpuPercent"]', '10');
  await page.click('#limits button[type="submit"]');
  await page.waitForFunction(() => window.tessera.state.limits['Compute/CpuPercent'] === 10, null, { timeout: waitMs });
  check((await api('GET', 'state')).limits['Compute/CpuPercent'] === 10, 'the limit set in the page did not reach the node');
  await page.click('nav a[data-tab="overview"]');

  // Training resumes through the API; the page's progress must move on its own (pushed, not polled).
  await api('POST', 'resume');
  // Seen moving: one shard at two steps or more, each pushed (the page keeps each shard's steps).
  const moved = await page.waitForFunction(() => {
    const seen = Object.values(window.tessera.steps).find((steps) => steps.length >= 2);
    return seen ? seen : null;
  }, null, { timeout: waitMs, polling: 50 });
  const steps = await moved.jsonValue();
  measured.progressFrom = steps[0];
  measured.progressTo = steps[steps.length - 1];

  // A change made elsewhere (the API, as `tessera-node ctl pause` would) reaches the open page.
  const before = await page.evaluate(() => window.tessera.pushes);
  const asked = Date.now();
  await api('POST', 'pause');
  await page.waitForFunction((n) => window.tessera.pushes > n && window.tessera.state.state === 'paused', before,
    { timeout: waitMs, polling: 10 });
  measured.pushMs = (await page.evaluate(() => window.tessera.lastPushAt)) - asked;

  // The page's own buttons drive the node: the API says so.
  await page.click('#resume');
  await page.waitForFunction(() => window.tessera.state.paused === false, null, { timeout: waitMs });
  check((await api('GET', 'state')).paused === false, 'Resume in the page did not resume the node');
  await page.click('#pause');
  await page.waitForFunction(() => window.tessera.state.paused === true, null, { timeout: waitMs });
  check((await api('GET', 'state')).paused === true, 'Pause in the page did not pause the node');

  // Every tab renders, and the screenshot shows the Overview of a paused shard.
  for (const tab of ['devices', 'earnings', 'verification', 'log', 'overview']) {
    await page.click(`nav a[data-tab="${tab}"]`);
    check(await page.isVisible(`#tab-${tab}`), `the ${tab} tab does not show`);
  }
  check((await page.locator('#devices tr').count()) > 0, 'no device listed');
  check((await page.locator('#log li').count()) > 0, 'no log line');
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });

  // A phone's width: nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  for (const tab of ['earnings', 'devices', 'overview']) {
    await page.click(`nav a[data-tab="${tab}"]`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `the ${tab} tab is ${overflow} px wider than a phone`);
  }
  if (screenshot) await page.screenshot({ path: screenshot.replace(/\.png$/, '-phone.png'), fullPage: true });

  // A page without the token asks for it, and a wrong one is refused.
  const stranger = await browser.newPage();
  await stranger.goto(`${base}/`);
  await stranger.waitForSelector('#login:not([hidden])', { timeout: waitMs });
  await stranger.fill('#token', '0'.repeat(64));
  await stranger.click('#login button');
  await stranger.waitForFunction(() => /refused/.test(document.getElementById('login-error').textContent), null,
    { timeout: waitMs });
  check(problems.length === 0, 'the page logged errors: ' + problems.join('; '));
  await api('POST', 'limits', { 'Compute/CpuPercent': 100 });
  await api('POST', 'resume');
  console.log(JSON.stringify(measured));
} catch (error) {
  console.error('dashboard: ' + error.message);
  if (problems.length) console.error('the page logged: ' + problems.join('; '));
  if (page) console.error('the page said: ' + (await page.evaluate(() => document.body.innerText).catch(() => '?')));
  process.exitCode = 1;
} finally {
  await browser.close();
}
