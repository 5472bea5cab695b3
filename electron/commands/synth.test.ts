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
