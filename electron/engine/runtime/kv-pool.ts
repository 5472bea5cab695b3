// The KV-cache budget of a process as a pool of fixed-size blocks (blockTokens positions of every
// layer of the stage). A request reserves the blocks for its whole length (prompt + max new
// tokens) at admission, so running requests can never run the process out of memory; one that
// does not fit now waits (FIFO), one that could never fit is refused. Pure bookkeeping, no I/O.
// Blocks held by cached prompt prefixes (prefix-cache.ts) are reclaimable: a reservation that does
// not fit in the free blocks first takes them back (the reclaimer evicts its least recently used
// entries), so the prompt cache never makes a request wait or fail.
import { KiwiError } from '../errors.js';

export interface KvReservation {
  readonly id: number;
  readonly blocks: number;
  /** Positions this request may hold: blocks * blockTokens. */
  readonly capacityTokens: number;
}

interface Waiter {
  blocks: number;
  resolve: (r: KvReservation) => void;
  reject: (err: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

export class KvBlockPool {
  private free: number;
  private nextId = 1;
  private readonly live = new Map<number, KvReservation>();
  private readonly waiting: Waiter[] = [];
  private reclaimer: ((blocks: number) => KvReservation[]) | undefined;

  constructor(
    readonly totalBlocks: number,
    readonly blockTokens: number,
    /** KV bytes of one position over the stage's layers (K and V). */
    readonly bytesPerToken: number,
  ) {
    if (!Number.isInteger(totalBlocks) || totalBlocks < 1) throw new Error(`KV pool needs at least one block, got ${totalBlocks}`);
    if (!Number.isInteger(blockTokens) || blockTokens < 1) throw new Error(`KV block size must be a positive integer, got ${blockTokens}`);
    this.free = totalBlocks;
  }

  /** A pool that fits in `budgetBytes`. */
  static forBudget(budgetBytes: number, bytesPerToken: number, blockTokens = 16): KvBlockPool {
    const blocks = Math.floor(budgetBytes / (bytesPerToken * blockTokens));
    if (blocks < 1) {
      throw new KiwiError('KV_POOL_EXHAUSTED', `a KV budget of ${budgetBytes} bytes holds no block of ${blockTokens} tokens; give the KV cache more memory`);
    }
    return new KvBlockPool(blocks, blockTokens, bytesPerToken);
  }

  /**
   * Who holds reclaimable blocks (the prompt cache): asked for `blocks` more whenever a reservation
   * does not fit in the free ones, it returns reservations of its own to free (fewer if it has none).
   */
  setReclaimer(reclaim: ((blocks: number) => KvReservation[]) | undefined): void {
    this.reclaimer = reclaim;
  }

  get freeBlocks(): number {
    return this.free;
  }

  get capacityTokens(): number {
    return this.totalBlocks * this.blockTokens;
  }

  blocksFor(tokens: number): number {
    return Math.max(1, Math.ceil(tokens / this.blockTokens));
  }

  /** Reserves now or returns undefined (never waits). Throws if the request can never fit. */
  tryReserve(tokens: number): KvReservation | undefined {
    const blocks = this.checkFits(tokens);
    if (this.waiting.length > 0) return undefined;
    this.reclaim(blocks);
    if (blocks > this.free) return undefined;
    return this.take(blocks);
  }

  /**
   * Reserves blocks for `tokens` positions. With `wait` (default), waits in FIFO order until enough
   * blocks are free; without it, a request that does not fit now is refused.
   */
  reserve(tokens: number, opts: { wait?: boolean; signal?: AbortSignal } = {}): Promise<KvReservation> {
    const blocks = this.checkFits(tokens);
    if (this.waiting.length === 0) this.reclaim(blocks);
    if (this.waiting.length === 0 && blocks <= this.free) return Promise.resolve(this.take(blocks));
    if (opts.wait === false) {
      return Promise.reject(
        new KiwiError(
          'KV_POOL_EXHAUSTED',
          `the KV cache is busy: the request needs ${blocks} blocks and ${this.free} of ${this.totalBlocks} are free; retry when a request finishes`,
          { neededBlocks: blocks, freeBlocks: this.free },
        ),
      );
    }
    opts.signal?.throwIfAborted();
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        blocks,
        resolve,
        reject,
        signal: opts.signal,
        onAbort: () => {
          const i = this.waiting.indexOf(waiter);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(opts.signal?.reason);
          this.admitWaiting();
        },
      };
      opts.signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  release(r: KvReservation): void {
    if (!this.live.delete(r.id)) throw new Error(`KV reservation ${r.id} released twice`);
    this.free += r.blocks;
    this.admitWaiting();
  }

  /** Takes reclaimable blocks back until `blocks` are free (as far as there are any). */
  private reclaim(blocks: number): void {
    if (blocks <= this.free || this.reclaimer === undefined) return;
    for (const r of this.reclaimer(blocks - this.free)) {
      if (!this.live.delete(r.id)) throw new Error(`KV reservation ${r.id} reclaimed but not held`);
      this.free += r.blocks;
    }
  }

  private checkFits(tokens: number): number {
    const blocks = this.blocksFor(tokens);
    if (blocks > this.totalBlocks) {
      throw new KiwiError(
        'KV_POOL_EXHAUSTED',
        `the request needs ${tokens} positions of KV cache but this process holds at most ${this.capacityTokens}; shorten the prompt or max tokens`,
        { tokens, capacityTokens: this.capacityTokens },
      );
    }
    return blocks;
  }

  private take(blocks: number): KvReservation {
    this.free -= blocks;
    const r = { id: this.nextId++, blocks, capacityTokens: blocks * this.blockTokens };
    this.live.set(r.id, r);
    return r;
  }

  private admitWaiting(): void {
    if (this.waiting.length > 0) this.reclaim(this.waiting[0]!.blocks);
    while (this.waiting.length > 0 && this.waiting[0]!.blocks <= this.free) {
      const w = this.waiting.shift()!;
      w.signal?.removeEventListener('abort', w.onAbort);
      w.resolve(this.take(w.blocks));
    }
  }
}
