// Request caches of one stage as seen by the calling thread: handles (KvCache) whose K/V buffers
// live where the stage's session runs (kv-buffers.ts; a worker thread by default). The store
// decides growth, keeps each cache's length, and sends create / copy / free and runs to its host,
// which carries them out in order. A cache is freed explicitly when its request ends; a handle
// dropped without that is freed once collected (a backstop, not the way memory is returned).
import { KvBuffers, runWithKv } from './kv-buffers.js';
import type { KvLayout, KvRun } from './kv-buffers.js';
import { KiwiError } from '../errors.js';
import type { OrtFeeds, OrtTensor, StageSession } from '../ort/session.js';

/**
 * One request's cache for one stage: `length` positions filled, buffers for `allocated`
 * (length <= allocated <= capacity) that grow in steps as positions are added, so a request holds
 * the memory of what it used.
 */
export interface KvCache {
  readonly id: number;
  length: number;
  readonly capacity: number;
  /** Positions the buffers hold (after the next run's growth, once a run was asked for more). */
  allocated: number;
  /** The store whose host holds the buffers. */
  readonly store: KvStore;
}

/** Where a store's buffers live and its runs happen: the in-thread host below, or a worker session's. */
export interface KvHost {
  create(id: number, allocated: number): void;
  copy(from: number, to: number, length: number, allocated: number): void;
  free(id: number): void;
  read(id: number, length: number): Promise<{ keys: Float32Array[]; values: Float32Array[] }>;
  run(feeds: OrtFeeds, fetches: readonly string[], kv: KvRun): Promise<Record<string, OrtTensor>>;
}

/** The host of an in-thread session: the buffers live here (`buffers`, for tests). Without a session it holds caches but cannot run. */
export function localKvHost(layout: KvLayout, session?: StageSession): KvHost & { buffers: KvBuffers } {
  const buffers = new KvBuffers(layout);
  return {
    buffers,
    read: (id, length) => Promise.resolve(buffers.read(id, length)),
    create: (id, allocated) => buffers.create(id, allocated),
    copy: (from, to, length, allocated) => buffers.copy(from, to, length, allocated),
    free: (id) => buffers.free(id),
    run: (feeds, fetches, kv) => (session !== undefined ? runWithKv(buffers, (f, o) => session.run(f, o), feeds, fetches, kv) : Promise.reject(new Error('these KV caches have no session to run'))),
  };
}

/** Buffers grow in multiples of this many positions. */
export const KV_GROWTH_POSITIONS = 256;

/** Buffers for at least `positions` (at least one step), rounded up to whole steps, at most `capacity`. */
function allocationFor(positions: number, capacity: number): number {
  return Math.min(capacity, Math.max(1, Math.ceil(positions / KV_GROWTH_POSITIONS)) * KV_GROWTH_POSITIONS);
}

/**
 * Drops a cache's positions from `length` on (speculative decoding's rejected drafts). Exact: a
 * forward pass attends to positions [0, length) only and writes new ones from `length`.
 */
export function rollbackCache(c: KvCache, length: number): void {
  if (!Number.isInteger(length) || length < 0 || length > c.length) throw new Error(`rollback of a cache of ${c.length} positions to ${length}`);
  c.length = length;
}

/** A copy of positions [0, length) of `src` in a new cache of `capacity` positions (the prompt cache's keep and seed). */
export function copyPrefix(src: KvCache, length: number, capacity: number): KvCache {
  return src.store.copy(src, length, capacity);
}

/** Frees a cache's buffers (its request ended); using it afterwards is an error. Idempotent. */
export function freeCache(c: KvCache): void {
  c.store.free(c);
}

export class KvStore {
  private nextId = 1;
  private readonly live = new Set<number>();
  /** Caches in a run now: a second run over one of them would read positions the first is adding. */
  private readonly busy = new Set<number>();
  private closed = false;
  private readonly dropped = new FinalizationRegistry<number>((id) => {
    if (this.live.delete(id) && !this.closed) this.host.free(id);
  });

