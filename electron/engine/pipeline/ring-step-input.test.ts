import { describe, expect, it } from 'vitest';
import { isKiwiError, KiwiError } from '../errors.js';
import { KvStore, localKvHost, type KvCache } from '../runtime/kv-store.js';
import { encodeStepFrame, type StepTensor } from '../transport/tensor-frame.js';
import { decodeRingEvent, encodeRingEvent, encodeRingStep, stepMetadata, type Assign, type StepRow } from './ring-protocol.js';
import { checkStepInput, malformedFault, StepError, stepFailed, type StageCaches } from './ring-step-input.js';

const HIDDEN = 8;
const assign: Assign = {
  kind: 'assign', epoch: 2, start: 1, end: 3, prev: 1, next: 0, encoding: 'f32', zstd: false, receive: { tensor: 'f32', zstd: false },
  model: { fingerprint: 'a'.repeat(64), name: 'm', fileBytes: 1 }, maxPositions: 64,
};
const kv = new KvStore(localKvHost({ layers: 1, kvHeads: 1, headDim: 4 }));
/** A request's caches of `length` positions in a stage of two segments (checkStepInput reads only their lengths and capacity). */
const cacheOf = (capacity: number, length = 0): KvCache[] => [Object.assign(kv.empty(capacity), { length }), Object.assign(kv.empty(capacity), { length })];
const stage: StageCaches = { shape: { hidden: HIDDEN }, emptyCache: (capacity) => cacheOf(capacity) };

function hidden(batch: number, seq: number, width = HIDDEN): StepTensor {
  return { kind: 'hidden', hidden: new Float32Array(batch * seq * width), dims: [batch, seq, width] };
}

async function step(rows: StepRow[], seq = 1, opts: { epoch?: number; tensor?: StepTensor } = {}): Promise<Uint8Array> {
  const tensor = opts.tensor ?? hidden(rows.length, seq);
  return encodeRingStep(await encodeStepFrame({ metadata: stepMetadata(opts.epoch ?? assign.epoch, 5, rows), tensor }, { encoding: 'f32', zstd: false }));
}

