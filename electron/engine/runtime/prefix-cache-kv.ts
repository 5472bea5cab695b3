// What one stage keeps of the prompt cache (prefix-cache.ts has the index): per entry, a compact
// copy of the first positions of a finished request's KV cache, and fresh request caches seeded
// from a copy of an entry's first positions. Every place that holds stages keeps one: the local
// chain (one cache per stage per entry), the ring's host (its first stage and head) and each ring
// member. Copies are exact (positions are moved, never recomputed), made where the buffers live
// (kv-store.ts copyPrefix).
import { copyPrefix, freeCache } from './kv-store.js';
import type { KvCache } from './kv-store.js';

export class PrefixKvStore {
  private readonly entries = new Map<number, KvCache[]>();

  get size(): number {
    return this.entries.size;
  }

  /** Keeps positions [0, length) of `caches` (one per stage held here) as entry `entry`. */
  keep(entry: number, caches: readonly KvCache[], length: number): void {
    if (caches.some((c) => c.length < length)) throw new Error(`prefix entry ${entry}: a cache holds fewer than ${length} positions`);
    this.drop([entry]);
    this.entries.set(entry, caches.map((c) => copyPrefix(c, length, length)));
  }

  has(entry: number): boolean {
    return this.entries.has(entry);
  }

  /** New caches of `capacity` positions holding the first `length` positions of `entry`; undefined when it is not held. */
  seed(entry: number, length: number, capacity: number): KvCache[] | undefined {
    const held = this.entries.get(entry);
    if (held === undefined || held.some((c) => c.length < length)) return undefined;
    return held.map((c) => copyPrefix(c, length, capacity));
  }

  drop(entries: readonly number[]): void {
    for (const e of entries) {
      for (const c of this.entries.get(e) ?? []) freeCache(c);
      this.entries.delete(e);
    }
  }

  clear(): void {
    this.drop([...this.entries.keys()]);
  }
}
