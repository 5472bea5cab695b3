// Synthesized models are real GGUFs: our reader sees the shape that was asked for, llama.cpp (through
// node-llama-cpp) loads them, tokenizes with their vocabulary and evaluates tokens to finite
// probabilities, and the same seed gives the same bytes.
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LlamaLogLevel, getLlama } from 'node-llama-cpp';
import type { ControlledEvaluateInputItem, Llama, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf, readTensorBytes } from '../gguf/gguf-reader.js';
import { dequantize } from '../gguf/dequantize.js';
import { GgmlType, ggmlTypeName } from '../gguf/gguf-types.js';
import { modelConfigFromGguf } from '../model-config.js';
import { NAMED_SHAPES, resolveShape } from './shapes.js';
import type { ModelShape } from './shapes.js';
import type { SynthQuant } from './synth.js';
import { SYNTH_QUANTS, llama3RopeFactors, planTensors, q4kmMoreBits, synthesizeModel } from './synth.js';

const TINY = {
  name: 'tiny-llama',
  architecture: 'llama',
  blockCount: 2,
  embeddingLength: 256,
  headCount: 4,
  headCountKv: 2,
  feedForwardLength: 512,
  vocabSize: 1000,
  contextLength: 256,
  ropeFreqBase: 500000,
  ropeScaling: { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 },
  tiedEmbeddings: true,
};

let dir: string;
let llama: Llama;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-synth-'));
  llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
});
afterAll(async () => {
  await llama?.dispose();
  await rm(dir, { recursive: true, force: true });
});

async function synth(shape: ModelShape, quant: SynthQuant, name: string, seed = 1): Promise<string> {
  const out = join(dir, name);
  await synthesizeModel({ shape, quant, out, seed });
  return out;
}

/** Loads in llama.cpp, tokenizes, evaluates, and returns the ids, their detokenization and the next-token probability sum. */
async function runInLlamaCpp(path: string): Promise<{ ids: number[]; text: string; probabilitySum: number }> {
  const model = await llama.loadModel({ modelPath: path });
  try {
    const context = await model.createContext({ contextSize: 64, threads: 1 });
    try {
      const tokens = model.tokenize('hello world, synth!', false);
      const input: ControlledEvaluateInputItem[] = [1 as Token, ...tokens];
      input[input.length - 1] = [tokens[tokens.length - 1]!, { generateNext: { probabilities: true } }];
      const out = await context.getSequence().controlledEvaluate(input);
      const probs = out[input.length - 1]?.next?.probabilities;
      expect(probs?.size).toBe(1000);
      let sum = 0;
      for (const p of probs?.values() ?? []) {
        expect(Number.isFinite(p)).toBe(true);
        sum += p;
      }
      return { ids: tokens.map(Number), text: model.detokenize(tokens), probabilitySum: sum };
    } finally {
      await context.dispose();
    }
  } finally {
    await model.dispose();
  }
}

describe('synthesizeModel', () => {
  it('writes the tensors of the shape that our reader and model config read back', async () => {
    const shape = resolveShape(JSON.stringify({ ...TINY, tiedEmbeddings: false, qkvBias: true }));
    const path = await synth(shape, GgmlType.Q8_0, 'config.gguf');
    const f = await openGguf(path);
    const c = modelConfigFromGguf(f);
    expect(c).toMatchObject({
      architecture: 'llama',
      blockCount: 2,
      embeddingLength: 256,
      headCount: 4,
      headCountKv: 2,
      headDim: 64,
      feedForwardLength: 512,
      vocabSize: 1000,
      contextLength: 256,
      tiedEmbeddings: false,
      qkvBias: true,
      qkNorm: false,
    });
    expect(c.rope).toMatchObject({ freqBase: 500000, dimensionCount: 64, freqFactorsTensor: 'rope_freqs.weight' });
    expect(f.tensors.map((t) => t.name)).toEqual(planTensors(shape, GgmlType.Q8_0).map((t) => t.name));
    const freqs = dequantize(GgmlType.F32, await readTensorBytes(f, f.tensor('rope_freqs.weight')!), 32);
    expect(Array.from(freqs)).toEqual(Array.from(llama3RopeFactors(shape)));
    const norm = dequantize(GgmlType.F32, await readTensorBytes(f, f.tensor('blk.1.ffn_norm.weight')!), 256);
    expect(norm.every((v) => v > 0.9 && v < 1.1)).toBe(true);
    const w = dequantize(GgmlType.Q8_0, await readTensorBytes(f, f.tensor('blk.0.ffn_up.weight')!), 256 * 512);
    const std = Math.sqrt(w.reduce((a, v) => a + v * v, 0) / w.length);
    expect(std).toBeGreaterThan(0.015);
    expect(std).toBeLessThan(0.025);
  });

  it('gives the same bytes for the same seed and different bytes for another seed', async () => {
    const shape = resolveShape(JSON.stringify(TINY));
    const hash = async (p: string): Promise<string> => createHash('sha256').update(await readFile(p)).digest('hex');
    const a = await hash(await synth(shape, GgmlType.Q4_0, 'a.gguf', 7));
    const b = await hash(await synth(shape, GgmlType.Q4_0, 'b.gguf', 7));
    const c = await hash(await synth(shape, GgmlType.Q4_0, 'c.gguf', 8));
    expect(a).toBe(b);
    expect(c).not.toBe(a);
  });

  it('refuses an inconsistent JSON shape with a message naming the field', () => {
    expect(() => resolveShape(JSON.stringify({ ...TINY, headCountKv: 3 }))).toThrow(/headCountKv 3/);
    expect(() => resolveShape('{"name":"x"}')).toThrow(/architecture/);
    expect(() => resolveShape('no-such-shape')).toThrow(/llama-3.2-1b/);
  });
});

