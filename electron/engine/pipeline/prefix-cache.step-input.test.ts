// A member stage's part of the prompt cache (ring-step-input.ts with runtime/prefix-cache-kv.ts):
// a `free` event keeps a finished request's first positions as an entry before its cache goes, a
// request's first step that names an entry starts from a copy of it, and dropped entries are gone
// (a step naming one is out of step with the host: recomputed, nobody's offence).
import { describe, expect, it } from 'vitest';
import { PrefixKvStore } from '../runtime/prefix-cache-kv.js';
import { KvStore, localKvHost, type KvCache } from '../runtime/kv-store.js';
import { encodeStepFrame } from '../transport/tensor-frame.js';
import { encodeRingEvent, encodeRingStep, stepMetadata, type Assign, type StepRow } from './ring-protocol.js';
import { checkStepInput, StepError, type StageCaches } from './ring-step-input.js';

const HIDDEN = 8;
const KV_HEADS = 2;
const HEAD_DIM = 4;
const assign: Assign = {
  kind: 'assign', epoch: 2, start: 1, end: 3, prev: 1, next: 0, encoding: 'f32', zstd: false, receive: { tensor: 'f32', zstd: false },
  model: { fingerprint: 'a'.repeat(64), name: 'm', fileBytes: 1 }, maxPositions: 64,
};

const host = localKvHost({ layers: 1, kvHeads: KV_HEADS, headDim: HEAD_DIM });
const kv = new KvStore(host);

/** A one-layer cache of `length` filled positions whose values say where they are (K: head * 1000 + position, V: its negative). */
function filled(capacity: number, length: number): KvCache {
  const c = kv.empty(capacity, capacity);
  const { keys, values } = host.buffers.buffers(c.id);
  for (let h = 0; h < KV_HEADS; h++) {
    for (let p = 0; p < length; p++) {
      const at = (h * c.allocated + p) * HEAD_DIM;
      keys[0]!.fill(h * 1000 + p, at, at + HEAD_DIM);
      values[0]!.fill(-(h * 1000 + p), at, at + HEAD_DIM);
    }
  }
  c.length = length;
  return c;
}
const stage: StageCaches = { shape: { hidden: HIDDEN }, emptyCache: (capacity) => [kv.empty(capacity)] };

async function step(rows: StepRow[], seq: number): Promise<Uint8Array> {
  const tensor = { kind: 'hidden' as const, hidden: new Float32Array(rows.length * seq * HIDDEN), dims: [rows.length, seq, HIDDEN] as [number, number, number] };
  return encodeRingStep(await encodeStepFrame({ metadata: stepMetadata(assign.epoch, 9, rows), tensor }, { encoding: 'f32', zstd: false }));
}

describe('the prompt cache on a member stage', () => {
  it('keeps a finished request\'s prompt positions and seeds a later request from them', async () => {
    const caches = new Map([[3, [filled(32, 20)]]]);
    const prefixes = new PrefixKvStore();
    await checkStepInput(assign, stage, caches, encodeRingEvent({ type: 'free', ids: [], keep: [{ id: 3, entry: 1, length: 12 }] }), undefined, prefixes);
    await checkStepInput(assign, stage, caches, encodeRingEvent({ type: 'free', ids: [3] }), undefined, prefixes);
    expect([...caches.keys()]).toEqual([]);
    expect(prefixes.has(1)).toBe(true);

    const input = await checkStepInput(assign, stage, caches, await step([{ id: 4, pos: 10, cap: 48, from: 1 }], 5), undefined, prefixes);
    const c = caches.get(4)![0]!;
    expect(input?.kind === 'step' && input.caches[0]![0]).toBe(c);
    expect(c).toMatchObject({ length: 10, capacity: 48 });
    // Positions 0..9 of each head moved over exactly; nothing past them.
    const b = host.buffers.buffers(c.id);
    const at = (h: number, p: number): number => b.keys[0]![(h * b.allocated + p) * HEAD_DIM]!;
    expect([at(0, 0), at(0, 9), at(1, 3), at(1, 9), at(1, 10)]).toEqual([0, 9, 1003, 1009, 0]);
    expect(b.values[0]![(1 * b.allocated + 9) * HEAD_DIM]).toBe(-1009);
    // The finished request's cache was freed; what is held is the new request's and the entry's copy.
    expect(kv.size).toBe(2);
  });

  it('a step that names a dropped entry is out of step with the host (recomputed)', async () => {
    const caches = new Map([[3, [filled(32, 20)]]]);
    const prefixes = new PrefixKvStore();
    await checkStepInput(assign, stage, caches, encodeRingEvent({ type: 'free', ids: [3], keep: [{ id: 3, entry: 1, length: 12 }] }), undefined, prefixes);
    await checkStepInput(assign, stage, caches, encodeRingEvent({ type: 'free', ids: [], drop: [1] }), undefined, prefixes);
    expect(prefixes.size).toBe(0);
    const err = await checkStepInput(assign, stage, caches, await step([{ id: 4, pos: 10, cap: 48, from: 1 }], 5), undefined, prefixes).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StepError);
    expect((err as StepError).kind).toBe('recoverable');
  });
});
