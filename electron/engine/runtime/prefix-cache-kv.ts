// What one stage keeps of the prompt cache (prefix-cache.ts has the index): per entry, a compact
// copy of the first positions of a finished request's KV cache, and fresh request caches seeded
// from a copy of an entry's first positions. Every place that holds stages keeps one: the local
// chain (one cache per stage per entry), the ring's host (its first stage and head) and each ring
// member. Copies are exact (positions are moved, never recomputed).
import type { KvCache } from './stage.js';

/** Buffers of a seeded cache are allocated in multiples of this (as Stage's own growth). */
const GROWTH_POSITIONS = 256;

export class PrefixKvStore {
  private readonly entries = new Map<number, KvCache[]>();

  constructor(
    /** KV heads of the model (the caches are [kvHeads, allocated, headDim] per layer). */
    private readonly kvHeads: number,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /** Keeps positions [0, length) of `caches` (one per stage held here) as entry `entry`. */
  keep(entry: number, caches: readonly KvCache[], length: number): void {
    if (caches.some((c) => c.length < length)) throw new Error(`prefix entry ${entry}: a cache holds fewer than ${length} positions`);
    this.entries.set(entry, caches.map((c) => copyPrefix(c, length, length, this.kvHeads)));
  }

  has(entry: number): boolean {
    return this.entries.has(entry);
  }

  /** New caches of `capacity` positions holding the first `length` positions of `entry`; undefined when it is not held. */
  seed(entry: number, length: number, capacity: number): KvCache[] | undefined {
    const held = this.entries.get(entry);
    if (held === undefined || held.some((c) => c.length < length)) return undefined;
    return held.map((c) => copyPrefix(c, length, capacity, this.kvHeads));
  }

  drop(entries: readonly number[]): void {
    for (const e of entries) this.entries.delete(e);
  }

  clear(): void {
    this.entries.clear();
  }
}

/** A cache of `capacity` positions holding positions [0, length) of `src`. */
export function copyPrefix(src: KvCache, length: number, capacity: number, kvHeads: number): KvCache {
  if (length > src.length || length > capacity) throw new Error(`copyPrefix: ${length} positions of a cache holding ${src.length}, into ${capacity}`);
  const headDim = (src.keys[0]?.length ?? 0) / (kvHeads * src.allocated);
  const allocated = Math.min(capacity, Math.max(GROWTH_POSITIONS, Math.ceil(length / GROWTH_POSITIONS) * GROWTH_POSITIONS));
  const move = (old: Float32Array): Float32Array => {
    const out = new Float32Array(kvHeads * allocated * headDim);
    for (let h = 0; h < kvHeads; h++) {
      const from = h * src.allocated * headDim;
      out.set(old.subarray(from, from + length * headDim), h * allocated * headDim);
    }
    return out;
  };
  return { length, capacity, allocated, keys: src.keys.map(move), values: src.values.map(move) };
}
