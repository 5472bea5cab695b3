// The UI end to end: a headless host and a headless member (real processes on loopback, each
// serving the UI and control API), a `kiwi join` member, and Debian's Chromium clicking through
// them: first-run device card, host over stories260K, join with the code, approve, the ring, a
// streamed chat answer, and a killed member turning red while the ring closes without it.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { kiwiEntry, ProcessSet, tsEntry, waitEvent, type Proc } from '../electron/engine/test-support/processes.js';
import { launchChromium, shot } from './support/browser.js';
import { unlabelled, untabbable } from './support/keyboard.js';

const procs = new ProcessSet();
let browser: Browser | undefined;
/** Uncaught exceptions in any page; the last test asserts there were none. */
const pageErrors: string[] = [];

let scratch: string | undefined;

afterAll(async () => {
  await browser?.close();
  procs.dispose();
  if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
});

async function headless(name: string, args: string[] = []): Promise<{ proc: Proc; uiUrl: string; apiUrl: string; token: string }> {
  if (scratch === undefined) throw new Error('beforeAll makes the scratch folder first');
  const proc = procs.spawn(process.execPath, [...tsEntry('e2e/support/headless-host.ts'), '--name', name, '--bench-cache', join(scratch, name), ...args]);
  const ui = await waitEvent(proc, (e) => e.event === 'ui', `${name}'s UI address`, 30_000);
  return { proc, uiUrl: ui.ui_url as string, apiUrl: ui.api_url as string, token: ui.token as string };
}

