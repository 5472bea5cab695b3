// Tokenizing long prompts on a worker thread, so that an API request with a large prompt does not
// stall every other request and stream (tokenizing costs about 10-20 us per byte here). The worker
// holds its own copy of the same tokenizer (built from the same GGUF metadata), so the ids are
// exactly those of encode() on the main thread; short texts are encoded inline, where a message
// round trip would cost more than it saves. If the worker cannot start (a packaging without the
// worker file), encoding falls back to the main thread.
import type { Worker } from 'node:worker_threads';
import { startModuleWorker } from '../../module-worker.js';
import { KiwiError, type KiwiErrorCode } from '../../errors.js';
import type { GgufMetadata } from '../gguf/gguf-metadata.js';
import type { EncodeOptions, Tokenizer } from './tokenizer.js';
import type { EncodeAnswer, EncodeJob } from './tokenizer-worker.js';

/** Texts shorter than this (UTF-16 code units) are encoded inline. */
export const OFF_THREAD_MIN_CHARS = 16 * 1024;

interface Pending {
  job: EncodeJob;
  resolve: (ids: number[]) => void;
  reject: (err: unknown) => void;
}

export class OffThreadEncoder {
  private worker: Worker | undefined;
  private broken = false;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly metadata: GgufMetadata,
    private readonly minChars = OFF_THREAD_MIN_CHARS,
  ) {}

  /** encode(text, options) of the tokenizer; off the event loop for long texts. */
  encode(text: string, options: EncodeOptions = {}): Promise<number[]> {
    if (text.length < this.minChars || this.broken) return Promise.resolve().then(() => this.tokenizer.encode(text, options));
    const job: EncodeJob = { id: this.nextId++, text, options };
    return new Promise<number[]>((resolve, reject) => {
      this.pending.set(job.id, { job, resolve, reject });
      this.start().postMessage(job);
    });
  }

  /** Whether a worker thread is running now. */
  get running(): boolean {
    return this.worker !== undefined;
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.broken = true;
    for (const p of this.pending.values()) p.reject(new KiwiError('API_SHUTTING_DOWN', 'the tokenizer was closed'));
    this.pending.clear();
    await w?.terminate();
  }

  private start(): Worker {
    if (this.worker !== undefined) return this.worker;
    const worker = startModuleWorker(import.meta.url, 'tokenizer-worker', { workerData: { metadata: this.metadata } });
    // An idle worker does not keep the process alive.
    worker.unref();
    worker.on('message', (answer: EncodeAnswer) => {
      const p = this.pending.get(answer.id);
      if (p === undefined) return;
      this.pending.delete(answer.id);
      if ('ids' in answer) p.resolve(Array.from(answer.ids));
      else p.reject(answer.error.code !== undefined ? new KiwiError(answer.error.code as KiwiErrorCode, answer.error.message, answer.error.details as Record<string, unknown>) : new Error(answer.error.message));
    });
    const fail = (): void => {
      // The worker is gone: finish what it held on this thread, and stay on this thread.
      if (this.worker === worker) this.worker = undefined;
      this.broken = true;
      for (const p of this.pending.values()) {
        try {
          p.resolve(this.tokenizer.encode(p.job.text, p.job.options));
        } catch (err) {
          p.reject(err);
        }
      }
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', fail);
    this.worker = worker;
    return worker;
  }
}