describe('synthesized models in llama.cpp', () => {
  for (const [quantName, quant] of Object.entries(SYNTH_QUANTS)) {
    it(`loads, tokenizes and evaluates a tiny ${quantName} llama`, async () => {
      const path = await synth(resolveShape(JSON.stringify(TINY)), quant, `tiny-${quantName}.gguf`);
      const f = await openGguf(path);
      const attnQ = quant === 'q4_k_m' ? GgmlType.Q4_K : quant;
      expect(f.tensor('blk.0.attn_q.weight')?.type, ggmlTypeName(attnQ)).toBe(attnQ);
      const r = await runInLlamaCpp(path);
      expect(r.ids.length).toBeGreaterThan(0);
      expect(r.ids.every((id) => id > 2 && id < 1000)).toBe(true);
      expect(r.text.trim()).toBe('hello world, synth!');
      expect(r.probabilitySum).toBeGreaterThan(0.99);
      expect(r.probabilitySum).toBeLessThan(1.01);
    });
  }

  it('loads and evaluates tiny qwen2 (qkv bias, tied) and qwen3 (q/k norm, wider heads) shapes', async () => {
    const qwen2 = resolveShape(
      JSON.stringify({ ...TINY, name: 'tiny-qwen2', architecture: 'qwen2', embeddingLength: 128, headCount: 2, ropeScaling: undefined, qkvBias: true, rmsEps: 1e-6 }),
    );
    const qwen3 = resolveShape(
      JSON.stringify({ ...TINY, name: 'tiny-qwen3', architecture: 'qwen3', embeddingLength: 128, headCount: 4, headDim: 64, ropeScaling: undefined, qkNorm: true }),
    );
    for (const [shape, file] of [
      [qwen2, 'qwen2.gguf'],
      [qwen3, 'qwen3.gguf'],
    ] as const) {
      const path = await synth(shape, GgmlType.Q8_0, file);
      const c = modelConfigFromGguf(await openGguf(path));
      expect(c.architecture).toBe(shape.architecture);
      expect(c.qkvBias).toBe(shape.qkvBias);
      expect(c.qkNorm).toBe(shape.qkNorm);
      expect(c.headDim).toBe(shape.headDim ?? 64);
      const r = await runInLlamaCpp(path);
      expect(r.probabilitySum).toBeGreaterThan(0.99);
    }
  });

  it('plans the real dims of every named shape', () => {
    const b = NAMED_SHAPES['llama-3.1-8b']!;
    const t = planTensors(b, GgmlType.Q4_0);
    expect(t.find((x) => x.name === 'blk.31.attn_k.weight')?.dims).toEqual([4096, 1024]);
    expect(t.find((x) => x.name === 'output.weight')?.dims).toEqual([4096, 128256]);
    const q = planTensors(NAMED_SHAPES['qwen2.5-0.5b']!, GgmlType.Q4_K);
    expect(q.find((x) => x.name === 'blk.0.attn_k.bias')?.dims).toEqual([128]);
    // 896 is not a whole number of 256-element k-quant blocks: those rows fall back to Q4_0.
    expect(q.find((x) => x.name === 'blk.0.attn_q.weight')?.type).toBe(GgmlType.Q4_0);
    expect(q.find((x) => x.name === 'blk.0.ffn_down.weight')?.type).toBe(GgmlType.Q4_K);
    expect(q.some((x) => x.name === 'output.weight')).toBe(false);
  });

  it('gives the output projection the head type asked for (the tied embedding where there is no output)', () => {
    const untied = planTensors(NAMED_SHAPES['llama-3.1-8b']!, GgmlType.Q4_0, GgmlType.Q6_K);
    expect(untied.find((x) => x.name === 'output.weight')?.type).toBe(GgmlType.Q6_K);
    expect(untied.find((x) => x.name === 'token_embd.weight')?.type).toBe(GgmlType.Q4_0);
    expect(untied.find((x) => x.name === 'blk.0.ffn_up.weight')?.type).toBe(GgmlType.Q4_0);
    const tied = planTensors(NAMED_SHAPES['llama-3.2-1b']!, GgmlType.Q4_0, GgmlType.Q8_0);
    expect(tied.find((x) => x.name === 'token_embd.weight')?.type).toBe(GgmlType.Q8_0);
  });
});

