// A first run with nothing to host but what Kiwi ships: a headless host (as the app, given the
// embedded models/stories260K.gguf as its default) and Chromium clicking "Host the built-in story
// model" on the start screen (with the model itself named as its draft model); a `kiwi join`
// member comes in with the code and the session serves it, its plan counting layers from 1, and
// drafts with the draft model.
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultModelPath } from '../electron/engine/paths.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, tsEntry, waitEvent } from '../electron/engine/test-support/processes.js';
import { launchChromium, shot } from './support/browser.js';
import { unlabelled, untabbable } from './support/keyboard.js';

const procs = new ProcessSet();
const scratch = isolatedCacheDir('kiwi-e2e-builtin-');
let browser: Browser | undefined;
const pageErrors: string[] = [];

afterAll(async () => {
  await browser?.close();
  procs.dispose();
});

describe('hosting the built-in story model from the start screen', () => {
  let page: Page;

  beforeAll(async () => {
    // The ring plans once one member is in (a ring needs two machines).
    const host = procs.spawn(process.execPath, [...tsEntry('e2e/support/headless-host.ts'), '--name', 'host', '--expect', '1', '--bench-cache', join(scratch(), 'bench')]);
    const ui = await waitEvent(host, (e) => e.event === 'ui', 'the host\'s UI address', 30_000);
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
    page = await context.newPage();
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(ui.ui_url as string);
  });

  it('offers the built-in model on the start screen, reachable by keyboard', async () => {
    await page.getByRole('tab', { name: 'Session' }).click();
    await page.getByRole('button', { name: 'Host the built-in story model (stories260K)' }).waitFor();
    expect(await untabbable(page)).toEqual([]);
    expect(await unlabelled(page)).toBe(0);
    await shot(page, '30-builtin-model-offer');
  });

  it('hosts it with one click and serves it once a friend joins, with the draft model the form names', async () => {
    await page.getByLabel('Let in everyone who has the code (no approval)').check();
    // The story model drafts for itself: same vocabulary, and its guesses are always right.
    const builtIn = defaultModelPath();
    if (builtIn === undefined) throw new Error('this checkout has no embedded model (models/stories260K.gguf)');
    await page.getByLabel('Draft model (optional)').fill(builtIn);
    await page.getByRole('button', { name: 'Host the built-in story model (stories260K)' }).click();
    const code = (await page.getByTestId('session-code').textContent({ timeout: 30_000 })) ?? '';
    expect(code).toMatch(/^\d+-[a-z]+-[a-z]+-[a-z]+$/);
    const rendezvous = (await page.getByTestId('rendezvous').textContent()) ?? '';
    // The embedded file of this checkout, not one the user typed.
    expect(await page.getByText('Model:').locator('code').first().textContent()).toBe(defaultModelPath());
    procs.spawn(process.execPath, [...kiwiEntry(), 'join', code, '--rendezvous', rendezvous, '--name', 'bob', '--listen', '127.0.0.1', '--heartbeat-ms', '400', '--json']);
    await page.locator('.state-chip', { hasText: 'serving' }).waitFor({ timeout: 60_000 });
    // Its five layers over the two machines, counted as people count them: 1 to 5, each once.
    await page.getByText(/^5 layers over 2 stages/).waitFor();
    const cells = await page.locator('table').last().locator('tbody tr td:nth-child(2)').allTextContents();
    const ranges = cells.map((t) => /^layers? (\d+)(?:–(\d+) \(\d+ layers\))?$/.exec(t)).map((m) => (m === null ? [0, 0] : [Number(m[1]), Number(m[2] ?? m[1])]));
    expect(ranges.sort((a, b) => (a[0] ?? 0) - (b[0] ?? 0)).flatMap(([a = 0, b = 0]) => Array.from({ length: b - a + 1 }, (_, i) => a + i))).toEqual([1, 2, 3, 4, 5]);
    await shot(page, '31-builtin-model-serving');
    // The ring drafts with it: /health says so.
    const api = (await page.getByText('Model:').locator('code').nth(1).textContent()) ?? '';
    const health = (await (await fetch(`${new URL(api).origin}/health`)).json()) as { speculative?: unknown };
    expect(health.speculative).toMatchObject({ mode: 'auto', drafter: 'draft-model' });
  });

  it('threw no uncaught exception in the page', () => {
    expect(pageErrors).toEqual([]);
  });
});