async function refusal(msg: Uint8Array, caches = new Map<number, KvCache[]>()): Promise<unknown> {
  try {
    await checkStepInput(assign, stage, caches, msg);
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('what a member stage takes from the previous stage', () => {
  it('opens a cache for a request\'s first step and hands the rows their caches', async () => {
    const caches = new Map<number, KvCache[]>();
    const input = await checkStepInput(assign, stage, caches, await step([{ id: 7, pos: 0, cap: 32 }], 4));
    expect(input).toMatchObject({ kind: 'step', batch: 1, seq: 4, meta: { epoch: 2, step: 5 } });
    expect(caches.get(7)).toMatchObject([{ length: 0, capacity: 32 }, { length: 0, capacity: 32 }]);
    expect(input?.kind === 'step' && input.caches[0]).toBe(caches.get(7));
  });

  it('takes a batched decode step of requests whose caches are where the host says', async () => {
    const caches = new Map([[1, cacheOf(32, 4)], [2, cacheOf(16, 9)]]);
    const input = await checkStepInput(assign, stage, caches, await step([{ id: 1, pos: 4, cap: 32 }, { id: 2, pos: 9, cap: 16 }]));
    expect(input?.kind === 'step' && input.caches).toEqual([caches.get(1), caches.get(2)]);
  });

  it('drops and frees the caches of freed requests and passes the event on', async () => {
    const caches = new Map([[1, cacheOf(8)], [2, cacheOf(8)]]);
    const freed = caches.get(1)!;
    const input = await checkStepInput(assign, stage, caches, encodeRingEvent({ type: 'free', ids: [1] }));
    expect(input).toEqual({ kind: 'event', event: { type: 'free', ids: [1] } });
    expect([...caches.keys()]).toEqual([2]);
    for (const segment of freed) expect(() => kv.check(segment)).toThrow(/freed/);
  });

  it.each([
    ['a step of another ring epoch', () => step([{ id: 1, pos: 0, cap: 8 }], 1, { epoch: 1 })],
    ['a failed step of another ring epoch', () => Promise.resolve(encodeRingEvent({ type: 'step-failed', epoch: 1, step: 3, code: 'X', message: 'm' }))],
  ])('drops %s', async (_what, make) => {
    expect(await checkStepInput(assign, stage, new Map(), await make())).toBeUndefined();
  });

  it.each([
    ['a batched step that adds two tokens per request', () => step([{ id: 1, pos: 0, cap: 8 }, { id: 2, pos: 0, cap: 8 }], 2)],
    ['a step that names one request twice', () => step([{ id: 1, pos: 0, cap: 8 }, { id: 1, pos: 0, cap: 8 }])],
    ['a cache larger than the context', () => step([{ id: 1, pos: 0, cap: 65 }])],
    ['rows past their cache\'s capacity', () => step([{ id: 1, pos: 0, cap: 4 }], 5)],
  ])('refuses %s as malformed, naming the step', async (_what, make) => {
    const err = await refusal(await make());
    expect(err).toBeInstanceOf(StepError);
    expect(err).toMatchObject({ code: 'RING_PROTOCOL', step: 5, kind: 'malformed' });
  });

  it('starts a rebuilt request from the caches its previous stage kept, without cutting the kept segment back to the row', async () => {
    const caches = new Map<number, KvCache[]>();
    const asked: Array<[number, number, number]> = [];
    // Segment 0 kept all 9 positions that survived, segment 1 is new: the rows skip one and run the other.
    const adopt = (id: number, cap: number, keep: number): KvCache[] => (asked.push([id, cap, keep]), [Object.assign(kv.empty(cap), { length: keep }), kv.empty(cap)]);
    const input = await checkStepInput(assign, stage, caches, await step([{ id: 7, pos: 0, cap: 32, keep: 9 }], 6), undefined, undefined, adopt);
    expect(asked).toEqual([[7, 32, 9]]);
    expect(input?.kind === 'step' && input.caches[0]!.map((c) => c.length)).toEqual([9, 0]);
    caches.get(7)![1]!.length = 6;
    const replay = await checkStepInput(assign, stage, caches, await step([{ id: 7, pos: 6, cap: 32, replay: true, keep: 9 }], 3), undefined, undefined, adopt);
    expect(replay?.kind === 'step' && replay.caches[0]!.map((c) => c.length)).toEqual([9, 6]);
    expect(asked.length).toBe(1);
  });

  it('refuses a rebuilt row past what it says survived as malformed, and one its kept caches do not fit as recoverable', async () => {
    const past = await refusal(await step([{ id: 1, pos: 0, cap: 16, keep: 4 }], 5));
    expect(past).toMatchObject({ code: 'RING_PROTOCOL', step: 5, kind: 'malformed' });
    const batched = await refusal(await step([{ id: 1, pos: 3, cap: 16, keep: 4 }, { id: 2, pos: 3, cap: 16, keep: 4 }]));
    expect(batched).toMatchObject({ kind: 'malformed' });
    // A segment holding 2 positions neither runs from 3 nor holds 3-5.
    const torn = await refusal(await step([{ id: 1, pos: 3, cap: 16, keep: 8 }], 2), new Map([[1, [Object.assign(kv.empty(16), { length: 8 }), Object.assign(kv.empty(16), { length: 2 })]]]));
    expect(torn).toMatchObject({ code: 'RING_PROTOCOL', step: 5, kind: 'recoverable' });
  });

  it('reports a request whose cache is not where the host says as recoverable (recomputed, nobody\'s offence)', async () => {
    const err = await refusal(await step([{ id: 1, pos: 3, cap: 8 }]), new Map([[1, cacheOf(8, 2)]]));
    expect(err).toMatchObject({ code: 'RING_PROTOCOL', step: 5, kind: 'recoverable' });
  });

  it('rolls a cache that holds more than the host says back to the row\'s position in every segment (speculative drafts it rejected)', async () => {
    const c = cacheOf(8, 6);
    const input = await checkStepInput(assign, stage, new Map([[1, c]]), await step([{ id: 1, pos: 3, cap: 8 }]));
    expect(input).toMatchObject({ kind: 'step', caches: [c] });
    expect(c.map((segment) => segment.length)).toEqual([3, 3]);
  });

  it.each([
    ['an unknown message kind', async () => new Uint8Array([9, 1, 2]), 'RING_PROTOCOL'],
    ['token ids on a link agreed to carry f32 hidden states', async () => step([{ id: 1, pos: 0, cap: 8 }], 1, { tensor: { kind: 'ids', ids: new BigInt64Array(1), dims: [1, 1] } }), 'WIRE_NOT_AGREED'],
  ])('refuses %s before the step id is known', async (_what, make, code) => {
    const err = await refusal(await make());
    expect(err).not.toBeInstanceOf(StepError);
    expect(isKiwiError(err, code as 'RING_PROTOCOL')).toBe(true);
  });

  it('refuses hidden states of another width', async () => {
    const err = await refusal(await step([{ id: 1, pos: 0, cap: 8 }], 1, { tensor: hidden(1, 1, HIDDEN + 1) }));
    expect(isKiwiError(err)).toBe(true);
    expect(err).not.toBeInstanceOf(StepError);
  });
});

describe('what a member stage sends when a step fails', () => {
  it('tells the host which step failed and why, cutting the message to the event\'s 1000 characters', () => {
    const bytes = stepFailed(2, 5, new KiwiError('RING_STAGE_FAILED', 'x'.repeat(1200)));
    expect(decodeRingEvent(bytes.subarray(1))).toEqual({ type: 'step-failed', epoch: 2, step: 5, code: 'RING_STAGE_FAILED', message: 'x'.repeat(1000) });
  });

  it.each([
    ['a Kiwi error', new KiwiError('WIRE_NOT_AGREED', 'ids on an f32 link'), 'WIRE_NOT_AGREED'],
    ['anything else thrown while reading', new TypeError('bad bytes'), 'RING_PROTOCOL'],
  ])('names the peer and the cause of %s as a malformed-data fault', (_what, err, causeCode) => {
    const { cause, fault } = malformedFault(3, err);
    expect(cause.code).toBe(causeCode);
    expect(fault.code).toBe('RING_PEER_MALFORMED');
    expect(fault.details).toEqual({ peer: 3, cause: causeCode });
    expect(fault.message).toContain(`Peer 3 sent malformed ring data (${causeCode})`);
  });
});
