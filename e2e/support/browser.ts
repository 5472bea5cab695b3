// Debian's Chromium driven by playwright-core (no browser download): where it lives, the flags a
// container needs, and screenshots under e2e/artifacts/ (ignored by git).
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.KIWI_CHROMIUM ?? '/usr/bin/chromium';
export const ARTIFACTS = resolve(import.meta.dirname, '../artifacts');

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`No Chromium at ${CHROMIUM}. Install Debian's: apt-get install -y chromium (or set KIWI_CHROMIUM).`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

export async function shot(page: Page, name: string): Promise<void> {
  await mkdir(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: resolve(ARTIFACTS, `${name}.png`), fullPage: true });
}
