// Cross-checks the dequantizers (and quantizers) against llama.cpp itself: a one-block llama whose
// blocks are all zero passes the embedding of the input token straight to the head, so llama.cpp's
// next-token probabilities are softmax(output.weight · rmsnorm(x)), which we compute from our own
// dequantization of output.weight. The input row is ±1, which every activation format holds
// exactly, so llama.cpp's activation quantization does not blur the comparison. Types we can
// quantize are checked on quantized normal weights, the others on random blocks.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LlamaLogLevel, getLlama } from 'node-llama-cpp';
import type { Llama, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Prng } from '../synth/prng.js';
import { synthVocab } from '../synth/synth-vocab.js';
import { dequantize } from './dequantize.js';
import { GgmlType, ggmlTypeInfo, ggmlTypeName } from './gguf-types.js';
import { buildGguf, gv } from './gguf-writer.js';
import type { GgufTensorSpec } from './gguf-writer.js';
import { f32ToF16Bits } from './quant/half.js';
import { quantize } from './quant/quantize.js';

const EMBD = 256;
const VOCAB = 400;
const FFN = 256;

let dir: string;
let llama: Llama;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-dequant-'));
  llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
});
afterAll(async () => {
  await llama?.dispose();
  await rm(dir, { recursive: true, force: true });
});

function headOnlyModel(outputType: GgmlType, output: Uint8Array, embd: Float32Array): Uint8Array {
  const v = synthVocab(VOCAB);
  const zeros = (n: number): Uint8Array => new Uint8Array(n * 4);
  const f32 = (name: string, dims: number[]): GgufTensorSpec => ({ name, type: GgmlType.F32, dims });
  const tensors: GgufTensorSpec[] = [
    f32('token_embd.weight', [EMBD, VOCAB]),
    f32('blk.0.attn_norm.weight', [EMBD]),
    f32('blk.0.attn_q.weight', [EMBD, EMBD]),
    f32('blk.0.attn_k.weight', [EMBD, EMBD]),
    f32('blk.0.attn_v.weight', [EMBD, EMBD]),
    f32('blk.0.attn_output.weight', [EMBD, EMBD]),
    f32('blk.0.ffn_norm.weight', [EMBD]),
    f32('blk.0.ffn_gate.weight', [EMBD, FFN]),
    f32('blk.0.ffn_down.weight', [FFN, EMBD]),
    f32('blk.0.ffn_up.weight', [EMBD, FFN]),
    f32('output_norm.weight', [EMBD]),
    { name: 'output.weight', type: outputType, dims: [EMBD, VOCAB] },
  ];
  const ones = new Uint8Array(Float32Array.from({ length: EMBD }, () => 1).buffer);
  const data = [
    new Uint8Array(embd.buffer),
    ones,
    zeros(EMBD * EMBD),
    zeros(EMBD * EMBD),
    zeros(EMBD * EMBD),
    zeros(EMBD * EMBD),
    ones,
    zeros(EMBD * FFN),
    zeros(EMBD * FFN),
    zeros(EMBD * FFN),
    ones,
    output,
  ];
  return buildGguf(
    {
      metadata: [
        ['general.architecture', 'llama'],
        ['llama.context_length', gv.u32(64)],
        ['llama.embedding_length', gv.u32(EMBD)],
        ['llama.block_count', gv.u32(1)],
        ['llama.feed_forward_length', gv.u32(FFN)],
        ['llama.attention.head_count', gv.u32(4)],
        ['llama.attention.head_count_kv', gv.u32(4)],
        ['llama.attention.layer_norm_rms_epsilon', gv.f32(1e-6)],
        ['tokenizer.ggml.model', 'llama'],
        ['tokenizer.ggml.tokens', v.tokens],
        ['tokenizer.ggml.scores', v.scores],
        ['tokenizer.ggml.token_type', v.types],
        ['tokenizer.ggml.bos_token_id', gv.u32(1)],
        ['tokenizer.ggml.eos_token_id', gv.u32(2)],
      ],
      tensors,
    },
    data,
  );
}

