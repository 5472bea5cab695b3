// The worker-thread session against the in-thread one: the same results, the same KiwiErrors, the
// caller's feeds intact, a dead or disposed worker failing its runs instead of hanging them, and a
// released thread serving the next session.
import { describe, expect, test } from 'vitest';
import { createStageSession, f32Tensor } from '../ort/session.js';
import type { OrtTensor, SessionFactoryOptions, StageSession } from '../ort/session.js';
import { createWorkerStageSession } from './ort-worker-session.js';
import { GraphBuilder, encodeModel, f32Bytes } from '../ort/onnx-graph.js';

const W = Float32Array.of(1, 2, 3, 4);

/** y = x + w, and `sum` = ReduceSum of y, over [batch, 4]; `chain` Adds y to itself `depth` times (a slow run). */
function addModel(depth = 0): Uint8Array {
  const g = new GraphBuilder('t');
  const x = g.input('x', 'float32', ['batch', 4]);
  const w = g.initializer('w', 'float32', [4], f32Bytes(W));
  const y = g.op('Add', [x, w], { output: 'y' });
  g.op('ReduceSum', [y], { output: 'sum', attrs: { keepdims: 0 } });
  let c = y;
  for (let i = 0; i < depth; i++) c = g.op('Add', [c, c]);
  g.op('Identity', [c], { output: 'chain' });
  g.output('y', 'float32', ['batch', 4]);
  g.output('sum', 'float32', []);
  g.output('chain', 'float32', ['batch', 4]);
  return encodeModel(g).model;
}

type Factory = (model: string | Uint8Array, opts?: SessionFactoryOptions) => Promise<StageSession>;
const kinds: Array<[string, Factory]> = [
  ['in-thread', createStageSession],
  ['worker', createWorkerStageSession],
];

async function withSession<T>(factory: Factory, model: Uint8Array, use: (s: StageSession) => Promise<T>): Promise<T> {
  const s = await factory(model, { provider: 'cpu', threads: 1 });
  try {
    return await use(s);
  } finally {
    await s.dispose();
  }
}

describe.each(kinds)('%s session', (_kind, factory) => {
  test('returns every output when no fetches are named', async () => {
    await withSession(factory, addModel(), async (s) => {
      expect(s.provider).toBe('cpu');
      expect(s.inputNames).toEqual(['x']);
      const out = await s.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1, 2, 2, 2, 2), [2, 4]) });
      expect(Array.from(out.y!.data as Float32Array)).toEqual([2, 3, 4, 5, 3, 4, 5, 6]);
      expect(out.y!.dims).toEqual([2, 4]);
      expect((out.sum!.data as Float32Array)[0]).toBe(32);
    });
  });

  test('returns only the outputs named in fetches', async () => {
    await withSession(factory, addModel(), async (s) => {
      const out = await s.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]) }, ['sum']);
      expect(Object.keys(out)).toEqual(['sum']);
      expect((out.sum!.data as Float32Array)[0]).toBe(14);
    });
  });

  test("leaves the caller's feeds intact, also a view into a larger buffer", async () => {
    await withSession(factory, addModel(), async (s) => {
      const xs = Float32Array.of(1, 1, 1, 1);
      await s.run({ x: f32Tensor(xs, [1, 4]) }, ['y']);
      expect(Array.from(xs)).toEqual([1, 1, 1, 1]);
      const big = new Float32Array(16).fill(7);
      const out = await s.run({ x: f32Tensor(big.subarray(4, 8), [1, 4]) }, ['y']);
      expect(big.length).toBe(16);
      expect(Array.from(out.y!.data as Float32Array)).toEqual([8, 9, 10, 11]);
    });
  });

  test('a run with bad shapes fails with RUNTIME_RUN_FAILED, and the session still works afterwards', async () => {
    await withSession(factory, addModel(), async (s) => {
      await expect(s.run({ x: f32Tensor(Float32Array.of(1, 2, 3, 4, 5, 6), [1, 6]) }, ['y'])).rejects.toMatchObject({ name: 'KiwiError', code: 'RUNTIME_RUN_FAILED' });
      const out = await s.run({ x: f32Tensor(Float32Array.of(0, 0, 0, 0), [1, 4]) }, ['y']);
      expect(Array.from(out.y!.data as Float32Array)).toEqual(Array.from(W));
    });
  });

  test('bad model bytes fail with RUNTIME_SESSION_FAILED', async () => {
    await expect(factory(Uint8Array.of(8, 1, 2, 3), { provider: 'cpu', threads: 1 })).rejects.toMatchObject({
      name: 'KiwiError',
      code: 'RUNTIME_SESSION_FAILED',
    });
  });
});

