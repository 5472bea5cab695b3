// A StageSession whose onnxruntime session lives on a worker thread (ort-worker.ts), so a forward
// pass (tens of ms per decode step, seconds per prefill) never blocks the event loop that carries
// heartbeats, ring links and HTTP streams. The session's K/V caches live on the worker (its KvHost:
// kv-buffers.ts there, handles in kv-store.ts here); a worker that dies fails its pending runs
// instead of hanging them; an idle worker does not keep the process alive. Threads come from
// ort-worker-pool.ts.
import type { Worker } from 'node:worker_threads';
import { KiwiError } from '../errors.js';
import type { OrtFeeds, OrtTensor, SessionFactoryOptions, StageSession } from '../ort/session.js';
import { closeWorker, parkWorker, takeWorker } from './ort-worker-pool.js';
import { errorFromWire, fromWire, toWire, transferables } from './ort-worker-protocol.js';
import type { FromWorker, ToWorker, WireTensor } from './ort-worker-protocol.js';
import type { KvLayout, KvRun } from './kv-buffers.js';
import type { KvHost } from './kv-store.js';

/** Whether stages run their session on a worker thread: yes unless KIWI_STAGE_WORKER=0. */
export function stageWorkerEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.KIWI_STAGE_WORKER !== '0';
}

export interface WorkerStageSession extends StageSession {
  readonly skipped: string[];
  /** The request caches kept on the worker (a session created with a KV layout). */
  readonly kv: KvHost;
  /** The thread (for diagnostics and tests). */
  readonly worker: Worker;
}

interface Pending {
  resolve: (outputs: Record<string, OrtTensor>) => void;
  reject: (err: KiwiError) => void;
}

/** A started worker thread without a session yet. */
export interface SessionWorker {
  /**
   * Creates the session on the worker (same options and provider fallback as createStageSession).
   * Model bytes are moved to the worker: the caller's array is detached. On failure the worker ends.
   * `kv`: the layout of the request caches the worker keeps for the session's runs.
   */
  create(model: string | Uint8Array, opts?: SessionFactoryOptions, kv?: KvLayout): Promise<WorkerStageSession>;
  /** Gives the thread back (for a caller that no longer needs it before create). */
  dispose(): Promise<void>;
}

/**
 * Starts a worker thread now: it loads onnxruntime while the caller builds the model, so the
 * thread's start costs no time in Stage.open.
 */
export function startSessionWorker(): SessionWorker {
  const client = new WorkerClient(takeWorker());
  return {
    create: async (model, opts = {}, kv) => {
      try {
        return await client.create(model, opts, kv);
      } catch (err) {
        await client.dispose();
        throw err;
      }
    },
    dispose: () => client.dispose(),
  };
}

/** Starts a worker and creates the session there: startSessionWorker().create(model, opts). */
export function createWorkerStageSession(model: string | Uint8Array, opts: SessionFactoryOptions = {}): Promise<WorkerStageSession> {
  return startSessionWorker().create(model, opts);
}

class WorkerClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly reads = new Map<number, { resolve: (kv: { keys: Float32Array[]; values: Float32Array[] }) => void; reject: (err: KiwiError) => void }>();
  private created: { resolve: (m: Extract<FromWorker, { type: 'created' }>) => void; reject: (err: KiwiError) => void } | undefined;
  /** Called with true when the worker released the session, false when it ended instead. */
  private onDisposed: ((released: boolean) => void) | undefined;
  /** Set once the worker cannot run anything more; every later run fails with it. */
  private dead: KiwiError | undefined;
  private disposing: Promise<void> | undefined;

  private readonly onMessage = (m: FromWorker): void => this.receive(m);
  private readonly onError = (err: Error): void => this.die(new KiwiError('RUNTIME_WORKER_FAILED', `the stage's worker thread failed: ${err.message}`));
  private readonly onExit = (code: number): void => {
    this.onDisposed?.(false);
    this.die(
      this.disposing !== undefined
        ? closed()
        : new KiwiError('RUNTIME_WORKER_FAILED', `the stage's worker thread exited (code ${code})`, { exitCode: code }),
    );
  };

  constructor(readonly worker: Worker) {
    worker.on('message', this.onMessage);
    worker.on('error', this.onError);
    worker.on('exit', this.onExit);
    worker.unref();
  }

  create(model: string | Uint8Array, opts: SessionFactoryOptions, kv: KvLayout | undefined): Promise<WorkerStageSession> {
    return new Promise<Extract<FromWorker, { type: 'created' }>>((resolve, reject) => {
      this.created = { resolve, reject };
      this.busy();
      this.post({ type: 'create', model, opts, kv }, typeof model === 'string' ? [] : [model]);
    }).then((c) => ({
      provider: c.provider,
      skipped: c.skipped,
      inputNames: c.inputNames,
      outputNames: c.outputNames,
      worker: this.worker,
      run: (feeds: OrtFeeds, fetches?: readonly string[]) => this.run(feeds, fetches, undefined),
      kv: {
        // Cache operations are not answered: the worker does them in order with the runs.
        create: (id, allocated) => this.postIfAlive({ type: 'kv-create', id, allocated }),
        copy: (from, to, length, allocated) => this.postIfAlive({ type: 'kv-copy', from, to, length, allocated }),
        free: (id) => this.postIfAlive({ type: 'kv-free', id }),
        read: (cache, length) => this.read(cache, length),
        run: (feeds, fetches, run) => this.run(feeds, fetches, run),
      },
      dispose: () => this.dispose(),
    }));
  }

  /** A cache operation for a live worker (one that died or is closing dropped its caches already). */
  private postIfAlive(m: ToWorker): void {
    if (this.dead === undefined && this.disposing === undefined) this.worker.postMessage(m);
  }

  private read(cache: number, length: number): Promise<{ keys: Float32Array[]; values: Float32Array[] }> {
    if (this.dead !== undefined) return Promise.reject(this.dead);
    if (this.disposing !== undefined) return Promise.reject(closed());
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.reads.set(id, { resolve, reject });
      this.busy();
      this.worker.postMessage({ type: 'kv-read', id, cache, length } satisfies ToWorker);
    });
  }

  private run(feeds: OrtFeeds, fetches: readonly string[] | undefined, kv: KvRun | undefined): Promise<Record<string, OrtTensor>> {
    if (this.dead !== undefined) return Promise.reject(this.dead);
    if (this.disposing !== undefined) return Promise.reject(closed());
    // Feeds are copied and the copies move, so the caller's own arrays (hidden states it may still hold) stay intact.
    const wireFeeds: Record<string, WireTensor> = {};
    for (const [name, t] of Object.entries(feeds)) {
      const w = toWire(t, name);
      wireFeeds[name] = { data: w.data.slice(), dims: w.dims };
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.busy();
      this.post({ type: 'run', id, feeds: wireFeeds, fetches: fetches === undefined ? undefined : [...fetches], kv }, Object.values(wireFeeds).map((w) => w.data));
    });
  }

  private post(m: ToWorker, arrays: ArrayBufferView[]): void {
    const transfer = transferables(arrays);
    try {
      this.worker.postMessage(m, transfer);
    } catch (err) {
      // A buffer that cannot move (marked untransferable) is copied instead.
      if ((err as Error).name !== 'DataCloneError' || transfer.length === 0) throw err;
      this.worker.postMessage(m);
    }
  }

  private receive(m: FromWorker): void {
    switch (m.type) {
      case 'created':
        this.created?.resolve(m);
        this.created = undefined;
        break;
      case 'create-failed':
        this.created?.reject(errorFromWire(m.error, 'RUNTIME_SESSION_FAILED', 'onnxruntime could not create the session'));
        this.created = undefined;
        break;
      case 'ran':
      case 'run-failed': {
        const p = this.pending.get(m.id);
        if (p === undefined) break;
        this.pending.delete(m.id);
        if (m.type === 'ran') {
          const outputs: Record<string, OrtTensor> = {};
          for (const [name, w] of Object.entries(m.outputs)) outputs[name] = fromWire(w);
          p.resolve(outputs);
        } else {
          p.reject(errorFromWire(m.error, 'RUNTIME_RUN_FAILED', 'onnxruntime failed to run the stage'));
        }
        break;
      }
      case 'kv-read':
      case 'kv-read-failed': {
        const r = this.reads.get(m.id);
        this.reads.delete(m.id);
        if (m.type === 'kv-read') r?.resolve({ keys: m.keys, values: m.values });
        else r?.reject(errorFromWire(m.error, 'RUNTIME_RUN_FAILED', 'a KV cache could not be read'));
        break;
      }
      case 'disposed':
        this.onDisposed?.(true);
        break;
    }
    this.idleCheck();
  }

  /** A pending request keeps the process alive; an idle worker does not (like an in-thread session). */
  private busy(): void {
    this.worker.ref();
  }

  private idleCheck(): void {
    if (this.pending.size === 0 && this.reads.size === 0 && this.created === undefined) this.worker.unref();
  }

  private die(err: KiwiError): void {
    this.dead ??= err;
    this.created?.reject(this.dead);
    this.created = undefined;
    for (const p of this.pending.values()) p.reject(this.dead);
    this.pending.clear();
    for (const r of this.reads.values()) r.reject(this.dead);
    this.reads.clear();
    this.idleCheck();
  }

  /** Releases the session after the runs already sent, then hands the thread to the pool or
   * closes it; idempotent. */
  dispose(): Promise<void> {
    this.disposing ??= (async () => {
      let released = false;
      if (this.dead === undefined) {
        // No time limit: the runs sent before may hold the thread for a long prefill, and ending a
        // thread inside a native call would abort the process (ort-worker-gate.ts).
        const answered = new Promise<boolean>((resolve) => {
          this.onDisposed = resolve;
        });
        this.worker.ref();
        this.worker.postMessage({ type: 'dispose' } satisfies ToWorker);
        released = await answered;
      }
      this.worker.off('message', this.onMessage);
      this.worker.off('error', this.onError);
      this.worker.off('exit', this.onExit);
      this.die(closed());
      if (released) {
        if (!parkWorker(this.worker)) closeWorker(this.worker);
      } else {
        // It died: make sure the thread is gone.
        await this.worker.terminate();
      }
    })();
    return this.disposing;
  }
}

function closed(): KiwiError {
  return new KiwiError('RUNTIME_SESSION_CLOSED', 'the stage was disposed');
}