async function openPage(url: string): Promise<Page> {
  const context = await (browser as Browser).newContext({ viewport: { width: 1100, height: 760 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  const page = await context.newPage();
  page.on('pageerror', (err) => pageErrors.push(`${url}: ${err.message}`));
  await page.goto(url);
  return page;
}

describe('the Kiwi UI against live headless sessions', () => {
  let host: Awaited<ReturnType<typeof headless>>;
  let alice: Awaited<ReturnType<typeof headless>>;
  let hostPage: Page;
  let alicePage: Page;
  let code = '';
  let rendezvous = '';
  let bob: Proc | undefined;

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'kiwi-e2e-'));
    // The host plans its ring once both members (alice from her UI, bob from the CLI) are in.
    [host, alice, browser] = await Promise.all([headless('host', ['--expect', '2']), headless('alice'), launchChromium()]);
    [hostPage, alicePage] = await Promise.all([openPage(host.uiUrl), openPage(alice.uiUrl)]);
  });

  it('shows the device card with the benchmark progress on first run', async () => {
    const card = hostPage.getByRole('region', { name: 'This device' });
    // The benchmark starts by itself on first run and shows its progress while it measures
    // (probing onnxruntime's providers alone takes longer than the UI needs to show it).
    await card.getByRole('progressbar', { name: 'Device benchmark progress' }).waitFor({ timeout: 30_000 });
    await shot(hostPage, '01-device-benchmark');
    // Then the card: figures replace the progress, and the first-run screen stays in view.
    await card.getByText('Memory bandwidth', { exact: true }).waitFor({ timeout: 60_000 });
    await expect(card.getByRole('progressbar').count()).resolves.toBe(0);
    expect(await card.getByRole('term').allTextContents()).toEqual(['Computer', 'CPU', 'Memory', 'GPU', 'Runs on', 'Memory bandwidth']);
    await expect(card.locator('.pill').allTextContents()).resolves.toContain('CPU');
    expect(await card.locator('.big-figure').textContent()).toMatch(/^\d+\.\d$/);
    // The token left the address bar once read.
    expect(hostPage.url()).not.toContain('token=');
    await shot(hostPage, '02-device-card');
  });

  it('hosts a session over a local GGUF file and shows its code large and copyable', async () => {
    await hostPage.getByRole('tab', { name: 'Session' }).click();
    await hostPage.getByLabel('Model: GGUF file or download URL').fill(await testModelPath('stories260K.gguf'));
    await hostPage.getByRole('button', { name: 'Start hosting' }).click();
    code = (await hostPage.getByTestId('session-code').textContent({ timeout: 30_000 })) ?? '';
    expect(code).toMatch(/^\d+-[a-z]+-[a-z]+-[a-z]+$/);
    rendezvous = (await hostPage.getByTestId('rendezvous').textContent()) ?? '';
    expect(rendezvous).toMatch(/^ws:\/\//);
    await hostPage.getByRole('button', { name: 'Copy the session code' }).click();
    expect(await hostPage.evaluate(() => navigator.clipboard.readText())).toBe(code);
    await shot(hostPage, '03-host-session');
  });

  it('joins with the code from the member\'s UI and waits for approval', async () => {
    await alicePage.getByRole('tab', { name: 'Session' }).click();
    await alicePage.getByLabel('Session code').fill(code);
    await alicePage.getByLabel(/^Rendezvous address/).fill(rendezvous);
    await alicePage.getByLabel('Your name (optional)').fill('alice');
    await alicePage.getByLabel(/^Memory Kiwi may use here/).fill('1536');
    await alicePage.getByRole('button', { name: 'Join' }).click();
    await alicePage.getByTestId('member-phase').filter({ hasText: 'Waiting for the host' }).waitFor();
    await shot(alicePage, '04-join-pending');
  });

  it('lets the host approve joiners, who then take part in the ring', async () => {
    // Both screens show the same fingerprint, so the host approves the machine, not a name anybody can pick.
    const aliceFp = ((await alicePage.getByTestId('self-fingerprint').locator('code').textContent({ timeout: 30_000 })) ?? '').trim();
    expect(aliceFp).toMatch(/^[0-9a-z]{4}-[0-9a-z]{4}$/);
    expect(((await hostPage.getByTestId('pending-fingerprint').locator('code').textContent({ timeout: 30_000 })) ?? '').trim()).toBe(aliceFp);
    await hostPage.getByRole('button', { name: 'Approve alice' }).click();
    await alicePage.getByTestId('member-phase').filter({ hasText: 'In the ring' }).waitFor();
    // The memory budget alice typed is what the host plans her with.
    await hostPage.getByRole('row', { name: /alice.*1\.5 GB/ }).waitFor();
    // A second member joins from the command line with the same code.
    bob = procs.spawn(process.execPath, [...kiwiEntry(), 'join', code, '--rendezvous', rendezvous, '--name', 'bob', '--listen', '127.0.0.1', '--heartbeat-ms', '400', '--json']);
    await hostPage.getByRole('button', { name: 'Approve bob' }).click({ timeout: 30_000 });
    await waitEvent(bob, (e) => e.event === 'approved', 'bob approved');
    await hostPage.getByRole('row', { name: /bob.*in the ring/ }).waitFor();
    await shot(hostPage, '05-host-members');
    await shot(alicePage, '06-member-view');
  });

  it('draws the ring with each link\'s kind and round-trip time', async () => {
    await hostPage.getByRole('tab', { name: 'Ring' }).click();
    const ring = hostPage.getByTestId('topology');
    await ring.getByTestId('node-alice').waitFor();
    await ring.getByTestId('node-bob').waitFor();
    // Three peers, three links, each up and measured.
    await hostPage.waitForFunction(() => {
      const labels = [...document.querySelectorAll('[data-testid^="link-"] text')].map((t) => t.textContent ?? '');
      return labels.length === 3 && labels.every((l) => /^(direct|relayed) · [\d.]+ ms$/.test(l));
    }, undefined, { timeout: 30_000 });
    expect(await ring.getAttribute('aria-label')).toMatch(/^Ring of 3: You \(host\) → (alice|bob) → (alice|bob)$/);
    // The plan: every node of the ring names the layers it holds, the host also the head.
    await hostPage.waitForFunction(() => {
      const texts = [...document.querySelectorAll('[data-testid="topology"] text')].map((t) => t.textContent ?? '');
      // Counted from 1 as people count: "layer 5", "layers 1–2 (2 layers) + head".
      return texts.filter((t) => /^layers? \d+/.test(t)).length === 3 && texts.some((t) => /^layers? 1(–\d+ \(\d+ layers\))? \+ head/.test(t));
    }, undefined, { timeout: 60_000 });
    await shot(hostPage, '07-ring');
    // A member sees its own place in the ring: itself and its measured links.
    await alicePage.getByRole('tab', { name: 'Ring' }).click();
    await alicePage.getByTestId('topology').getByTestId('node-You').waitFor();
    await alicePage.waitForFunction(() => document.querySelectorAll('[data-testid^="link-"]').length === 2, undefined, { timeout: 30_000 });
    await shot(alicePage, '07-member-ring');
    await alicePage.getByRole('tab', { name: 'Session' }).click();
  });

  it('streams a chat answer from the host\'s /v1 in the playground', async () => {
    // /v1 answers once every member has loaded its layers.
    await hostPage.locator('.state-chip', { hasText: 'serving' }).waitFor({ timeout: 60_000 });
    await hostPage.getByRole('tab', { name: 'Chat' }).click();
    await hostPage.getByLabel('Message').fill('Once upon a time');
    await hostPage.getByRole('button', { name: 'Send' }).click();
    const answer = hostPage.getByTestId('chat-log').locator('.bubble.assistant');
    // The Send button returns when the stream has ended.
    await hostPage.getByRole('button', { name: 'Send' }).waitFor({ timeout: 60_000 });
    const text = (await answer.textContent()) ?? '';
    expect(text.replace(/^Model: /, '').trim().length).toBeGreaterThan(0);
    await expect(hostPage.getByText('http://127.0.0.1', { exact: false }).first().isVisible()).resolves.toBe(true);
    await shot(hostPage, '08-chat');

    // The relay really streams: several chunks, then [DONE].
    const res = await fetch(`${host.apiUrl}/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${host.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 12, temperature: 0 }),
    });
    const events = (await res.text()).split('\n\n').filter((b) => b.startsWith('data: '));
    expect(events.length).toBeGreaterThan(3);
    expect(events.at(-1)).toBe('data: [DONE]');
  });

  it('shows the host the plan and each member the layers it loaded', async () => {
    await hostPage.getByRole('tab', { name: 'Session' }).click();
    await hostPage.getByText(/^5 layers over 3 stages/).waitFor();
    // The chats went through the ring, so every stage's time is measured.
    await hostPage.waitForFunction(() => {
      const cells = [...document.querySelectorAll('table')].flatMap((t) => [...t.querySelectorAll('tbody tr')].map((r) => r.lastElementChild?.textContent ?? ''));
      return cells.filter((c) => /^[\d.]+ ms$/.test(c)).length === 3;
    }, undefined, { timeout: 10_000 });
    await shot(hostPage, '08-host-plan');
    // Counted from 1, as the ring view and the plan table count them.
    await alicePage.getByText(/^layers? \d+(–\d+ \(\d+ layers\))?$/).waitFor();
    const planLayers = await hostPage.locator('table').last().locator('tbody tr td:nth-child(2)').allTextContents();
    expect(planLayers).toHaveLength(3);
    expect(planLayers.every((t) => /^layers? \d+(–\d+ \(\d+ layers\))?$/.test(t))).toBe(true);
    expect(planLayers.some((t) => /^layers? 1(–|$)/.test(t))).toBe(true);
    await alicePage.getByText('100%').waitFor();
    await alicePage.getByText(/^[\d.]+ ms per token$/).waitFor({ timeout: 10_000 });
    await shot(alicePage, '08-member-layers');
  });

  it('turns a killed member red and closes the ring without it', async () => {
    await hostPage.getByRole('tab', { name: 'Ring' }).click();
    bob?.child.kill('SIGKILL');
    const ring = hostPage.getByTestId('topology');
    await ring.locator('[data-testid="node-bob"][data-state="unreachable"]').waitFor({ timeout: 30_000 });
    // Red in place at once, then beside the ring once the host re-planned without him.
    await hostPage.waitForFunction(() => document.querySelector('[data-testid="topology"]')?.getAttribute('aria-label') === 'Ring of 2: You (host) → alice; out of the ring: bob', undefined, { timeout: 60_000 });
    await hostPage.waitForFunction(() => {
      const labels = [...document.querySelectorAll('[data-testid^="link-"] text')].map((t) => t.textContent ?? '');
      return labels.length === 1 && /^(direct|relayed) · [\d.]+ ms$/.test(labels[0] ?? '');
    }, undefined, { timeout: 30_000 });
    await shot(hostPage, '09-ring-recovered');
  });

  it('lets the member pause contributing and resume', async () => {
    await alicePage.getByRole('button', { name: 'Pause contributing' }).click();
    await alicePage.getByTestId('member-phase').filter({ hasText: 'Paused' }).waitFor();
    await shot(alicePage, '10-member-paused');
    await alicePage.getByRole('button', { name: 'Resume contributing' }).click();
    await alicePage.getByTestId('member-phase').filter({ hasText: 'In the ring' }).waitFor();
  });

  it('reaches every control by keyboard and labels every input', async () => {
    // Arrow keys move between the tabs (one tab stop for the tab list)...
    await hostPage.getByRole('tab', { name: 'Ring' }).focus();
    await hostPage.keyboard.press('ArrowRight');
    expect(await hostPage.evaluate(() => document.activeElement?.textContent)).toBe('Chat');
    await hostPage.keyboard.press('ArrowLeft');
    await hostPage.keyboard.press('ArrowLeft');
    await hostPage.keyboard.press('Enter');
    expect(await hostPage.evaluate(() => document.activeElement?.textContent)).toBe('Session');
    // ...and Tab visits every other enabled control of each screen.
    for (const [page, tab] of [[hostPage, 'Session'], [hostPage, 'Ring'], [hostPage, 'Chat'], [alicePage, 'Session']] as const) {
      await page.getByRole('tab', { name: tab }).click();
      expect(await untabbable(page), `${tab} controls Tab never reached`).toEqual([]);
      expect(await unlabelled(page)).toBe(0);
    }
  });

  it('threw no uncaught exception in any page along the way', () => {
    expect(pageErrors).toEqual([]);
  });
});
