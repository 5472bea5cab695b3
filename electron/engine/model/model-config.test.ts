// Model config from GGUF metadata (defaults, rope, GQA, qkv bias, q/k norm) and the typed metadata
// accessors, with the errors for other architectures and inconsistent files.
import { describe, expect, it } from 'vitest';
import { KiwiError } from '../errors.js';
import { openGguf, parseGguf } from './gguf/gguf-reader.js';
import { GgmlType } from './gguf/gguf-types.js';
import { buildGguf, gv } from './gguf/gguf-writer.js';
import type { GgufTensorSpec, GgufWriteValue } from './gguf/gguf-writer.js';
import { tensorByteLength } from './gguf/gguf-types.js';
import {
  metaFloat32Array,
  metaInt32Array,
  metaNumber,
  metaString,
  metaStringArray,
  requireBoolean,
  requireString,
} from './gguf/gguf-metadata.js';
import { modelConfigFromGguf } from './model-config.js';
import { testModelPath } from './test-models.js';

function model(arch: string, extra: Array<[string, GgufWriteValue]>, tensors: GgufTensorSpec[]): Uint8Array {
  const metadata: Array<[string, GgufWriteValue]> = [
    ['general.architecture', arch],
    [`${arch}.block_count`, gv.u32(1)],
    [`${arch}.embedding_length`, gv.u32(64)],
    [`${arch}.attention.head_count`, gv.u32(4)],
    [`${arch}.feed_forward_length`, gv.u32(128)],
    [`${arch}.context_length`, gv.u32(512)],
    ...extra,
  ];
  return buildGguf({ metadata, tensors }, tensors.map((t) => new Uint8Array(tensorByteLength(t.type, t.dims))));
}

const EMBD: GgufTensorSpec = { name: 'token_embd.weight', type: GgmlType.F16, dims: [64, 300] };

