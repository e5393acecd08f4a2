// Debian's chromium, started headless by puppeteer-core for the tests that need a real
// browser. puppeteer owns the profile directory and removes it once every chromium
// process is gone, which a hand-rolled rmSync after SIGTERM cannot promise.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

export const CHROMIUM = process.env.CHROMIUM
  ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find(existsSync);

export async function launchBrowser() {
  assert.ok(CHROMIUM, 'chromium is not installed (scripts/install-deps installs it)');
  // Root in CI: Chromium's sandbox needs user namespaces it cannot have there.
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

/** Closes the browser; a browser that will not close is killed, never left running. */
export async function closeBrowser(browser) {
  if (!browser) return;
  try {
    await Promise.race([
      browser.close(),
      new Promise((_, rej) => setTimeout(() => rej(new Error('chromium did not close')), 10000)),
    ]);
  } catch (e) {
    console.log(`# ${e.message}; killing it`);
    browser.process()?.kill('SIGKILL');
  }
}