// Byte offsets of the f16 scale fields (d, dmin) inside one block, for types tested with random blocks.
const SCALE_FIELDS: Partial<Record<GgmlType, number[]>> = {
  [GgmlType.Q4_1]: [0, 2],
  [GgmlType.Q5_0]: [0],
  [GgmlType.Q5_1]: [0, 2],
  [GgmlType.Q2_K]: [80, 82],
  [GgmlType.Q3_K]: [108],
  [GgmlType.Q5_K]: [0, 2],
  [GgmlType.IQ4_NL]: [0],
  [GgmlType.IQ4_XS]: [0],
};

/** Random blocks of `type` whose f16 scales are set so the weights have a std of about 0.15. */
function randomBlocks(type: GgmlType, rng: Prng): Uint8Array {
  const { blockSize, typeSize } = ggmlTypeInfo(type);
  const nb = (EMBD * VOCAB) / blockSize;
  const bytes = Uint8Array.from({ length: nb * typeSize }, () => rng.nextU32() & 0xff);
  const setScales = (value: number): void => {
    const dv = new DataView(bytes.buffer);
    for (let b = 0; b < nb; b++) for (const f of SCALE_FIELDS[type]!) dv.setUint16(b * typeSize + f, f32ToF16Bits(value), true);
  };
  setScales(1);
  const w = dequantize(type, bytes, EMBD * VOCAB);
  const std = Math.sqrt(w.reduce((a, v) => a + v * v, 0) / w.length);
  setScales(0.15 / std);
  return bytes;
}

describe('dequantize agrees with llama.cpp', () => {
  const quantized = [GgmlType.F16, GgmlType.BF16, GgmlType.Q8_0, GgmlType.Q4_0, GgmlType.Q4_K, GgmlType.Q6_K];
  const random = Object.keys(SCALE_FIELDS).map(Number) as GgmlType[];
  for (const type of [...quantized, ...random]) {
    const how = quantized.includes(type) ? 'quantized' : 'random';
    it(`gives the next-token probabilities llama.cpp computes from a ${how} ${ggmlTypeName(type)} output matrix`, async () => {
      const rng = new Prng(type + 100);
      const embd = Float32Array.from({ length: EMBD * VOCAB }, () => rng.nextNormal());
      for (let i = 0; i < EMBD; i++) embd[EMBD + i] = rng.nextFloat() < 0.5 ? -1 : 1; // row of token 1
      const bytes =
        how === 'quantized'
          ? quantize(type, Float32Array.from({ length: EMBD * VOCAB }, () => 0.15 * rng.nextNormal()))
          : randomBlocks(type, rng);
      const path = join(dir, `head-${ggmlTypeName(type)}.gguf`);
      await writeFile(path, headOnlyModel(type, bytes, embd));

      // Ours: logits = W · (x / rms(x)), x = ±1 so rms = sqrt(1 + eps).
      const w = dequantize(type, bytes, EMBD * VOCAB);
      const scale = 1 / Math.sqrt(1 + 1e-6);
      const logits = new Float64Array(VOCAB);
      for (let j = 0; j < VOCAB; j++) {
        let s = 0;
        for (let i = 0; i < EMBD; i++) s += w[j * EMBD + i]! * embd[EMBD + i]! * scale;
        logits[j] = s;
      }
      const max = Math.max(...logits);
      const exp = logits.map((l) => Math.exp(l - max));
      const total = exp.reduce((a, b) => a + b, 0);

      const model = await llama.loadModel({ modelPath: path });
      try {
        const context = await model.createContext({ contextSize: 32, threads: 1 });
        try {
          const out = await context.getSequence().controlledEvaluate([
            [1 as Token, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }],
          ]);
          const probs = out[0]?.next?.probabilities;
          expect(probs?.size).toBe(VOCAB);
          let worst = 0;
          for (let j = 0; j < VOCAB; j++) {
            const ours = exp[j]! / total;
            const theirs = probs!.get(j as Token) ?? 0;
            worst = Math.max(worst, Math.abs(ours - theirs) / (1e-4 + ours));
          }
          expect(worst).toBeLessThan(0.005);
        } finally {
          await context.dispose();
        }
      } finally {
        await model.dispose();
      }
    });
  }
});