describe('q4_k_m (llama.cpp Q4_K_M mix)', () => {
  // The layers llama.cpp's use_more_bits picks, written out by hand from its rule
  // (i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2) for the named shapes' layer counts.
  const SIX_BIT_LAYERS: Record<number, number[]> = {
    2: [1],
    16: [0, 1, 4, 7, 10, 13, 14, 15],
    32: [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31],
  };

  it('picks the six-bit layers as llama.cpp does', () => {
    for (const [n, layers] of Object.entries(SIX_BIT_LAYERS)) {
      const picked = Array.from({ length: Number(n) }, (_, i) => i).filter((i) => q4kmMoreBits(i, Number(n)));
      expect(picked, `${n} layers`).toEqual(layers);
    }
  });

  it('gives Q6_K to the output, attn_v and ffn_down of the six-bit layers, Q4_K elsewhere', () => {
    // Llama-3.1-8B: untied embeddings, every row a whole number of 256-blocks.
    const t = planTensors(NAMED_SHAPES['llama-3.1-8b']!, 'q4_k_m');
    const type = (name: string) => t.find((x) => x.name === name)?.type;
    expect(type('output.weight')).toBe(GgmlType.Q6_K);
    expect(type('token_embd.weight')).toBe(GgmlType.Q4_K);
    for (let i = 0; i < 32; i++) {
      const six = SIX_BIT_LAYERS[32]!.includes(i) ? GgmlType.Q6_K : GgmlType.Q4_K;
      expect(type(`blk.${String(i)}.attn_v.weight`), `attn_v ${String(i)}`).toBe(six);
      expect(type(`blk.${String(i)}.ffn_down.weight`), `ffn_down ${String(i)}`).toBe(six);
      for (const m of ['attn_q', 'attn_k', 'attn_output', 'ffn_gate', 'ffn_up']) expect(type(`blk.${String(i)}.${m}.weight`)).toBe(GgmlType.Q4_K);
      expect(type(`blk.${String(i)}.attn_norm.weight`)).toBe(GgmlType.F32);
    }
    // Llama-3.2-1B ties the embedding to the output: it is quantized as the output.
    const tied = planTensors(NAMED_SHAPES['llama-3.2-1b']!, 'q4_k_m');
    expect(tied.find((x) => x.name === 'token_embd.weight')?.type).toBe(GgmlType.Q6_K);
    expect(tied.filter((x) => x.type === GgmlType.Q6_K).length).toBe(1 + 2 * SIX_BIT_LAYERS[16]!.length);
    // Qwen2.5-0.5B: 896-wide rows are no whole 256-blocks; the tied output falls to Q8_0 as in llama.cpp.
    const qwen = planTensors(NAMED_SHAPES['qwen2.5-0.5b']!, 'q4_k_m');
    expect(qwen.find((x) => x.name === 'token_embd.weight')?.type).toBe(GgmlType.Q8_0);
  });

  it('writes general.file_type MOSTLY_Q4_K_M and the mix', async () => {
    const path = await synth(resolveShape(JSON.stringify(TINY)), 'q4_k_m', 'mix.gguf', 3);
    const file = await openGguf(path);
    expect(file.metadata.get('general.file_type')).toBe(15);
    expect(file.tensor('token_embd.weight')?.type).toBe(GgmlType.Q6_K);
    expect(file.tensor('blk.0.attn_v.weight')?.type).toBe(GgmlType.Q4_K);
    expect(file.tensor('blk.1.attn_v.weight')?.type).toBe(GgmlType.Q6_K);
    expect(file.tensor('blk.0.ffn_down.weight')?.type).toBe(GgmlType.Q4_K);
    expect(file.tensor('blk.1.ffn_down.weight')?.type).toBe(GgmlType.Q6_K);
  });
});
