// `kiwi synth` argument handling and a JSON shape given as a file (the model itself is tested in
// engine/model/synth/synth.test.ts).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf } from '../engine/model/gguf/gguf-reader.js';
import { GgmlType } from '../engine/model/gguf/gguf-types.js';
import { runKiwi as kiwi } from './test-support/run-kiwi.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-synth-cmd-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('kiwi synth', () => {
  it('writes a model from a JSON shape file and reports it as JSON', async () => {
    const shapePath = join(dir, 'shape.json');
    await writeFile(
      shapePath,
      JSON.stringify({ name: 'file-shape', architecture: 'qwen2', blockCount: 1, embeddingLength: 64, headCount: 2, headCountKv: 1, feedForwardLength: 96, vocabSize: 300, contextLength: 128, qkvBias: true }),
    );
    const out = join(dir, 'm.gguf');
    const r = await kiwi(['synth', '--shape', shapePath, '--quant', 'F16', '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const f = await openGguf(out);
    expect(JSON.parse(r.stdout)).toMatchObject({ path: out, bytes: f.fileSize, shape: 'file-shape', quant: 'f16', seed: 0 });
    expect(f.tensor('blk.0.ffn_down.weight')).toMatchObject({ type: GgmlType.F16, dims: [96, 64] });
    expect(f.tensor('blk.0.attn_v.bias')).toMatchObject({ type: GgmlType.F32, dims: [32] });
  });

  it('writes the q4_k_m mix, which inspect counts and generate runs', async () => {
    const shape = JSON.stringify({ name: 'mix', architecture: 'llama', blockCount: 8, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 400, contextLength: 128, tiedEmbeddings: false });
    const out = join(dir, 'q4km.gguf');
    const r = await kiwi(['synth', '--shape', shape, '--quant', 'q4_k_m', '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ quant: 'q4_k_m' });
    // 8 layers: llama.cpp's Q4_K_M gives layers 0 and 7 (first and last eighth) and 3, 6 (every third between) Q6_K attn_v and ffn_down.
    const f = await openGguf(out);
    expect(f.metadata.get('general.file_type')).toBe(15);
    const six = f.tensors.filter((t) => t.type === GgmlType.Q6_K).map((t) => t.name);
    expect(six.sort()).toEqual(['blk.0.attn_v.weight', 'blk.0.ffn_down.weight', 'blk.3.attn_v.weight', 'blk.3.ffn_down.weight', 'blk.6.attn_v.weight', 'blk.6.ffn_down.weight', 'blk.7.attn_v.weight', 'blk.7.ffn_down.weight', 'output.weight']);
    const inspect = await kiwi(['inspect', out, '--json']);
    expect(inspect.code, inspect.stderr).toBe(0);
    // 7 matrices a block plus the embedding; the output and 8 block matrices are Q6_K.
    expect(JSON.parse(inspect.stdout).tensor_types).toMatchObject({ Q4_K: 8 * 7 + 1 - 8, Q6_K: 9 });
    const gen = await kiwi(['generate', '--model', out, '--prompt', 'hello', '--max-tokens', '4', '--threads', '1', '--no-shard-cache', '--json']);
    expect(gen.code, gen.stderr).toBe(0);
    expect(JSON.parse(gen.stdout).ids).toHaveLength(4);
  });

  it('refuses missing or bad options with a usage error', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['synth', '--out', join(dir, 'x.gguf')], /missing --shape/],
      [['synth', '--shape', 'llama-3.2-1b'], /missing --out/],
      [['synth', '--shape', 'llama-3.2-1b', '--quant', 'q3_k', '--out', join(dir, 'x.gguf')], /unknown --quant 'q3_k'/],
      [['synth', '--shape', 'llama-3.2-1b', '--seed', 'abc', '--out', join(dir, 'x.gguf')], /--seed must be an integer/],
      [['synth', '--shape', '{"name":', '--out', join(dir, 'x.gguf')], /not valid JSON/],
    ];
    for (const [args, pattern] of cases) {
      const r = await kiwi(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(pattern);
    }
  });
});
