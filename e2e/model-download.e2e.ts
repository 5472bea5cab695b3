// Hosting a model by its URL from the UI: a headless host downloads stories260K from a slow
// loopback server (never the internet) into its model cache, the page shows the bytes, total and
// speed, the user cancels and resumes (a Range request goes on from the partial file), then the
// host serves it and a `kiwi join` member fetches its own tensors from the same URL.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { isolatedCacheDir, ProcessSet, tsEntry, waitEvent, type Proc } from '../electron/engine/test-support/processes.js';
import { launchChromium, shot } from './support/browser.js';
import { unlabelled, untabbable } from './support/keyboard.js';
import { startSlowFileServer, type SlowFileServer } from './support/slow-file-server.js';

const procs = new ProcessSet();
const scratch = isolatedCacheDir('kiwi-e2e-download-');
let browser: Browser | undefined;
let server: SlowFileServer | undefined;
const pageErrors: string[] = [];

afterAll(async () => {
  await browser?.close();
  procs.dispose();
  await server?.close();
});

describe('hosting a model downloaded from its URL', () => {
  let host: Proc;
  let page: Page;
  let modelBytes: Buffer;

  beforeAll(async () => {
    modelBytes = await readFile(await testModelPath('stories260K.gguf'));
    // About 4 s for the whole file: long enough to watch and cancel, short enough for a test.
    server = await startSlowFileServer(modelBytes, 'stories260K.gguf', 300 * 1024);
    host = procs.spawn(process.execPath, [...tsEntry('e2e/support/headless-host.ts'), '--name', 'host', '--expect', '1', '--bench-cache', join(scratch(), 'bench')]);
    const ui = await waitEvent(host, (e) => e.event === 'ui', 'the host\'s UI address', 30_000);
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
    page = await context.newPage();
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(ui.ui_url as string);
  });

  it('shows the download\'s bytes, total and speed, and cancels it', async () => {
    await page.getByRole('tab', { name: 'Session' }).click();
    await page.getByLabel('Model: GGUF file or download URL').fill(server?.url ?? '');
    await page.getByLabel('Let in everyone who has the code (no approval)').check();
    await page.getByRole('button', { name: 'Download and host' }).click();
    const download = page.getByTestId('download');
    await download.and(page.locator('[data-state="downloading"]')).waitFor({ timeout: 15_000 });
    expect(await download.locator('code').textContent()).toBe('stories260K.gguf');
    // Some bytes of the whole, at a measured speed, with the time left.
    await page.getByTestId('download-figures').filter({ hasText: /^[\d.]+ (B|KB|MB) of 1\.1 MB \(\d+%\) · [\d.]+ (KB|MB)\/s · about \d+ s left$/ }).waitFor({ timeout: 15_000 });
    const bar = page.getByRole('progressbar', { name: 'Model download progress' });
    expect(Number(await bar.getAttribute('aria-valuenow'))).toBeLessThan(100);
    await expect(page.getByTestId('headline').textContent()).resolves.toBe('Downloading the model…');
    await shot(page, '20-model-downloading');

    // Cancel is a real button, reachable by keyboard.
    const cancel = page.getByRole('button', { name: 'Cancel download' });
    await cancel.focus();
    await page.keyboard.press('Enter');
    await download.and(page.locator('[data-state="cancelled"]')).waitFor({ timeout: 10_000 });
    await page.getByText('Kiwi keeps what it has downloaded').waitFor();
    const stoppedAt = (await page.getByTestId('download-figures').textContent()) ?? '';
    expect(stoppedAt).not.toMatch(/\(100%\)/);
    await shot(page, '21-download-cancelled');
    // Resume, the form and the join form: all reached by Tab, every input labelled.
    expect(await untabbable(page)).toEqual([]);
    expect(await unlabelled(page)).toBe(0);
  });

  it('resumes from the partial file, then hosts the model and a member fetches its layers from the URL', async () => {
    const before = server?.requests.length ?? 0;
    await page.getByRole('button', { name: 'Resume download' }).click();
    await page.getByTestId('download-figures').filter({ hasText: 'resumed from the earlier part' }).waitFor({ timeout: 15_000 });
    // The resume asked for the rest only.
    expect(server?.requests[before]?.range).toMatch(/^bytes=[1-9]\d*-$/);
    const code = (await page.getByTestId('session-code').textContent({ timeout: 30_000 })) ?? '';
    expect(code).toMatch(/^\d+-[a-z]+-[a-z]+-[a-z]+$/);
    // The served model is the cached download, under the URL's file name.
    await page.getByText(/Model: .*models\/[0-9a-f]{16}\/stories260K\.gguf/).waitFor();
    await shot(page, '22-hosting-downloaded');

    const rendezvous = (await page.getByTestId('rendezvous').textContent()) ?? '';
    const ranged = server?.requests.length ?? 0;
    const member = procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--heartbeat-ms', '400', '--no-shard-cache', '--json');
    const ready = await waitEvent(member, (e) => e.event === 'ready', 'the member to load its layers', 60_000);
    expect(ready.source).toBe('url');
    // Just its tensors' byte ranges, not the whole file.
    const memberRanges = (server?.requests.slice(ranged) ?? []).map((r) => r.range ?? '');
    expect(memberRanges.length).toBeGreaterThan(0);
    for (const r of memberRanges) expect(r).toMatch(/^bytes=\d+-\d+$/);
    await page.locator('.state-chip', { hasText: 'serving' }).waitFor({ timeout: 60_000 });
    await shot(page, '23-serving-downloaded');
  });

  it('threw no uncaught exception in the page', () => {
    expect(pageErrors).toEqual([]);
  });
});
