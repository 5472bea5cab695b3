// `kiwi inspect` end to end (in-process through the CLI entry): on stories260K, whose facts are
// published in SOURCES.md, and on a synthesized model of the real Llama-3.2-1B shape.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../engine/model/test-models.js';
import type { ModelSummary } from '../engine/model/model-summary.js';
import { runKiwi as kiwi } from './test-support/run-kiwi.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-inspect-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('kiwi inspect', () => {
  it('reports the dims and byte layout of stories260K as one JSON line', async () => {
    const path = await testModelPath('stories260K.gguf');
    const r = await kiwi(['inspect', path, '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    const s = JSON.parse(r.stdout) as ModelSummary;
    expect(s).toMatchObject({
      architecture: 'llama',
      block_count: 5,
      embedding_length: 64,
      head_count: 8,
      head_count_kv: 4,
      head_dim: 8,
      feed_forward_length: 172,
      vocab_size: 512,
      context_length: 2048,
      tied_embeddings: false,
      tensor_count: 48,
      tensor_types: { F32: 48 },
      total_bytes: 1185376,
    });
    expect(s.rope).toMatchObject({ freq_base: 10000, dimension_count: 8, scaling_type: 'none' });
    // Per block: q 64x64, k and v 64x32, o 64x64, gate/up/down 64x172, two norms of 64; all f32.
    const block = 4 * (64 * 64 * 2 + 64 * 32 * 2 + 64 * 172 * 3 + 64 * 2);
    expect(s.bytes_per_block.per_block).toEqual([block, block, block, block, block]);
    expect(s.bytes_per_block).toMatchObject({ max: block, min: block, mean: block });
    expect(s.head_bytes).toEqual({ embedding: 64 * 512 * 4, output_norm: 64 * 4, output: 64 * 512 * 4, total: 64 * 512 * 8 + 256 });
    expect(s.tensor_bytes).toBe(5 * block + s.head_bytes.total);
    expect(s.tensor_bytes + 14176).toBe(s.total_bytes);
  });

  it('prints a readable table without --json', async () => {
    const r = await kiwi(['inspect', await testModelPath('stories260K.gguf')]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/heads \/ KV heads\s+8 \/ 4 \(head dim 8\)/);
    expect(r.stdout).toMatch(/tensors\s+48: F32 x48/);
  });

  it('fails with a clear message for a file that is not GGUF', async () => {
    const r = await kiwi(['inspect', await testModelPath('vocab/ggml-vocab-gpt-2.gguf.inp'), '--json']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { code: 'GGUF_INVALID' } });
    expect(r.stderr).toMatch(/wrong magic/);
  });

  it('says a vocabulary-only GGUF is not a model', async () => {
    const r = await kiwi(['inspect', await testModelPath('vocab/ggml-vocab-llama-spm.gguf')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no tensors: it is a vocabulary-only file/);
  });

  it('reports the real dims of a synthesized Llama-3.2-1B', async () => {
    const path = join(dir, 'llama-3.2-1b-q4_0.gguf');
    const synth = await kiwi(['synth', '--shape', 'llama-3.2-1b', '--quant', 'q4_0', '--out', path, '--seed', '3', '--json']);
    expect(synth.code, synth.stderr).toBe(0);
    expect(synth.stderr).toMatch(/100% of/);
    const r = await kiwi(['inspect', path, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout) as ModelSummary;
    expect(s).toMatchObject({
      architecture: 'llama',
      block_count: 16,
      embedding_length: 2048,
      head_count: 32,
      head_count_kv: 8,
      head_dim: 64,
      feed_forward_length: 8192,
      vocab_size: 128256,
      context_length: 131072,
      tied_embeddings: true,
      qkv_bias: false,
      tensor_types: { Q4_0: 1 + 16 * 7, F32: 1 + 16 * 2 + 1 },
    });
    expect(s.rope).toMatchObject({ freq_base: 500000, dimension_count: 64, freq_factors_tensor: 'rope_freqs.weight' });
    // One block: q and o 2048x2048, k and v 2048x512, gate/up/down 2048x8192 in Q4_0 (18 bytes per 32), two f32 norms.
    const q40 = (n: number): number => (n / 32) * 18;
    const block = q40(2048 * 2048 * 2 + 2048 * 512 * 2 + 2048 * 8192 * 3) + 2 * 2048 * 4;
    expect(s.bytes_per_block.max).toBe(block);
    expect(s.head_bytes).toMatchObject({ embedding: q40(2048 * 128256), output_norm: 2048 * 4, output: 0 });
    expect(s.other_bytes).toBe(32 * 4);
    expect(JSON.parse(synth.stdout)).toMatchObject({ bytes: s.total_bytes, parameters: 1235814400 + 32 });
    await rm(path);
  });
});
