// The ring live, end to end: a headless host, a headless member (alice, with her own UI) and two
// `kiwi join` members (bob, carol) as real processes on loopback, and Chromium watching. Tokens
// flow along the ring's links while chats run (still dots under prefers-reduced-motion); the
// member's ring names the others; then bob is killed with SIGKILL: he turns red, a banner says the
// ring is re-forming while it does, the ring recovers without him (chats carry on and new ones are
// answered), and the recovery shows in the history with its duration and the bytes it moved.
// Every device counts 550 kB for the planner: three hold stories260K, two cannot. So when carol is
// killed too, the host waits for a member (a banner with the countdown) until dave joins.
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControlEvent, SessionStatus } from '../common/control-api.js';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { isolatedCacheDir, ProcessSet, tsEntry, waitEvent, type Proc } from '../electron/engine/test-support/processes.js';
import { launchChromium, shot } from './support/browser.js';

const procs = new ProcessSet();
const scratch = isolatedCacheDir('kiwi-e2e-recovery-');
let browser: Browser | undefined;
const pageErrors: string[] = [];
const stops: Array<() => void> = [];

afterAll(async () => {
  for (const stop of stops) stop();
  await browser?.close();
  procs.dispose();
});

interface Headless {
  proc: Proc;
  uiUrl: string;
  apiUrl: string;
  token: string;
}

async function headless(name: string, args: string[] = []): Promise<Headless> {
  const proc = procs.spawn(process.execPath, [...tsEntry('e2e/support/headless-host.ts'), '--name', name, '--bench-cache', join(scratch(), name), ...args]);
  const ui = await waitEvent(proc, (e) => e.event === 'ui', `${name}'s UI address`, 30_000);
  return { proc, uiUrl: ui.ui_url as string, apiUrl: ui.api_url as string, token: ui.token as string };
}

function call(k: Headless, method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${k.apiUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${k.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    ...(signal !== undefined ? { signal } : {}),
  });
}

async function until(what: string, k: Headless, ok: (s: SessionStatus) => boolean, timeoutMs = 60_000): Promise<SessionStatus> {
  const started = Date.now();
  for (;;) {
    const s = SessionStatus.parse(await (await call(k, 'GET', '/status')).json());
    if (ok(s)) return s;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Every status snapshot the control API pushes, as the UI receives them. */
function recordStatuses(k: Headless): SessionStatus[] {
  const seen: SessionStatus[] = [];
  const abort = new AbortController();
  stops.push(() => abort.abort());
  void (async () => {
    const res = await call(k, 'GET', '/events', undefined, abort.signal);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let i: number;
      while ((i = buffer.indexOf('\n\n')) >= 0) {
        const data = buffer.slice(0, i).split('\n').find((l) => l.startsWith('data: '));
        buffer = buffer.slice(i + 2);
        if (data === undefined) continue;
        const e = ControlEvent.parse(JSON.parse(data.slice(6)));
        if (e.type === 'status') seen.push(e.status);
      }
    }
  })().catch(() => undefined);
  return seen;
}

/** One streamed chat through the host's relay to /v1: its text, and whether it ended with [DONE] and no error. */
async function chat(k: Headless, maxTokens: number): Promise<{ done: boolean; error: string | null; chunks: number }> {
  let res: Response;
  let text: string;
  try {
    res = await call(k, 'POST', '/chat', { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: maxTokens });
    text = await res.text();
  } catch (err) {
    return { done: false, error: `the chat request failed: ${(err as Error).message}`, chunks: 0 };
  }
  const events = text.split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => b.slice(6));
  const error = events.map((d) => (d === '[DONE]' ? null : (JSON.parse(d) as { error?: { message: string } }).error?.message ?? null)).find((m) => m !== null) ?? null;
  return { done: res.status === 200 && events.at(-1) === '[DONE]', error: res.status === 200 ? error : `HTTP ${res.status}: ${text}`, chunks: events.length };
}

/** Chats one after another until stopped: tokens keep flowing while the test looks. */
function keepChatting(k: Headless): { stop: () => Promise<Array<Awaited<ReturnType<typeof chat>>>> } {
  let running = true;
  const results: Array<Awaited<ReturnType<typeof chat>>> = [];
  const loop = (async () => {
    while (running) results.push(await chat(k, 120));
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return results;
    },
  };
}

