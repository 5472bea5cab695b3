// The measurement both link benches share (bench/links.ts on loopback, bench/links-nat.ts across
// emulated NATs, whose two ends are separate processes): one end echoes, the other measures.
// RTT: median of echo round trips after a warm-up. Throughput: one-way burst, then an ack. The
// measuring end switches the echoing one to counting with a 5-byte message (COUNT, burst u32).
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';

export interface Endpoint {
  send(bytes: Uint8Array): void;
  onMessage(listener: (bytes: Uint8Array) => void): void;
}

const COUNT = 0xc0;

export const QUICK = process.env.KIWI_BENCH_QUICK === '1';
export const SIZES = [
  { label: '8 KiB', bytes: 8 * 1024, rttRounds: QUICK ? 50 : 300, burst: QUICK ? 512 : 4096 },
  { label: '1 MiB', bytes: 1024 * 1024, rttRounds: QUICK ? 10 : 40, burst: QUICK ? 16 : 64 },
];

/** The echoing end: echoes every message, except while counting a burst (then one ack at its end). */
export function serveEcho(e: Endpoint): void {
  let remaining = 0;
  e.onMessage((m) => {
    if (remaining > 0) {
      if (--remaining === 0) e.send(Uint8Array.of(1));
      return;
    }
    if (m.length === 5 && m[0] === COUNT) {
      remaining = new DataView(m.buffer, m.byteOffset, 5).getUint32(1);
      e.send(Uint8Array.of(2));
      return;
    }
    e.send(m);
  });
}

/** The measuring end, against serveEcho on the other: median RTT (ms) and one-way throughput (MB/s). */
export async function measure(e: Endpoint, bytes: number, rttRounds: number, burst: number): Promise<{ rttMs: number; mbps: number }> {
  const payload = randomBytes(bytes);
  let resolveNext: (() => void) | undefined;
  e.onMessage(() => resolveNext?.());
  const next = (): Promise<void> => new Promise((r) => (resolveNext = r));
  // Warm-up (JIT, socket buffers) so that the first variant measured is not penalised.
  for (let i = 0; i < Math.max(5, Math.floor(rttRounds / 3)); i++) {
    const p = next();
    e.send(payload);
    await p;
  }
  const samples: number[] = [];
  for (let i = 0; i < rttRounds; i++) {
    const p = next();
    const t0 = performance.now();
    e.send(payload);
    await p;
    samples.push(performance.now() - t0);
  }
  samples.sort((x, y) => x - y);
  const counting = next();
  const start = new Uint8Array(5);
  start[0] = COUNT;
  new DataView(start.buffer).setUint32(1, burst);
  e.send(start);
  await counting;
  const ack = next();
  const t0 = performance.now();
  for (let i = 0; i < burst; i++) e.send(payload);
  await ack;
  const seconds = (performance.now() - t0) / 1000;
  return { rttMs: samples[Math.floor(samples.length / 2)] as number, mbps: (bytes * burst) / seconds / 1e6 };
}

export interface LinkRow {
  path: string;
  encrypted: boolean | null;
  size: string;
  bytes: number;
  rtt_ms: number;
  throughput_mb_s: number;
}

/** The rows as an aligned text table. */
export function linkTable(rows: readonly LinkRow[]): string {
  const header = ['path', 'encrypted', 'message', 'RTT median (ms)', 'throughput (MB/s)'];
  const table = rows.map((r) => [r.path, r.encrypted === null ? '-' : r.encrypted ? 'yes' : 'no', r.size, r.rtt_ms.toFixed(3), r.throughput_mb_s.toFixed(1)]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => (row[i] as string).length)));
  const line = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i] as number)).join('  ').trimEnd();
  return [line(header), ...table.map(line)].join('\n');
}
