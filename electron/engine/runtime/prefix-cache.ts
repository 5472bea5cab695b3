// The prompt cache (issue 16): chat UIs and agents resend the whole history every turn, so a new
// prompt often starts with a recent one. When a request ends, the KV of its prompt is kept (every
// stage keeps its own part: prefix-cache-kv.ts) as an entry; a later prompt that shares a prefix
// with an entry starts from a copy of that prefix's KV and prefills only the rest. This is the index
// of those entries: which tokens each holds, its KV blocks in the pool, least recently used first.
//
// Exactness. The KV of a prompt's positions depends on the tokens and on how it was computed: a
// prefill of several tokens gives bit for bit the same K/V (and logits) however the prompt is cut
// into prefill chunks, as long as each chunk has at least two tokens, while a one-token step (a
// decode step) rounds differently (runtime/prefix-cache.exact.test.ts checks both on real and
// synthetic models). So an entry holds only prompt positions (never generated tokens, which were
// decode steps), and a hit leaves at least two prompt tokens to prefill: the request then computes
// exactly what it would have without the cache.
//
// Memory. Entries hold blocks of the KV pool like requests do, within a size bound of their own;
// the pool takes them back (least recently used first) whenever a reservation does not fit, so a
// cached prefix never makes a request wait or fail. Entries are never stored while requests wait
// for blocks. An entry is pinned while a request copies from it (in a ring, until its first step
// has been through every stage), and is not evicted then.
//
// Every stage process keeps its layers' part of each entry (prefix-cache-kv.ts), so the bound is
// planned memory: the entries' bytes are counted over all the ring's layers (the pool's
// bytesPerToken), so a block's share is at most maxBytes / layers, which the planner admits per
// block (pipeline/member-budget.ts promptCacheSizes: a member's --memory-mb covers its copies too).
import type { KvBlockPool, KvReservation } from './kv-pool.js';

/** A hit: copy the first `length` positions of entry `entry`, then prefill the prompt from there. */
export interface PrefixHit {
  entry: number;
  length: number;
}

export interface PrefixCacheStats {
  /** Requests that started from a cached prefix, and those that found none. */
  hits: number;
  misses: number;
  /** Prompt tokens not prefilled thanks to the cache. */
  tokensReused: number;
  entries: number;
  /** KV pool blocks the entries hold (the pool takes them back for requests), and their bytes; maxBytes: the bound. */
  blocks: number;
  bytes: number;
  maxBytes: number;
  /** Entries dropped: for the size bound, or taken back by the pool for a request. */
  evictions: number;
}

interface Entry {
  readonly id: number;
  readonly tokens: readonly number[];
  readonly reservation: KvReservation;
  /** Requests copying from it now. */
  pins: number;
}

/** Fewest prompt tokens a hit leaves to prefill (a one-token prefill is a decode step: it rounds differently). */
export const MIN_PREFILL_TOKENS = 2;

export class PrefixCache {
  /** In least recently used order. */
  private entries: Entry[] = [];
  private readonly pinnedBy = new Map<number, Entry>();
  private nextId = 1;
  private readonly counts = { hits: 0, misses: 0, tokensReused: 0, evictions: 0 };

  constructor(
    private readonly pool: KvBlockPool,
    /** Most KV bytes the entries may hold. */
    readonly maxBytes: number,
    /** Entries evicted: every stage drops their KV. */
    private readonly drop: (entries: number[]) => void,
  ) {
    if (!(maxBytes > 0)) throw new Error(`a prompt cache needs a positive size, got ${maxBytes}`);
    pool.setReclaimer((blocks) => this.reclaim(blocks));
  }

  stats(): PrefixCacheStats {
    return { ...this.counts, entries: this.entries.length, blocks: this.entries.reduce((a, e) => a + e.reservation.blocks, 0), bytes: this.bytes(), maxBytes: this.maxBytes };
  }

