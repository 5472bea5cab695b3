// Request caches as handles (kv-store.ts) over buffers where the session runs (kv-buffers.ts):
// growth in steps that keeps the filled positions, exact prefix copies, explicit frees that make a
// handle unusable, one run at a time per cache, a failed allocation reported by the run that needs
// it, and the same results from a stage whose caches live on its worker as from one in-thread.
import { describe, expect, test } from 'vitest';
import { KvBuffers } from './kv-buffers.js';
import { copyPrefix, freeCache, KV_GROWTH_POSITIONS, KvStore, localKvHost, rollbackCache } from './kv-store.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { Stage } from './stage.js';
import { testModelPath } from '../model/test-models.js';

const layout = { layers: 2, kvHeads: 2, headDim: 4 };

/** Writes `value(head, position)` at positions [0, length) of every layer of `id` (K; V gets its negative). */
function fill(buffers: KvBuffers, id: number, length: number, value: (h: number, p: number) => number): void {
  const b = buffers.buffers(id);
  for (let i = 0; i < layout.layers; i++) {
    for (let h = 0; h < layout.kvHeads; h++) {
      for (let p = 0; p < length; p++) {
        const at = (h * b.allocated + p) * layout.headDim;
        b.keys[i]!.fill(value(h, p) + i, at, at + layout.headDim);
        b.values[i]!.fill(-(value(h, p) + i), at, at + layout.headDim);
      }
    }
  }
}

describe('KV buffers', () => {
  test('grow keeps the filled positions of every head and layer, and never shrinks', () => {
    const b = new KvBuffers(layout);
    b.create(1, 4);
    fill(b, 1, 3, (h, p) => h * 100 + p);
    b.grow(1, 3, 10);
    const { keys, values } = b.read(1, 3);
    expect(Array.from(keys[1]!.filter((_, j) => j % layout.headDim === 0))).toEqual([1, 2, 3, 101, 102, 103]);
    expect(values[0]![layout.headDim * 4]).toBe(-101);
    expect(b.buffers(1).allocated).toBe(10);
    expect(() => b.grow(1, 3, 8)).toThrow(/cannot resize/);
  });

  test('a copy holds exactly the first positions, in buffers of its own', () => {
    const b = new KvBuffers(layout);
    b.create(1, 8);
    fill(b, 1, 6, (h, p) => h * 100 + p);
    b.copy(1, 2, 4, 5);
    fill(b, 1, 6, () => 7); // the source changes after the copy
    const copied = b.buffers(2);
    expect(copied.allocated).toBe(5);
    const at = (h: number, p: number): number => copied.keys[0]![(h * 5 + p) * layout.headDim]!;
    expect([at(0, 0), at(0, 3), at(0, 4), at(1, 3)]).toEqual([0, 3, 0, 103]);
  });

  test('a cache that could not be allocated fails the run that uses it, saying why', () => {
    const b = new KvBuffers(layout);
    b.broken(3, 'KV cache 3 could not be allocated (Array buffer allocation failed)');
    expect(() => b.past([{ id: 3, length: 0, allocated: 4 }], 1)).toThrow(/^KV cache 3 could not be allocated \(Array buffer allocation failed\)$/);
    b.free(3);
    expect(() => b.past([{ id: 3, length: 0, allocated: 4 }], 1)).toThrow(/not held by this stage/);
  });
});

describe('KV store', () => {
  test('copies are exact and sized in growth steps; a freed cache is refused and its buffers are gone', async () => {
    const host = localKvHost(layout);
    const store = new KvStore(host);
    const c = store.empty(1000, 300);
    fill(host.buffers, c.id, 300, (h, p) => h * 1000 + p);
    c.length = 300;
    const copy = copyPrefix(c, 290, 1000);
    expect(copy).toMatchObject({ length: 290, capacity: 1000, allocated: 2 * KV_GROWTH_POSITIONS });
    const [a, b] = [await store.read(c), await store.read(copy)];
    const firstOfEach = (x: Float32Array, n: number): number[] => Array.from({ length: 2 * n }, (_, j) => x[j * layout.headDim]!);
    expect(firstOfEach(b.keys[1]!, 290)).toEqual(firstOfEach(a.keys[1]!, 300).filter((_, j) => j % 300 < 290));
    expect(store.size).toBe(2);
    freeCache(c);
    freeCache(c); // idempotent
    expect(store.size).toBe(1);
    expect(() => store.check(c)).toThrow(/freed/);
    expect(() => host.buffers.buffers(c.id)).toThrow(/not held/);
    rollbackCache(copy, 10);
    expect(copy.length).toBe(10);
    expect(() => rollbackCache(copy, 11)).toThrow(/rollback/);
  });

  test('a cache of another store is refused; a closed store refuses every cache as disposed', () => {
    const one = new KvStore(localKvHost(layout));
    const other = new KvStore(localKvHost(layout));
    const c = one.empty(16);
    expect(() => other.check(c)).toThrow(/another stage/);
    one.close();
    expect(() => one.check(c)).toThrow(expect.objectContaining({ code: 'RUNTIME_SESSION_CLOSED' }));
  });
});

describe('caches on a worker', () => {
  test('a prefill, decode steps, a copy and a rollback give the same K/V and logits on the worker as in-thread', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file);
    const ids = (xs: number[]) => ({ kind: 'ids' as const, ids: BigInt64Array.from(xs.map(BigInt)), batch: 1, seq: xs.length });
    const trace = async (worker: boolean): Promise<unknown[]> => {
      const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1, worker });
      try {
        const out: unknown[] = [];
        const c = stage.emptyCache(300);
        const logits = async (xs: number[], cache = c): Promise<number[]> => {
          const o = await stage.forward(ids(xs), [cache]);
          return o.kind === 'logits' ? Array.from(o.logits.subarray(0, 16)) : [];
        };
        out.push(await logits(Array.from({ length: 260 }, (_, i) => 1 + (i % 300)))); // past one growth step
        for (const t of [5, 9, 11]) out.push(await logits([t]));
        const copy = copyPrefix(c, 200, 300);
        rollbackCache(c, 250);
        out.push(await logits([12]), await logits([13], copy));
        out.push(await copy.store.read(copy), c.allocated, copy.allocated);
        freeCache(c);
        await expect(stage.forward(ids([1]), [c])).rejects.toThrow(/freed/);
        return out;
      } finally {
        await stage.dispose();
      }
    };
    expect(await trace(true)).toEqual(await trace(false));
  });
});
