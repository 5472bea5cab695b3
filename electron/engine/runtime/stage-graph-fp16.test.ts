// The fp16 stage graph (StageGraphOptions.precision 'fp16') on the CPU provider against the f32
// graph of the same weights: greedy tokens on stories260K, and logits on synthetic models within
// a stated bound. The graphs run whole (one stage with the head) with the positions each run adds
// appended to their KV cache, in fp16 for the fp16 graph (what a GPU stage keeps).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf, type ModelShape } from './decoder-shape.js';
import { EmbeddingTable } from './embedding.js';
import { encodeModel } from '../ort/onnx-graph.js';
import { IO, attentionHeadDim, buildStageGraph, stagePrecisionFor, type StagePrecision } from './stage-graph.js';
import { loadStageWeights } from './stage-weights.js';

/**
 * The model as a chain of stages (default: one stage with the head): step(ids) runs them after
 * the cached positions and returns the last position's logits. Between stages travels hidden_out,
 * which stays f32 whatever the stages' precision.
 */
async function wholeModel(file: GgufFile, shape: ModelShape, precision: StagePrecision, ranges: Array<[number, number]> = [[0, shape.blockCount]]) {
  const headDim = attentionHeadDim(shape);
  const type = precision === 'fp16' ? 'float16' : 'float32';
  const empty = () => new ort.Tensor(type, precision === 'fp16' ? new Uint16Array(0) : new Float32Array(0), [1, shape.kvHeads, 0, headDim]);
  const stages: Array<{ start: number; end: number; head: boolean; session: ort.InferenceSession; past: ort.Tensor[] }> = [];
  for (const [start, end] of ranges) {
    const head = end === shape.blockCount;
    const weights = await loadStageWeights(file, shape, { start, end, head });
    const model = encodeModel(buildStageGraph(shape, weights, { accuracyLevel: 0, precision })).model;
    const session = await ort.InferenceSession.create(model, { executionProviders: ['cpu'], intraOpNumThreads: 1, logSeverityLevel: 3 });
    stages.push({ start, end, head, session, past: Array.from({ length: 2 * (end - start) }, empty) });
  }
  const embedding = await EmbeddingTable.fromGguf(file, shape.vocab, shape.hidden);
  let length = 0;
  return {
    async step(ids: number[]): Promise<Float32Array> {
      const total = length + ids.length;
      let hidden: ort.Tensor = new ort.Tensor('float32', embedding.lookup(ids), [1, ids.length, shape.hidden]);
      for (const st of stages) {
        const feeds: Record<string, ort.Tensor> = {
          [IO.hiddenIn]: hidden,
          [IO.seqlensK]: new ort.Tensor('int32', Int32Array.of(total - 1), [1]),
          [IO.totalSeqLen]: new ort.Tensor('int32', Int32Array.of(total), []),
          ...(st.head ? { [IO.logitsFrom]: new ort.Tensor('int64', BigInt64Array.of(-1n), [1]) } : {}),
        };
        for (let L = st.start; L < st.end; L++) {
          feeds[IO.pastKey(L)] = st.past[2 * (L - st.start)]!;
          feeds[IO.pastValue(L)] = st.past[2 * (L - st.start) + 1]!;
        }
        const out = await st.session.run(feeds);
        st.past = st.past.map((past, i) => appendPositions(past, out[i % 2 === 0 ? IO.newKey(st.start + i / 2) : IO.newValue(st.start + (i - 1) / 2)]!));
        expect(st.past[0]!.type).toBe(type); // the KV cache is kept in the stage's precision
        hidden = out[st.head ? IO.logits : IO.hiddenOut]!;
        expect(hidden.type).toBe('float32'); // what leaves a stage is f32 whatever its precision
      }
      length = total;
      return hidden.data as Float32Array;
    },
    dispose: async () => {
      for (const st of stages) await st.session.release();
    },
  };
}

/** [1, kvHeads, n, headDim] past followed by [1, kvHeads, m, headDim] new positions: [1, kvHeads, n + m, headDim]. */
function appendPositions(past: ort.Tensor, fresh: ort.Tensor): ort.Tensor {
  const [, kvHeads, n, headDim] = past.dims as [number, number, number, number];
  const m = fresh.dims[2]!;
  const a = past.data as Float32Array | Uint16Array;
  const b = fresh.data as Float32Array | Uint16Array;
  const out = new (a.constructor as Float32ArrayConstructor | Uint16ArrayConstructor)(kvHeads * (n + m) * headDim);
  for (let h = 0; h < kvHeads; h++) {
    out.set(a.subarray(h * n * headDim, (h + 1) * n * headDim), h * (n + m) * headDim);
    out.set(b.subarray(h * m * headDim, (h + 1) * m * headDim), (h * (n + m) + n) * headDim);
  }
  return new ort.Tensor(past.type, out, [1, kvHeads, n + m, headDim]);
}