  /**
   * The longest reusable prefix of `prompt` (request `requestId`), or undefined. A hit pins its entry
   * until unpin(requestId).
   */
  lookup(requestId: number, prompt: readonly number[]): PrefixHit | undefined {
    let best: Entry | undefined;
    let bestLength = 0;
    for (const e of this.entries) {
      const n = Math.min(commonPrefix(e.tokens, prompt), prompt.length - MIN_PREFILL_TOKENS);
      if (n > bestLength) {
        best = e;
        bestLength = n;
      }
    }
    if (best === undefined) {
      this.counts.misses++;
      return undefined;
    }
    this.counts.hits++;
    this.counts.tokensReused += bestLength;
    this.touch(best);
    best.pins++;
    this.pinnedBy.set(requestId, best);
    return { entry: best.id, length: bestLength };
  }

  /** The request copied what it needed from its entry (or ended): the entry may be evicted again. */
  unpin(requestId: number): void {
    const e = this.pinnedBy.get(requestId);
    if (e === undefined) return;
    this.pinnedBy.delete(requestId);
    e.pins--;
  }

  /**
   * A request ended with `prompt` (all of it prefilled) in its caches: the entry to keep its KV as
   * (the caller copies it there now), or undefined when it is not worth keeping or there is no room.
   */
  store(prompt: readonly number[]): number | undefined {
    if (prompt.length < MIN_PREFILL_TOKENS + 1) return undefined;
    // Already held (this prompt is a prefix of an entry): that entry serves it.
    const holder = this.entries.find((e) => commonPrefix(e.tokens, prompt) === prompt.length);
    if (holder !== undefined) {
      this.touch(holder);
      return undefined;
    }
    const blocks = this.pool.blocksFor(prompt.length);
    if (this.bytesOf(blocks) > this.maxBytes) return undefined;
    // Entries this one contains are redundant: any prefix of theirs is a prefix of this one.
    this.evict(this.entries.filter((e) => e.pins === 0 && commonPrefix(e.tokens, prompt) === e.tokens.length), false);
    while (this.bytes() + this.bytesOf(blocks) > this.maxBytes) {
      const lru = this.entries.find((e) => e.pins === 0);
      if (lru === undefined) return undefined;
      this.evict([lru], true);
    }
    // Never ahead of a request that waits (tryReserve refuses then); older entries may make room.
    const reservation = this.pool.tryReserve(prompt.length);
    if (reservation === undefined) return undefined;
    const e: Entry = { id: this.nextId++, tokens: [...prompt], reservation, pins: 0 };
    this.entries.push(e);
    return e.id;
  }

  /** Drops every entry without telling the stages (a new ring holds none of them). */
  clear(): void {
    const gone = this.entries;
    this.entries = [];
    this.pinnedBy.clear();
    for (const e of gone) this.pool.release(e.reservation);
  }

  private bytes(): number {
    return this.entries.reduce((a, e) => a + this.bytesOf(e.reservation.blocks), 0);
  }

  private bytesOf(blocks: number): number {
    return blocks * this.pool.blockTokens * this.pool.bytesPerToken;
  }

  private touch(e: Entry): void {
    this.entries = [...this.entries.filter((x) => x !== e), e];
  }

  /** Removes `gone`, tells the stages, and returns their blocks to the pool. */
  private evict(gone: Entry[], counted: boolean): void {
    if (gone.length === 0) return;
    this.entries = this.entries.filter((e) => !gone.includes(e));
    if (counted) this.counts.evictions += gone.length;
    this.drop(gone.map((e) => e.id));
    for (const e of gone) this.pool.release(e.reservation);
  }

  /** The pool needs `blocks` more: least recently used unpinned entries go (their reservations are returned, not released). */
  private reclaim(blocks: number): KvReservation[] {
    const out: Entry[] = [];
    let freed = 0;
    for (const e of this.entries) {
      if (freed >= blocks) break;
      if (e.pins > 0) continue;
      out.push(e);
      freed += e.reservation.blocks;
    }
    if (out.length === 0) return [];
    this.entries = this.entries.filter((e) => !out.includes(e));
    this.counts.evictions += out.length;
    this.drop(out.map((e) => e.id));
    return out.map((e) => e.reservation);
  }
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** The prompt cache as GET /health shows it (`prompt_cache`); absent when it is off. */
export function promptCacheHealth(s: PrefixCacheStats | undefined): Record<string, unknown> {
  if (s === undefined) return {};
  return { prompt_cache: { hits: s.hits, misses: s.misses, tokens_reused: s.tokensReused, entries: s.entries, bytes: s.bytes, max_bytes: s.maxBytes, evictions: s.evictions } };
}
