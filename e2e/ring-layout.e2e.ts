// The ring view's labels at 2, 3, 5 and 8 members: a `kiwi host --ui-port` serving a synthetic
// 16-layer model and `kiwi join` members as real processes on loopback, joining in steps (the host
// re-plans the ring over everyone after each step), and Chromium showing the ring. At each size,
// once every stage is ready and every link measured, a screenshot goes to e2e/artifacts/ and the
// SVG's own bounding boxes must show no two texts overlapping and no text over a node.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SessionStatus } from '../common/control-api.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, waitEvent, type Proc } from '../electron/engine/test-support/processes.js';
import { launchChromium, shot } from './support/browser.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const scratch = isolatedCacheDir('kiwi-e2e-layout-');
let browser: Browser | undefined;
const pageErrors: string[] = [];

afterAll(async () => {
  await browser?.close();
  procs.dispose();
});

const NAMES = ['alice', 'bob', 'carol-workstation', 'dave', 'erin', 'frank-laptop', 'grace', 'heidi'];

describe('the ring view lays out its labels without overlaps (real host and members)', () => {
  let host: Proc;
  let code = '';
  let rendezvous = '';
  let model = '';
  let api = { url: '', token: '' };
  let page: Page;
  const members: Proc[] = [];

  beforeAll(async () => {
    model = join(scratch(), 'tiny16.gguf');
    const shape = { name: 'tiny16', architecture: 'llama', blockCount: 16, embeddingLength: 64, headCount: 4, headCountKv: 2, feedForwardLength: 128, vocabSize: 320, contextLength: 256 };
    await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'q8_0', '--out', model, '--json'], { cwd: repoRoot });
    host = procs.kiwi('host', '--model', model, '--port', '0', '--auto-approve', '--expect', '2', '--settle-ms', '500', '--context', '256', '--ui-port', '0', '--json');
    const session = await waitEvent(host, (e) => e.event === 'session', 'the session code', 30_000);
    code = session.code as string;
    rendezvous = session.rendezvous as string;
    const control = await waitEvent(host, (e) => e.event === 'control', 'the control API', 30_000);
    // The token as `kiwi status` reads it: from the host's 0600 file.
    api = { url: control.api_url as string, token: (JSON.parse(await readFile(control.token_file as string, 'utf8')) as { token: string }).token };
    const ui = await waitEvent(host, (e) => e.event === 'ui', 'the UI address', 30_000);
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    page = await context.newPage();
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(ui.url as string);
    await page.getByRole('tab', { name: 'Ring' }).click();
  });

  async function status(): Promise<SessionStatus> {
    const res = await fetch(`${api.url}/status`, { headers: { authorization: `Bearer ${api.token}` } });
    return SessionStatus.parse(await res.json());
  }

  /** Every member in the ring, every stage ready, every link measured. */
  async function settled(count: number, timeoutMs: number): Promise<SessionStatus> {
    const started = Date.now();
    for (;;) {
      const s = await status();
      const stages = s.plan?.stages ?? [];
      const ok = s.ring.length === count + 1 && stages.length === count + 1 && stages.every((st) => st.state === 'ready' || st.state === 'kept')
        && s.ring_state?.phase === 'serving' && s.links.filter((l) => l.state === 'up' && l.rtt_ms !== null).length >= count + 1;
      if (ok) return s;
      if (Date.now() - started > timeoutMs) throw new Error(`the ring of ${count} members did not settle: ${JSON.stringify(s)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /**
   * Each link also says what it became (direct UDP, direct TCP, relayed) next to what the planner
   * predicted from the members' NATs: in the host's status (plan.edges) and on the page (the link's
   * tooltip and data attributes), the two the same.
   */
  async function expectEdgeKinds(count: number): Promise<void> {
    const edges = (await status()).plan?.edges ?? [];
    expect(edges).toHaveLength(count + 1);
    for (const e of edges) expect(e).toMatchObject({ actual: expect.stringMatching(/^(direct-udp|direct-tcp|relayed)$/), predicted: expect.stringMatching(/^(direct-udp|direct-tcp|relayed)$/) });
    await page.waitForFunction((n) => [...document.querySelectorAll('[data-testid^="link-"]')].filter((g) => g.getAttribute('data-actual') !== null && g.getAttribute('data-predicted') !== null).length === n + 1, count, { timeout: 30_000 });
    const shown = await page.evaluate(() => [...document.querySelectorAll('[data-testid^="link-"]')].map((g) => ({
      id: g.getAttribute('data-testid'), actual: g.getAttribute('data-actual'), predicted: g.getAttribute('data-predicted'), matched: g.getAttribute('data-matched'), title: g.querySelector('title')?.textContent ?? '',
    })));
    for (const e of edges) {
      const g = shown.find((x) => x.id === `link-${Math.min(e.a, e.b)}-${Math.max(e.a, e.b)}`);
      expect(g).toMatchObject({ actual: e.actual, predicted: e.predicted, matched: String(e.matched) });
      expect(g?.title).toMatch(/^(direct UDP|direct TCP|relayed) · [\d.]+ ms \(predicted/);
    }
    // Members on loopback: the planner's table predicts what each link became.
    expect(edges.filter((e) => e.matched !== true)).toEqual([]);
  }

  /**
   * Each member's NAT class reaches the host (its status's members) and the page (the node's
   * tooltip and data attributes). On loopback the embedded rendezvous's STUN sees an
   * endpoint-independent mapping, and no router maps a port; the host's own node shows `none`.
   */
  async function expectNatClasses(count: number): Promise<void> {
    let s = await status();
    for (const started = Date.now(); s.members.filter((m) => m.nat != null).length < count; s = await status()) {
      if (Date.now() - started > 30_000) throw new Error(`not every member reported its NAT: ${JSON.stringify(s.members)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    for (const m of s.members) expect(m.nat).toMatchObject({ mapping: 'endpoint-independent', port_mapping: null });
    // The host's own: no NAT between it and its embedded rendezvous.
    expect(s.host_nat).toEqual({ mapping: 'endpoint-independent', filtering: 'lenient', port_mapping: null, none: true });
    // Every member's node and the host's.
    await page.waitForFunction((n) => document.querySelectorAll('[data-testid^="node-"][data-nat-mapping]').length === n, count + 1, { timeout: 30_000 });
    const shown = await page.evaluate(() => [...document.querySelectorAll('[data-testid^="node-"][data-nat-mapping]')].map((g) => ({
      mapping: g.getAttribute('data-nat-mapping'), port: g.getAttribute('data-port-mapping'), title: g.querySelector(':scope > title')?.textContent ?? '',
    })));
    for (const g of shown) {
      expect(g).toMatchObject({ mapping: 'endpoint-independent', port: 'none' });
      expect(g.title).toMatch(/ · NAT: (none \(the rendezvous saw its own address\), )?endpoint-independent mapping, (filtering unknown|lenient filtering|port-dependent filtering) · port not mapped$/);
    }
  }

  for (const count of [2, 3, 5, 8]) {
    it(`shows a ring of ${count} members with no label over another or over a node`, async () => {
      while (members.length < count) {
        const name = NAMES[members.length] as string;
        members.push(procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', name, '--model', model, '--heartbeat-ms', '1000', '--json'));
      }
      await settled(count, 240_000);
      // The page shows the same ring: every node, its layers and every link's measured time.
      await page.waitForFunction((n) => {
        const svg = document.querySelector('[data-testid="topology"]');
        if (!(svg?.getAttribute('aria-label') ?? '').startsWith(`Ring of ${n + 1}:`)) return false;
        const links = [...svg!.querySelectorAll('[data-testid^="link-"] text')].map((t) => t.textContent ?? '');
        const layers = [...svg!.querySelectorAll('.node-detail')].map((t) => t.textContent ?? '').filter((t) => /^layers? \d+/.test(t));
        return links.length === n + 1 && links.every((l) => /^(direct|relayed) · [\d.]+ ms$/.test(l)) && layers.length === n + 1;
      }, count, { timeout: 30_000 });
      await expectEdgeKinds(count);
      await expectNatClasses(count);
      // Let the layout settle on the page's fonts before measuring.
      await page.evaluate(() => document.fonts.ready.then(() => undefined));
      await shot(page, `ring-layout-${count}-members`);
      const report = await page.evaluate(() => {
        const svg = document.querySelector('[data-testid="topology"]') as SVGSVGElement;
        type R = { name: string; x0: number; y0: number; x1: number; y1: number };
        const rect = (el: Element, name: string): R => {
          const b = el.getBoundingClientRect();
          return { name, x0: b.left, y0: b.top, x1: b.right, y1: b.bottom };
        };
        // The node's initial sits inside its own node by design; every other text is a label.
        const texts = [...svg.querySelectorAll('text:not(.node-initial)')].map((t) => rect(t, t.textContent ?? ''));
        const nodes = [...svg.querySelectorAll('.node circle')].map((c) => rect(c, `node ${c.closest('[data-testid]')?.getAttribute('data-testid') ?? ''}`));
        const hit = (a: R, b: R): boolean => a.x0 < b.x1 - 0.5 && b.x0 < a.x1 - 0.5 && a.y0 < b.y1 - 0.5 && b.y0 < a.y1 - 0.5;
        const clashes: string[] = [];
        for (let i = 0; i < texts.length; i++) {
          for (let j = i + 1; j < texts.length; j++) if (hit(texts[i] as R, texts[j] as R)) clashes.push(`"${texts[i]?.name}" over "${texts[j]?.name}"`);
          for (const n of nodes) if (hit(texts[i] as R, n)) clashes.push(`"${texts[i]?.name}" over ${n.name}`);
        }
        // Everything inside the picture.
        const box = svg.getBoundingClientRect();
        const outside = [...texts, ...nodes].filter((r) => r.x0 < box.left - 0.5 || r.x1 > box.right + 0.5 || r.y0 < box.top - 0.5 || r.y1 > box.bottom + 0.5).map((r) => r.name);
        // Readable: the picture is not shrunk until its labels are tiny.
        const minTextPx = Math.min(...texts.map((t) => t.y1 - t.y0));
        return { texts: texts.length, nodes: nodes.length, clashes, outside, labels: texts.map((t) => t.name), minTextPx };
      });
      expect(report.nodes).toBe(count + 1);
      // A name, its layers and its stage time per node (3 lines), one label per link.
      expect(report.texts).toBeGreaterThanOrEqual(2 * (count + 1) + (count + 1));
      expect(report.clashes).toEqual([]);
      expect(report.outside).toEqual([]);
      expect(report.minTextPx).toBeGreaterThanOrEqual(10);
      // Layers are counted from 1 and cover 1–16 once.
      const ranges = report.labels.map((t) => /^layers? (\d+)(?:–(\d+))?/.exec(t)).filter((m) => m !== null).map((m) => [Number(m[1]), Number(m[2] ?? m[1])] as const).sort((a, b) => a[0] - b[0]);
      expect(ranges[0]?.[0]).toBe(1);
      for (let i = 1; i < ranges.length; i++) expect(ranges[i]?.[0]).toBe((ranges[i - 1]?.[1] ?? 0) + 1);
      expect(ranges.at(-1)?.[1]).toBe(16);
    }, 300_000);
  }

  it('raised no errors in the page', () => {
    expect(pageErrors).toEqual([]);
  });
});