async function openPage(url: string): Promise<Page> {
  const context = await (browser as Browser).newContext({ viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  page.on('pageerror', (err) => pageErrors.push(`${url}: ${err.message}`));
  await page.goto(url);
  return page;
}

describe('the ring live: tokens flowing, a member killed, the ring recovering', () => {
  let host: Headless;
  let alice: Headless;
  let bob: Proc;
  let carol: Proc;
  let code = '';
  let rendezvous = '';
  let hostPage: Page;
  let alicePage: Page;

  const cliMember = (name: string): Proc => procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', name, '--heartbeat-ms', '400', '--no-shard-cache', '--json');

  beforeAll(async () => {
    [host, alice, browser] = await Promise.all([headless('host', ['--expect', '3', '--device-memory', '550000']), headless('alice'), launchChromium()]);
    const hosted = await call(host, 'POST', '/session/host', { model: await testModelPath('stories260K.gguf'), auto_approve: true });
    const s = SessionStatus.parse(await hosted.json());
    code = s.code ?? '';
    rendezvous = s.rendezvous ?? '';
    expect((await call(alice, 'POST', '/session/join', { code, rendezvous, name: 'alice' })).status).toBe(200);
    bob = cliMember('bob');
    carol = cliMember('carol');
    await until('the ring to serve', host, (s) => s.serving !== null, 90_000);
    [hostPage, alicePage] = await Promise.all([openPage(host.uiUrl), openPage(alice.uiUrl)]);
  }, 120_000);

  it('shows tokens flowing along the ring\'s links while chats run, still under reduced motion', async () => {
    await hostPage.getByRole('tab', { name: 'Ring' }).click();
    await expect(hostPage.getByTestId('flow').getAttribute('data-active')).resolves.toBe('false');
    const chats = keepChatting(host);
    try {
      await hostPage.locator('[data-testid="flow"][data-active="true"]').waitFor({ timeout: 30_000 });
      await hostPage.getByTestId('flow').filter({ hasText: /^Tokens flowing · [\d.]+ tokens\/s$/ }).waitFor({ timeout: 10_000 });
      // A moving dotted overlay on each of the four links.
      const dots = hostPage.getByTestId('flow-dots');
      await expect(dots.count()).resolves.toBe(4);
      const moving = await dots.first().evaluate((el) => ({ name: getComputedStyle(el).animationName, duration: parseFloat(getComputedStyle(el).animationDuration) }));
      expect(moving.name).toBe('flow');
      expect(moving.duration).toBeGreaterThan(0);
      await shot(hostPage, '11-ring-tokens-flowing');
      // Reduced motion: the dots stay, still.
      await hostPage.emulateMedia({ reducedMotion: 'reduce' });
      await expect(dots.first().evaluate((el) => getComputedStyle(el).animationName)).resolves.toBe('none');
      await expect(dots.count()).resolves.toBe(4);
      await hostPage.emulateMedia({ reducedMotion: 'no-preference' });
      // A member sees the flow through its own stage (its measured step times move).
      await alicePage.getByRole('tab', { name: 'Ring' }).click();
      await alicePage.locator('[data-testid="flow"][data-active="true"]').waitFor({ timeout: 15_000 });
      await expect(alicePage.getByTestId('flow-dots').count()).resolves.toBeGreaterThan(0);
    } finally {
      const results = await chats.stop();
      expect(results.every((r) => r.done && r.error === null)).toBe(true);
    }
    // Once the chats end, the flow stops.
    await hostPage.locator('[data-testid="flow"][data-active="false"]').waitFor({ timeout: 15_000 });
    await expect(hostPage.getByTestId('flow-dots').count()).resolves.toBe(0);
  });

  it('names the other members in a member\'s ring', async () => {
    await alicePage.getByRole('tab', { name: 'Ring' }).click();
    const ring = alicePage.getByTestId('topology');
    await ring.getByTestId('node-You').waitFor();
    await ring.getByTestId('node-Host').waitFor();
    await ring.getByTestId('node-bob').waitFor({ timeout: 15_000 });
    await ring.getByTestId('node-carol').waitFor({ timeout: 15_000 });
    expect(await ring.locator('[data-testid^="node-peer "]').count()).toBe(0);
    await shot(alicePage, '12-member-ring-names');
  });

  it('turns a killed member red, shows the ring re-forming, and recovers without him', async () => {
    const statuses = recordStatuses(host);
    // The page notes every banner it shows, however briefly.
    await hostPage.evaluate(() => {
      const w = window as unknown as { banners: string[] };
      w.banners = [];
      new MutationObserver(() => {
        const b = document.querySelector('[data-testid="ring-banner"]');
        if (b !== null && w.banners.at(-1) !== b.textContent) w.banners.push(b.textContent ?? '');
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    const chats = keepChatting(host);
    await new Promise((r) => setTimeout(r, 1000));
    const bannerShot = hostPage.getByTestId('ring-banner').waitFor({ timeout: 30_000 }).then(() => shot(hostPage, '13-ring-recovering'), () => undefined);
    bob.child.kill('SIGKILL');

    const ring = hostPage.getByTestId('topology');
    await ring.locator('[data-testid="node-bob"][data-state="unreachable"], [data-testid="node-bob"][data-state="evicted"]').waitFor({ timeout: 30_000 });
    // The ring re-forms over host, alice and carol; bob stays beside it in red.
    await hostPage.waitForFunction(() => /^Ring of 3: You \(host\) → (alice|carol) → (alice|carol); out of the ring: bob$/.test(document.querySelector('[data-testid="topology"]')?.getAttribute('aria-label') ?? ''), undefined, { timeout: 60_000 });
    await hostPage.waitForFunction(() => {
      const labels = [...document.querySelectorAll('[data-testid^="link-"] text')].map((t) => t.textContent ?? '');
      return labels.length === 3 && labels.every((l) => /^(direct|relayed) · [\d.]+ ms$/.test(l));
    }, undefined, { timeout: 30_000 });
    const recovered = await until('the ring to serve again', host, (s) => s.ring_state?.phase === 'serving' && (s.ring_state?.recoveries.length ?? 0) >= 1);
    await bannerShot;
    const results = await chats.stop();

    // The control API said so while it happened: recovering, with a reason.
    const during = statuses.find((s) => s.ring_state?.phase === 'recovering');
    expect(during?.ring_state?.recovery?.reason).toMatch(/\S/);
    // ...and the page showed it.
    const banners = await hostPage.evaluate(() => (window as unknown as { banners: string[] }).banners);
    expect(banners.some((b) => b.startsWith('Re-forming the ring'))).toBe(true);
    await hostPage.getByTestId('ring-banner').waitFor({ state: 'detached', timeout: 10_000 });

    // The history: one re-plan, its duration and the bytes it moved.
    const record = recovered.ring_state?.recoveries.at(-1);
    expect(recovered.ring_state?.epoch).toBe(2);
    expect(record).toMatchObject({ epoch: 2 });
    expect(record?.duration_ms).toBeGreaterThan(0);
    const row = hostPage.getByTestId('recoveries').locator('tbody tr').first();
    await row.waitFor();
    const cells = await row.locator('td').allTextContents();
    expect(cells[0]).toBe('2');
    expect(cells[3]).toMatch(/^[\d.]+ m?s$/);
    expect(cells[4]).toMatch(/^[\d.]+ (B|KB|MB)$/);
    await hostPage.locator('.state-chip', { hasText: 'serving' }).waitFor({ timeout: 30_000 });
    await shot(hostPage, '14-ring-recovered');

    // Requests running through the drop carried on; a new one is answered by the smaller ring.
    expect(results.filter((r) => !r.done || r.error !== null)).toEqual([]);
    const after = await chat(host, 16);
    expect(after).toMatchObject({ done: true, error: null });

    // alice, still in the ring, sees bob drop out in red too.
    await alicePage.getByTestId('topology').locator('[data-testid="node-bob"]:not([data-state="ring"])').waitFor({ timeout: 30_000 });
    await shot(alicePage, '15-member-sees-drop');
  }, 180_000);

  it('waits for a member when the rest cannot hold the model, with a countdown, and recovers when one joins', async () => {
    carol.child.kill('SIGKILL');
    const banner = hostPage.locator('[data-testid="ring-banner"][data-phase="waiting"]');
    await banner.waitFor({ timeout: 60_000 });
    expect(await banner.textContent()).toMatch(/^Waiting for a member to return: the members left cannot hold the model together\. Requests wait until .+\.(\d+ s|\d+:\d\d) left$/);
    const waiting = await until('the host to wait', host, (s) => s.ring_state?.phase === 'waiting');
    expect(waiting.ring_state?.waiting_until).toBeGreaterThan(Date.now());
    await hostPage.getByTestId('headline').filter({ hasText: 'waiting for a member' }).waitFor();
    await hostPage.getByTestId('topology').locator('[data-testid="node-carol"]:not([data-state="ring"])').waitFor({ timeout: 30_000 });
    // The countdown runs.
    const left = async (): Promise<string> => (await banner.locator('.banner-clock').textContent()) ?? '';
    const first = await left();
    await hostPage.waitForFunction((was) => document.querySelector('[data-testid="ring-banner"] .banner-clock')?.textContent !== was, first, { timeout: 5000 });
    await shot(hostPage, '16-ring-waiting');

    // A new member joins: the ring forms again over three devices and serves.
    cliMember('dave');
    const back = await until('the ring to serve with dave', host, (s) => s.ring_state?.phase === 'serving' && (s.ring_state?.recoveries.length ?? 0) >= 2, 90_000);
    expect(back.ring_state?.epoch).toBe(3);
    // The page polls: its waiting banner gives way to a recovering one before it shows serving, so
    // wait for no banner at all; the host records the recovery as it starts serving (one step).
    await hostPage.getByTestId('ring-banner').waitFor({ state: 'detached', timeout: 10_000 });
    await hostPage.getByTestId('topology').getByTestId('node-dave').waitFor();
    await expect(hostPage.getByTestId('recoveries').locator('tbody tr').count()).resolves.toBe(2);
    expect(await hostPage.getByTestId('recoveries').locator('tbody tr').first().locator('td').first().textContent()).toBe('3');
    expect(await chat(host, 16)).toMatchObject({ done: true, error: null });
    await shot(hostPage, '17-ring-back');
  }, 180_000);

  it('threw no uncaught exception in any page', () => {
    expect(pageErrors).toEqual([]);
  });
});
