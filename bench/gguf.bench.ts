// GGUF speed: reading a 4 MB vocabulary header, dequantizing and quantizing 1M weights of each
// type, and synthesizing a Qwen2.5-0.5B-shaped model to disk.
// Run: npx vitest bench --run bench/gguf.bench.ts  (prints tinybench's table; one-shot numbers in
// elements or bytes per second go to bench/results/gguf.json).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, bench, describe } from 'vitest';
import { dequantize } from '../electron/engine/model/gguf/dequantize.js';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { GgmlType, ggmlTypeName } from '../electron/engine/model/gguf/gguf-types.js';
import { QUANTIZABLE_TYPES, quantize } from '../electron/engine/model/gguf/quant/quantize.js';
import { NAMED_SHAPES } from '../electron/engine/model/synth/shapes.js';
import { Prng } from '../electron/engine/model/synth/prng.js';
import { synthesizeModel } from '../electron/engine/model/synth/synth.js';
import { testModelPath } from '../electron/engine/model/test-models.js';

const N = 1 << 20;
const rng = new Prng(1);
const weights = Float32Array.from({ length: N }, () => 0.02 * rng.nextNormal());
const encoded = new Map(QUANTIZABLE_TYPES.map((t) => [t, quantize(t, weights)]));
const oneShot: Record<string, unknown>[] = [];

function timeIt(name: string, units: number, unit: string, fn: () => void): void {
  const t0 = performance.now();
  fn();
  const s = (performance.now() - t0) / 1000;
  oneShot.push({ name, seconds: s, [`${unit}_per_s`]: units / s });
}

describe('GGUF header', () => {
  bench('openGguf deepseek-llm vocab (4 MB header, 100k tokens + merges)', async () => {
    await openGguf(await testModelPath('vocab/ggml-vocab-deepseek-llm.gguf'));
  });
});

describe('dequantize 1M elements', () => {
  for (const t of QUANTIZABLE_TYPES) {
    bench(ggmlTypeName(t), () => {
      dequantize(t, encoded.get(t)!, N);
    });
  }
});

describe('quantize 1M elements', () => {
  for (const t of QUANTIZABLE_TYPES.filter((x) => x !== GgmlType.F32)) {
    bench(ggmlTypeName(t), () => {
      quantize(t, weights);
    });
  }
});

afterAll(async () => {
  for (const t of QUANTIZABLE_TYPES) timeIt(`dequantize ${ggmlTypeName(t)}`, N, 'elements', () => dequantize(t, encoded.get(t)!, N));
  for (const t of QUANTIZABLE_TYPES) timeIt(`quantize ${ggmlTypeName(t)}`, N, 'elements', () => quantize(t, weights));
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-synth-'));
  try {
    const t0 = performance.now();
    const r = await synthesizeModel({ shape: NAMED_SHAPES['qwen2.5-0.5b']!, quant: GgmlType.Q8_0, out: join(dir, 'q.gguf'), seed: 1 });
    const s = (performance.now() - t0) / 1000;
    oneShot.push({ name: 'synth qwen2.5-0.5b q8_0', seconds: s, bytes: r.bytes, bytes_per_s: r.bytes / s });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  console.table(oneShot);
  const out = join(import.meta.dirname, 'results');
  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'gguf.json'), `${JSON.stringify({ date: new Date().toISOString(), node: process.version, oneShot }, null, 2)}\n`);
});