  constructor(private readonly host: KvHost) {}

  /** Caches held now (not freed). */
  get size(): number {
    return this.live.size;
  }

  /** A cache for up to `capacity` positions; buffers for `allocated` of them to start with. */
  empty(capacity: number, allocated = Math.min(capacity, KV_GROWTH_POSITIONS)): KvCache {
    const c = this.handle(capacity, 0, Math.min(allocated, capacity));
    this.host.create(c.id, c.allocated);
    return c;
  }

  copy(src: KvCache, length: number, capacity: number): KvCache {
    this.check(src);
    if (length > src.length || length > capacity) throw new Error(`copyPrefix: ${length} positions of a cache holding ${src.length}, into ${capacity}`);
    const allocated = allocationFor(length, capacity);
    const c = this.handle(capacity, length, allocated);
    this.host.copy(src.id, c.id, length, allocated);
    return c;
  }

  free(c: KvCache): void {
    if (c.store !== this || !this.live.delete(c.id)) return;
    this.dropped.unregister(c);
    if (!this.closed) this.host.free(c.id);
  }

  /** Copies of `c`'s filled positions, per layer [kvHeads, length, headDim] (tests, diagnostics). */
  read(c: KvCache): Promise<{ keys: Float32Array[]; values: Float32Array[] }> {
    this.check(c);
    return this.host.read(c.id, c.length);
  }

  /** The stage is gone: its host dropped every buffer, and these handles are dead. */
  close(): void {
    this.closed = true;
    this.live.clear();
  }

  /** Whether `c` can take part in a run of this store now (for a clear error before anything is sent). */
  check(c: KvCache): void {
    if (this.closed) throw new KiwiError('RUNTIME_SESSION_CLOSED', 'the stage was disposed');
    if (c.store !== this || !this.live.has(c.id)) throw new Error('forward: a KV cache of another stage, freed, or lost with its stage');
    if (this.busy.has(c.id)) throw new Error('forward: a KV cache is in use by another forward pass');
  }

  /**
   * Runs the stage over `caches` (each adds `seq` positions): grows their buffers as needed, and
   * on success advances their lengths. `names`: the graph's K/V inputs and outputs per layer.
   * Fails before anything is sent where a cache cannot take part or has no room (CONTEXT_EXCEEDED).
   */
  async run(feeds: OrtFeeds, fetches: readonly string[], caches: readonly KvCache[], seq: number, names: KvRun['names']): Promise<Record<string, OrtTensor>> {
    for (const c of caches) {
      this.check(c);
      if (c.length + seq > c.capacity) {
        throw new KiwiError('CONTEXT_EXCEEDED', `the request needs ${c.length + seq} positions but its KV cache holds ${c.capacity}`, {
          positions: c.length + seq,
          capacity: c.capacity,
        });
      }
    }
    for (const c of caches) this.grow(c, c.length + seq);
    const rows = caches.map((c) => ({ id: c.id, length: c.length, allocated: c.allocated }));
    for (const c of caches) this.busy.add(c.id);
    try {
      const out = await this.host.run(feeds, fetches, { rows, seq, names });
      for (const c of caches) c.length += seq;
      return out;
    } finally {
      for (const c of caches) this.busy.delete(c.id);
    }
  }

  /** Sets `c.allocated` to hold at least `positions` (<= capacity); the host grows the buffers at the run. */
  private grow(c: KvCache, positions: number): void {
    if (positions <= c.allocated) return;
    // Small steps keep the buffers close to the filled length; the step widens with the cache
    // (1/8 of it) so the growth copies themselves stay a small share.
    c.allocated = allocationFor(Math.max(positions, c.allocated + Math.floor(c.allocated / 8)), c.capacity);
  }

  private handle(capacity: number, length: number, allocated: number): KvCache {
    const c: KvCache = { id: this.nextId++, length, capacity, allocated, store: this };
    this.live.add(c.id);
    this.dropped.register(c, c.id, c);
    return c;
  }
}