describe('modelConfigFromGguf', () => {
  it('reads stories260K: llama, 5 blocks, GQA 8/4, untied', async () => {
    const c = modelConfigFromGguf(await openGguf(await testModelPath('stories260K.gguf')));
    expect(c).toEqual({
      architecture: 'llama',
      name: 'llama',
      blockCount: 5,
      embeddingLength: 64,
      headCount: 8,
      headCountKv: 4,
      headDim: 8,
      valueHeadDim: 8,
      feedForwardLength: 172,
      vocabSize: 512,
      contextLength: 2048,
      rmsEps: Math.fround(1e-5),
      rope: { freqBase: 10000, dimensionCount: 8, scalingType: 'none', scalingFactor: 1 },
      tiedEmbeddings: false,
      qkvBias: false,
      qkNorm: false,
    });
  });

  it('applies the defaults: KV heads = heads, head dim = embd / heads, rope base 10000', () => {
    const c = modelConfigFromGguf(parseGguf(model('mistral', [], [EMBD])));
    expect(c).toMatchObject({ headCountKv: 4, headDim: 16, vocabSize: 300, rmsEps: 1e-5, tiedEmbeddings: true });
    expect(c.rope).toEqual({ freqBase: 10000, dimensionCount: 16, scalingType: 'none', scalingFactor: 1 });
  });

  it('reads rope scaling, key length, qkv bias and q/k norm', () => {
    const c = modelConfigFromGguf(
      parseGguf(
        model(
          'qwen3',
          [
            ['qwen3.attention.head_count_kv', gv.u32(2)],
            ['qwen3.attention.key_length', gv.u32(32)],
            ['qwen3.rope.freq_base', gv.f32(1e6)],
            ['qwen3.rope.scaling.type', 'yarn'],
            ['qwen3.rope.scaling.factor', gv.f32(4)],
            ['qwen3.rope.scaling.original_context_length', gv.u32(32768)],
          ],
          [
            EMBD,
            { name: 'blk.0.attn_q.weight', type: GgmlType.F32, dims: [64, 128] },
            { name: 'blk.0.attn_k.weight', type: GgmlType.F32, dims: [64, 64] },
            { name: 'blk.0.attn_q.bias', type: GgmlType.F32, dims: [128] },
            { name: 'blk.0.attn_q_norm.weight', type: GgmlType.F32, dims: [32] },
            { name: 'output.weight', type: GgmlType.F16, dims: [64, 300] },
            { name: 'rope_freqs.weight', type: GgmlType.F32, dims: [16] },
          ],
        ),
      ),
    );
    expect(c).toMatchObject({ headCountKv: 2, headDim: 32, qkvBias: true, qkNorm: true, tiedEmbeddings: false });
    expect(c.rope).toEqual({
      freqBase: 1e6,
      dimensionCount: 32,
      scalingType: 'yarn',
      scalingFactor: 4,
      originalContextLength: 32768,
      freqFactorsTensor: 'rope_freqs.weight',
    });
  });

  it('refuses an architecture outside the Llama family, naming it', () => {
    expect(() => modelConfigFromGguf(parseGguf(model('gemma3', [], [EMBD])))).toThrow(
      expect.objectContaining({ code: 'MODEL_UNSUPPORTED', message: expect.stringMatching(/'gemma3'/) }),
    );
    expect(modelConfigFromGguf(parseGguf(model('gemma3', [], [EMBD])), { anyArchitecture: true }).architecture).toBe('gemma3');
  });

  it('refuses inconsistent shapes and missing keys with GGUF_INVALID', () => {
    const cases: Array<[Uint8Array, RegExp]> = [
      [model('llama', [['llama.attention.head_count_kv', gv.u32(3)]], [EMBD]), /cannot be grouped/],
      [model('llama', [], [{ ...EMBD, dims: [32, 300] }]), /token_embd.weight has shape \[32, 300\]/],
      [model('llama', [], []), /no 'token_embd.weight'/],
      [model('llama', [['llama.vocab_size', gv.u32(301)]], [EMBD]), /expected \[64, 301\]/],
      [buildGguf({ metadata: [['general.architecture', 'llama']], tensors: [] }, []), /'llama.block_count' is missing/],
      [model('llama', [['llama.attention.layer_norm_rms_epsilon', 'tiny']], [EMBD]), /must be a number, but it is a string/],
    ];
    for (const [bytes, pattern] of cases) {
      let err: unknown;
      try {
        modelConfigFromGguf(parseGguf(bytes));
      } catch (e) {
        err = e;
      }
      expect(err, String(pattern)).toBeInstanceOf(KiwiError);
      expect((err as KiwiError).code).toBe('GGUF_INVALID');
      expect((err as KiwiError).message).toMatch(pattern);
    }
  });
});

describe('typed metadata accessors', () => {
  const m = parseGguf(
    buildGguf(
      {
        metadata: [
          ['s', 'text'],
          ['n', gv.u16(7)],
          ['b', true],
          ['ss', ['a', 'b']],
          ['f', Float32Array.of(0.5)],
          ['i', Int32Array.of(-3)],
          ['u8s', Uint8Array.of(1, 2)],
        ],
        tensors: [],
      },
      [],
    ),
  ).metadata;

  it('return values of the expected type and undefined for missing keys', () => {
    expect(metaString(m, 's')).toBe('text');
    expect(metaNumber(m, 'n')).toBe(7);
    expect(requireBoolean(m, 'b')).toBe(true);
    expect(metaStringArray(m, 'ss')).toEqual(['a', 'b']);
    expect(metaFloat32Array(m, 'f')).toEqual(Float32Array.of(0.5));
    expect(metaInt32Array(m, 'i')).toEqual(Int32Array.of(-3));
    expect(metaInt32Array(m, 'u8s')).toEqual(Int32Array.of(1, 2));
    expect(metaString(m, 'missing')).toBeUndefined();
  });

  it('throw GGUF_INVALID naming the key on a wrong type or a missing required key', () => {
    expect(() => metaString(m, 'n')).toThrow("metadata key 'n' must be a string, but it is a number (7)");
    expect(() => metaStringArray(m, 'f')).toThrow(/'f' must be an array of strings/);
    expect(() => metaFloat32Array(m, 'i')).toThrow(/'i' must be an array of f32/);
    expect(() => requireString(m, 'nope')).toThrow(expect.objectContaining({ code: 'GGUF_INVALID', message: expect.stringMatching(/'nope' is missing/) }));
  });
});
