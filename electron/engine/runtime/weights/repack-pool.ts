// Converts GGUF matrices (convert.ts toLinear) on worker threads, several at once, so a shard
// build repacks a layer's matrices in parallel while the main thread reads, builds the graph and
// writes. The bytes cross without copies (transferred both ways). Output is the same bytes as
// toLinear on the main thread: the workers run that code (repack-pool.test.ts compares them).
// A worker that cannot start or dies: the jobs it held fail (their bytes were handed to it) and
// `failed` says so; later conversions run on the main thread.
import os from 'node:os';
import type { Worker } from 'node:worker_threads';
import { startModuleWorker } from '../../module-worker.js';
import { KiwiError } from '../../errors.js';
import type { KiwiErrorCode } from '../../errors.js';
import type { LinearWeight } from '../stage-graph.js';
import { toLinear } from './convert.js';
import type { TensorForm, WeightLayout } from './convert.js';

export interface RepackJob {
  id: number;
  form: TensorForm;
  bytes: Uint8Array;
  n: number;
  k: number;
  layout: WeightLayout;
}

export type RepackAnswer = { id: number; weight: LinearWeight } | { id: number; error: { code: string | undefined; message: string; details: unknown } };

interface Pending {
  job: RepackJob;
  resolve: (w: LinearWeight) => void;
  reject: (err: unknown) => void;
}

/** Worker threads a build uses by default: the cores but one (the main thread's), 1 to 4. */
export function defaultRepackWorkers(): number {
  return Math.max(1, Math.min(4, os.availableParallelism() - 1));
}

export class RepackPool {
  private readonly workers: Array<{ worker: Worker; busy: number }> = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private broken = false;
  /** A worker stopped while converting: the conversions it held failed (the caller builds again without the pool). */
  failed = false;

  constructor(private readonly size = defaultRepackWorkers()) {}

  /** toLinear(form, bytes, n, k, layout) on a worker; `bytes` is handed over (do not use it afterwards). */
  convert(form: TensorForm, bytes: Uint8Array, n: number, k: number, layout: WeightLayout = 'exact'): Promise<LinearWeight> {
    if (this.broken) return Promise.resolve().then(() => toLinear(form, bytes, n, k, layout));
    // Only a buffer of its own can be transferred (small Buffers share Node's pool).
    const own = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : bytes.slice();
    const job: RepackJob = { id: this.nextId++, form: { name: form.name, type: form.type, dims: [...form.dims] }, bytes: own, n, k, layout };
    return new Promise<LinearWeight>((resolve, reject) => {
      this.pending.set(job.id, { job, resolve, reject });
      const slot = this.pick();
      slot.busy++;
      slot.worker.postMessage(job, [own.buffer as ArrayBuffer]);
    });
  }

  async close(): Promise<void> {
    this.broken = true;
    const ws = this.workers.splice(0);
    await Promise.all(ws.map((w) => w.worker.terminate()));
  }

  /** The least busy worker, starting one while fewer than `size` run. */
  private pick(): { worker: Worker; busy: number } {
    const idle = this.workers.find((w) => w.busy === 0);
    if (idle !== undefined) return idle;
    if (this.workers.length < this.size) return this.start();
    return this.workers.reduce((a, b) => (b.busy < a.busy ? b : a));
  }

  private start(): { worker: Worker; busy: number } {
    const worker = startModuleWorker(import.meta.url, 'repack-worker');
    worker.unref();
    const slot = { worker, busy: 0 };
    worker.on('message', (answer: RepackAnswer) => {
      const p = this.pending.get(answer.id);
      slot.busy--;
      if (p === undefined) return;
      this.pending.delete(answer.id);
      if ('weight' in answer) p.resolve(answer.weight);
      else p.reject(answer.error.code !== undefined ? new KiwiError(answer.error.code as KiwiErrorCode, answer.error.message, answer.error.details as Record<string, unknown>) : new Error(answer.error.message));
    });
    const fail = (): void => {
      // A worker is gone (or never started): what it held was transferred to it, so the jobs
      // cannot be redone here; they fail, and later conversions run on the main thread.
      if (this.broken) return;
      this.broken = true;
      this.failed = true;
      const err = new Error('a weight conversion worker stopped');
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      void this.close();
    };
    worker.on('error', fail);
    worker.on('exit', fail);
    this.workers.push(slot);
    return slot;
  }
}