describe('worker session', () => {
  test('gives bit-identical outputs to the in-thread session', async () => {
    const xs = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i) * 1e3);
    const run = (factory: Factory) => withSession(factory, addModel(6), async (s) => (await s.run({ x: f32Tensor(xs, [16, 4]) })).chain!.data);
    expect(await run(createWorkerStageSession)).toEqual(await run(createStageSession));
  });

  test('two workers run side by side in one process', async () => {
    const [a, b] = await Promise.all([createWorkerStageSession(addModel(), { provider: 'cpu', threads: 1 }), createWorkerStageSession(addModel(2), { provider: 'cpu', threads: 1 })]);
    try {
      const runs = await Promise.all(
        Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).run({ x: f32Tensor(Float32Array.of(i, 0, 0, 0), [1, 4]) }, ['chain'])),
      );
      runs.forEach((out, i) => expect((out.chain!.data as Float32Array)[0]).toBe(i % 2 === 0 ? i + 1 : 4 * (i + 1)));
    } finally {
      await Promise.all([a.dispose(), b.dispose()]);
    }
  });

  test('runs sent before dispose complete; runs after it fail with RUNTIME_SESSION_CLOSED; dispose is idempotent', async () => {
    const s = await createWorkerStageSession(addModel(), { provider: 'cpu', threads: 1 });
    const before = s.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]) }, ['sum']);
    const disposed = s.dispose();
    await expect(s.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]) })).rejects.toMatchObject({ code: 'RUNTIME_SESSION_CLOSED' });
    expect(((await before).sum!.data as Float32Array)[0]).toBe(14);
    await disposed;
    await s.dispose();
    await expect(s.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]) })).rejects.toMatchObject({ code: 'RUNTIME_SESSION_CLOSED' });
  });

  test('a disposed session hands its thread to the next one, which starts clean', async () => {
    const first = await createWorkerStageSession(addModel(), { provider: 'cpu', threads: 1 });
    const thread = first.worker.threadId;
    await first.dispose();
    const second = await createWorkerStageSession(addModel(2), { provider: 'cpu', threads: 1 });
    try {
      expect(second.worker.threadId).toBe(thread);
      const out = await second.run({ x: f32Tensor(Float32Array.of(1, 0, 0, 0), [1, 4]) }, ['chain']);
      expect(Array.from(out.chain!.data as Float32Array)).toEqual([8, 8, 12, 16]);
      await expect(first.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]) })).rejects.toMatchObject({ code: 'RUNTIME_SESSION_CLOSED' });
    } finally {
      await second.dispose();
    }
  });

  test('a worker that dies fails its pending and later runs with RUNTIME_WORKER_FAILED instead of hanging', async () => {
    const s = await createWorkerStageSession(addModel(), { provider: 'cpu', threads: 1 });
    const x = (): OrtTensor => f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]);
    const before = s.run({ x: x() }, ['sum']);
    // A message the thread cannot handle: an uncaught error there, as a bug in it would raise.
    s.worker.postMessage({ type: 'run', id: -1, feeds: { x: { data: 'not an array', dims: [4] } }, fetches: undefined });
    const after = [s.run({ x: x() }), s.run({ x: x() })];
    expect(((await before).sum!.data as Float32Array)[0]).toBe(14);
    for (const r of after) await expect(r).rejects.toMatchObject({ name: 'KiwiError', code: 'RUNTIME_WORKER_FAILED' });
    await expect(s.run({ x: x() })).rejects.toMatchObject({ code: 'RUNTIME_WORKER_FAILED' });
    await s.dispose();
  });
});
