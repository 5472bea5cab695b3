// The prompt cache's index: longest reusable prefix, what is kept, its size bound, LRU eviction,
// and its blocks inside the KV pool (taken back for requests, never making one wait).
import { describe, expect, test } from 'vitest';
import { KvBlockPool } from './kv-pool.js';
import { PrefixCache } from './prefix-cache.js';
import { PrefixKvStore } from './prefix-cache-kv.js';
import { freeCache, KvStore, localKvHost } from './kv-store.js';

const seq = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

function cacheOf(blocks: number, maxBytes = Infinity): { pool: KvBlockPool; cache: PrefixCache; dropped: number[] } {
  const pool = new KvBlockPool(blocks, 16, 1);
  const dropped: number[] = [];
  return { pool, cache: new PrefixCache(pool, maxBytes, (ids) => dropped.push(...ids)), dropped };
}

describe('PrefixCache', () => {
  test('finds the longest shared prefix and always leaves two prompt tokens to prefill', () => {
    const { cache } = cacheOf(16);
    const a = cache.store(seq(0, 40))!;
    const b = cache.store([...seq(0, 10), ...seq(100, 30)])!;
    expect(cache.lookup(1, [...seq(0, 40), 7, 8, 9])).toEqual({ entry: a, length: 40 });
    expect(cache.lookup(2, [...seq(0, 10), ...seq(100, 5), 1])).toEqual({ entry: b, length: 14 });
    // The same prompt again: all but its last two tokens (a one-token prefill would round differently).
    expect(cache.lookup(3, seq(0, 40))).toEqual({ entry: a, length: 38 });
    expect(cache.lookup(4, [9, 9, 9])).toBeUndefined();
    expect(cache.lookup(5, [0, 1])).toBeUndefined();
    expect(cache.stats()).toMatchObject({ hits: 3, misses: 2, tokensReused: 92, entries: 2 });
  });

  test('a prompt that extends an entry replaces it; one that an entry holds is not stored again', () => {
    const { cache, dropped } = cacheOf(16);
    const first = cache.store(seq(0, 20))!;
    const second = cache.store(seq(0, 30))!;
    expect(dropped).toEqual([first]);
    expect(cache.store(seq(0, 25))).toBeUndefined();
    expect(cache.lookup(1, seq(0, 28))).toEqual({ entry: second, length: 26 });
    expect(cache.stats()).toMatchObject({ entries: 1, evictions: 0 });
  });

  test('holds at most its size bound, evicting the least recently used', () => {
    // 3 blocks of 16 tokens at one byte each.
    const { cache, dropped } = cacheOf(16, 48);
    const a = cache.store(seq(0, 16))!;
    const b = cache.store(seq(100, 16))!;
    expect(cache.lookup(1, [...seq(0, 16), 5, 5])?.entry).toBe(a); // a is now the most recently used
    cache.unpin(1);
    const c = cache.store(seq(200, 20))!; // two blocks: b goes
    expect(dropped).toEqual([b]);
    expect(cache.stats()).toMatchObject({ entries: 2, bytes: 48, evictions: 1 });
    expect(cache.store(seq(300, 60))).toBeUndefined(); // larger than the bound
    expect(cache.lookup(2, [...seq(200, 20), 1, 1])?.entry).toBe(c);
  });

  test('its blocks are taken back, least recently used first, when a request needs them', async () => {
    const { pool, cache, dropped } = cacheOf(4);
    const a = cache.store(seq(0, 16))!;
    const b = cache.store(seq(100, 16))!;
    expect(pool.freeBlocks).toBe(2);
    const r = pool.tryReserve(48)!; // 3 blocks: one entry goes
    expect(r.blocks).toBe(3);
    expect(dropped).toEqual([a]);
    const waiting = pool.reserve(64); // all 4 blocks: the request waits for r, b goes then
    pool.release(r);
    expect((await waiting).blocks).toBe(4);
    expect(dropped).toEqual([a, b]);
    expect(cache.stats()).toMatchObject({ entries: 0, evictions: 2 });
  });

  test('a pinned entry (a request copying from it) is not evicted, and nothing is stored while requests wait', async () => {
    const { pool, cache, dropped } = cacheOf(4);
    const a = cache.store(seq(0, 16))!;
    expect(cache.lookup(7, [...seq(0, 16), 1, 2])?.entry).toBe(a);
    expect(pool.tryReserve(64)).toBeUndefined();
    const r = pool.tryReserve(48)!;
    const waiting = pool.reserve(32);
    expect(cache.store(seq(50, 3))).toBeUndefined();
    expect(dropped).toEqual([]);
    cache.unpin(7);
    pool.release(r);
    expect((await waiting).blocks).toBe(2);
    expect(dropped).toEqual([]);
    expect(pool.freeBlocks).toBe(1);
  });

  test('clear() returns every block without telling the stages (a new ring holds none)', () => {
    const { pool, cache, dropped } = cacheOf(4);
    cache.store(seq(0, 40));
    cache.clear();
    expect(pool.freeBlocks).toBe(4);
    expect(dropped).toEqual([]);
    expect(cache.stats().entries).toBe(0);
  });
});

describe('the prompt cache in planned memory', () => {
  // 8 layers, 2 KV heads of 8 dims: 128 bytes per position per layer (f32 K and V).
  const layers = 8;
  const kvBytesPerTokenPerLayer = 2 * 2 * 8 * 4;

  test("a stage's copies of the entries, the cache full, never exceed its blocks' shares", () => {
    // Entries are counted over all 8 layers (the host's pool); a member holding layers 2-5 keeps its part of each.
    const bound = 200_000;
    const pool = new KvBlockPool(64, 16, layers * kvBytesPerTokenPerLayer);
    const kvHeads = 2;
    const memberLayers = 3;
    const store = new PrefixKvStore();
    const kv = new KvStore(localKvHost({ layers: memberLayers, kvHeads, headDim: 8 }));
    const cache = new PrefixCache(pool, bound, (ids) => store.drop(ids));
    const held = new Map<number, number>();
    const heldBytes = (): number => [...held].reduce((a, [id, bytes]) => a + (store.has(id) ? bytes : 0), 0);
    let worst = 0;
    for (let i = 0; i < 30; i++) {
      const prompt = seq(1000 * (i + 1), 20 + ((i * 7) % 40));
      const entry = cache.store(prompt);
      if (entry === undefined) continue;
      // The member's part: its layers' K and V of the prompt's positions, as the ring's `keep` copies them.
      const c = kv.empty(prompt.length, prompt.length);
      c.length = prompt.length;
      store.keep(entry, [c], prompt.length);
      freeCache(c);
      held.set(entry, memberLayers * prompt.length * kvBytesPerTokenPerLayer);
      worst = Math.max(worst, heldBytes());
    }
    expect(cache.stats().evictions).toBeGreaterThan(0);
    expect(worst).toBeGreaterThan(0);
    // Its layers' share of the bound, what the planner admits per block (pipeline/member-budget.ts promptCacheSizes).
    expect(worst).toBeLessThanOrEqual((memberLayers * bound) / layers);
    // Every copy the store dropped was freed: the caches still held are its entries.
    expect(kv.size).toBe(store.size);
  });
});