const argmax = (a: Float32Array): number => a.reduce((best, v, i) => (v > a[best]! ? i : best), 0);

async function greedy(file: GgufFile, shape: ModelShape, precision: StagePrecision, prompt: number[], tokens: number, ranges?: Array<[number, number]>): Promise<number[]> {
  const m = await wholeModel(file, shape, precision, ranges);
  try {
    const ids: number[] = [];
    let next = argmax(await m.step(prompt));
    for (let i = 0; i < tokens; i++) {
      ids.push(next);
      next = argmax(await m.step([next]));
    }
    return ids;
  } finally {
    await m.dispose();
  }
}

describe('stage precision per provider', () => {
  test('fp16 for the GPU providers, fp32 on the CPU', () => {
    expect(stagePrecisionFor('cuda')).toBe('fp16');
    expect(stagePrecisionFor('dml')).toBe('fp16');
    expect(stagePrecisionFor('cpu')).toBe('fp32');
  });
});

describe('fp16 stage graph on the CPU provider', () => {
  test('stories260K: the fp16 graph\'s 40 greedy tokens equal the f32 graph\'s', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file, { maxPositions: 128 });
    // BOS alone, and BOS with a few fixed ids (both graphs see the same).
    for (const prompt of [[1, 403, 407, 261, 378], [1]]) {
      const f32 = await greedy(file, shape, 'fp32', prompt, 40);
      expect(new Set(f32).size).toBeGreaterThan(5); // a real continuation, not one repeated token
      expect(await greedy(file, shape, 'fp16', prompt, 40)).toEqual(f32);
      // Split in two fp16 stages (f32 between them; the second starts with the zero branch).
      expect(await greedy(file, shape, 'fp16', prompt, 40, [[0, 2], [2, shape.blockCount]])).toEqual(f32);
    }
  });

  describe('synthetic models: logits of the fp16 graph within the bound of the f32 graph', () => {
    let dir: string;
    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'kiwi-fp16-'));
    });
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true });
    });
    const llama = {
      name: 'tiny llama', architecture: 'llama', blockCount: 2, embeddingLength: 256, headCount: 4, headCountKv: 2,
      feedForwardLength: 512, vocabSize: 512, contextLength: 256, ropeFreqBase: 500000, tiedEmbeddings: true,
    };
    // fp16 carries 11 significant bits (relative 2^-11 ≈ 4.9e-4 per rounding). Measured max
    // |Δ logit| over 17 positions (prefill + 16 decode steps): 0.0010 (Q4_0), 0.0009 (F16), on
    // logits with a std of ~0.3. The bound is 5x that.
    const BOUND = 0.005;
    test.each([['Q4_0 (MatMulNBits)', GgmlType.Q4_0], ['F16 (MatMul)', GgmlType.F16]] as const)('%s', async (name, quant) => {
      const path = join(dir, `${name.replace(/\W+/g, '_')}.gguf`);
      await synthesizeModel({ shape: resolveShape(JSON.stringify(llama)), quant, out: path, seed: 7 });
      const file = await openGguf(path);
      const shape = await modelShapeFromGguf(file);
      const a = await wholeModel(file, shape, 'fp32');
      const b = await wholeModel(file, shape, 'fp16');
      try {
        const prompt = Array.from({ length: 24 }, (_, i) => 3 + ((i * 97) % 500));
        let worst = 0;
        // Prefill 8, then decode one at a time: both the prefill and the fp16 KV cache are compared.
        let la = await a.step(prompt.slice(0, 8));
        let lb = await b.step(prompt.slice(0, 8));
        for (let n = 8; ; n++) {
          for (let i = 0; i < la.length; i++) worst = Math.max(worst, Math.abs(la[i]! - lb[i]!));
          if (n === prompt.length) break;
          la = await a.step([prompt[n]!]);
          lb = await b.step([prompt[n]!]);
        }
        expect(worst).toBeGreaterThan(0); // it did run in fp16
        expect(worst).toBeLessThan(BOUND);
      } finally {
        await a.dispose();
        await b.dispose();
      }
    });
  });
});
