import { describe, expect, test } from 'vitest';
import { isKiwiError } from '../errors.js';
import { KvBlockPool } from './kv-pool.js';

describe('KvBlockPool', () => {
  test('reserves whole blocks for a request and returns them on release', async () => {
    const pool = new KvBlockPool(4, 16, 100);
    const r = await pool.reserve(17);
    expect(r.blocks).toBe(2);
    expect(r.capacityTokens).toBe(32);
    expect(pool.freeBlocks).toBe(2);
    pool.release(r);
    expect(pool.freeBlocks).toBe(4);
  });

  test('refuses a request that could never fit with KV_POOL_EXHAUSTED', () => {
    const pool = new KvBlockPool(4, 16, 100);
    expect(() => pool.reserve(65)).toThrow(/holds at most 64/);
    try {
      pool.tryReserve(100);
    } catch (err) {
      expect(isKiwiError(err, 'KV_POOL_EXHAUSTED')).toBe(true);
    }
  });

  test('a request that does not fit now waits, in arrival order, until blocks are released', async () => {
    const pool = new KvBlockPool(4, 16, 100);
    const a = await pool.reserve(48); // 3 blocks
    const order: string[] = [];
    const b = pool.reserve(32).then((r) => (order.push('b'), r)); // 2 blocks: waits
    const c = pool.reserve(16).then((r) => (order.push('c'), r)); // 1 block would fit, but waits behind b
    await Promise.resolve();
    expect(order).toEqual([]);
    pool.release(a);
    const [rb, rc] = await Promise.all([b, c]);
    expect(order).toEqual(['b', 'c']);
    expect(pool.freeBlocks).toBe(1);
    pool.release(rb);
    pool.release(rc);
  });

  test('without waiting, a request that does not fit now is refused with a clear error', async () => {
    const pool = new KvBlockPool(2, 16, 100);
    const a = await pool.reserve(32);
    await expect(pool.reserve(16, { wait: false })).rejects.toThrow(/KV cache is busy/);
    expect(pool.tryReserve(16)).toBeUndefined();
    pool.release(a);
  });

  test('an aborted waiter leaves the queue and lets the next one in', async () => {
    const pool = new KvBlockPool(2, 16, 100);
    const a = await pool.reserve(32);
    const ac = new AbortController();
    const waiting = pool.reserve(32, { signal: ac.signal });
    const next = pool.reserve(16);
    ac.abort(new Error('client went away'));
    await expect(waiting).rejects.toThrow(/client went away/);
    pool.release(a);
    expect((await next).blocks).toBe(1);
  });

  test('sizes itself from a memory budget', () => {
    const pool = KvBlockPool.forBudget(1_000_000, 1000, 16);
    expect(pool.totalBlocks).toBe(62);
    expect(() => KvBlockPool.forBudget(100, 1000, 16)).toThrow(/holds no block/);
  });

  test('releasing a reservation twice is a bug and throws', async () => {
    const pool = new KvBlockPool(2, 16, 100);
    const r = await pool.reserve(1);
    pool.release(r);
    expect(() => pool.release(r)).toThrow(/twice/);
  });
});
