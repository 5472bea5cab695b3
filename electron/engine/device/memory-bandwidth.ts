// Host memory bandwidth measured with every core: the native read loop (native/src/membw.c)
// where the addon is built, else a JS fallback of Buffer copies on worker threads, reported as
// such because it reads lower than the hardware can (the copy's writes compete with its reads).
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { KiwiError } from '../errors.js';
import { loadMembwAddon, type MembwAddon } from './native-addon.js';
import { median } from '../median.js';

export type BandwidthMethod = 'native-read' | 'js-copy';

export interface BandwidthOptions {
  /** 'auto' (default): native when built, else JS. */
  method?: 'auto' | 'native' | 'js';
  threads?: number;
  bytesPerThread?: number;
  /** Timed rounds; the median is reported. */
  rounds?: number;
  passesPerRound?: number;
  /** Called after each round with that round's figure. */
  onProgress?: (done: number, total: number, gbps: number) => void;
  signal?: AbortSignal;
  /** Injected for tests; default: the built addon. */
  addon?: MembwAddon | null;
}

export interface BandwidthResult {
  /** Median over rounds, in GB/s (1e9 bytes per second). */
  gbps: number;
  method: BandwidthMethod;
  /** Why the native probe was not used (null when it was). */
  fallbackReason: string | null;
  threads: number;
  bytesPerThread: number;
  rounds: number;
  samplesGBps: number[];
}

const MIB = 1024 * 1024;
/** Far beyond any last-level cache, so the loop reads DRAM. */
const DEFAULT_BYTES_PER_THREAD = 128 * MIB;
const MIN_BYTES_PER_THREAD = 32 * MIB;

export function defaultBandwidthShape(threads = os.availableParallelism(), freeBytes = os.freemem()): { threads: number; bytesPerThread: number } {
  // Use at most a quarter of free memory (and 4 GiB) for the buffers, never under 32 MiB a thread.
  const budget = Math.min(freeBytes / 4, 4096 * MIB);
  const perThread = Math.max(MIN_BYTES_PER_THREAD, Math.min(DEFAULT_BYTES_PER_THREAD, Math.floor(budget / threads / MIB) * MIB));
  return { threads, bytesPerThread: perThread };
}

export async function measureHostBandwidth(options: BandwidthOptions = {}): Promise<BandwidthResult> {
  const shape = defaultBandwidthShape();
  const threads = options.threads ?? shape.threads;
  const bytesPerThread = options.bytesPerThread ?? shape.bytesPerThread;
  const rounds = options.rounds ?? 5;
  const passes = options.passesPerRound ?? 2;
  const method = options.method ?? 'auto';

  let addon: MembwAddon | null = null;
  let fallbackReason: string | null = null;
  if (method !== 'js') {
    if (options.addon !== undefined) {
      addon = options.addon;
      if (addon === null) fallbackReason = 'the native probe was not provided';
    } else {
      const load = loadMembwAddon();
      if (load.ok) addon = load.addon;
      else fallbackReason = load.reason;
    }
    if (addon === null && method === 'native') {
      throw new KiwiError('BENCH_FAILED', `the native bandwidth probe is not available: ${fallbackReason ?? 'unknown reason'}. Build it with 'node-gyp rebuild --directory native'.`);
    }
  } else {
    fallbackReason = 'JS measurement requested';
  }

  const samples: number[] = [];
  for (let r = 0; r < rounds; r++) {
    options.signal?.throwIfAborted();
    const gbps = addon !== null ? await nativeRound(addon, bytesPerThread, threads, passes) : await jsCopyRound(bytesPerThread, threads, passes, options.signal);
    samples.push(gbps);
    options.onProgress?.(r + 1, rounds, gbps);
  }
  return {
    gbps: median(samples),
    method: addon !== null ? 'native-read' : 'js-copy',
    fallbackReason: addon !== null ? null : fallbackReason,
    threads,
    bytesPerThread,
    rounds,
    samplesGBps: samples,
  };
}

async function nativeRound(addon: MembwAddon, bytesPerThread: number, threads: number, passes: number): Promise<number> {
  const r = await addon.measureRead(bytesPerThread, threads, passes);
  return r.bytes / r.seconds / 1e9;
}

// Each worker: allocate and touch its buffers, check in, wait for the start signal, copy, report
// the wall-clock end. CommonJS because eval'd workers are.
const COPY_WORKER = `
const { workerData, parentPort } = require('node:worker_threads');
const { bytes, passes, flags } = workerData;
const f = new Int32Array(flags);
const src = Buffer.alloc(bytes, 1);
const dst = Buffer.alloc(bytes, 2);
Atomics.add(f, 0, 1);
Atomics.notify(f, 0);
Atomics.wait(f, 1, 0);
for (let p = 0; p < passes; p++) src.copy(dst);
parentPort.postMessage(performance.timeOrigin + performance.now());
`;

/**
 * Read bandwidth during Buffer copies on `threads` workers: bytes read per second. The writes of
 * the copy compete for the same memory, so this understates pure reads (conservative for a
 * planner input), which is why the native read loop is preferred.
 */
async function jsCopyRound(bytesPerThread: number, threads: number, passes: number, signal?: AbortSignal): Promise<number> {
  // Copies read and write, so each worker holds two buffers: half the bytes each.
  const bytes = Math.floor(bytesPerThread / 2 / 64) * 64;
  const flags = new SharedArrayBuffer(8);
  const f = new Int32Array(flags);
  const workers = Array.from({ length: threads }, () => new Worker(COPY_WORKER, { eval: true, workerData: { bytes, passes, flags } }));
  let failure: Error | null = null;
  try {
    const ends = workers.map(
      (w) =>
        new Promise<number>((resolve, reject) => {
          const fail = (err: Error): void => {
            failure ??= err;
            reject(err);
          };
          w.once('message', (t: number) => resolve(t));
          w.once('error', fail);
          w.once('exit', (code) => fail(new Error(`bandwidth worker exited with code ${code} before reporting`)));
        }),
    );
    // The caller sees the first failure through the awaited promises; keep others from going unhandled.
    for (const e of ends) e.catch(() => undefined);
    // Wait for every worker to be ready without blocking the event loop.
    while (Atomics.load(f, 0) < threads) {
      signal?.throwIfAborted();
      if (failure !== null) throw failure;
      await new Promise((r) => setTimeout(r, 2));
    }
    const start = performance.timeOrigin + performance.now();
    Atomics.store(f, 1, 1);
    Atomics.notify(f, 1);
    const end = Math.max(...(await Promise.all(ends)));
    return (bytes * passes * threads) / ((end - start) / 1000) / 1e9;
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}
