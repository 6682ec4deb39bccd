// Debian's Chromium, headless, for the dashboard's tests and bench (dashboard.mjs, dashboards.mjs).
import { chromium } from 'playwright-core';

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.TESSERA_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // As root Chromium runs only without its sandbox; the rest keeps it off a network it cannot reach.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}
