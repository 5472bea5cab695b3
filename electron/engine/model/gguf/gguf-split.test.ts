// Models split by llama.cpp's gguf-split (name-0000k-of-0000n.gguf): openGguf on the first file
// merges the tensor index of all files and tensor reads go to the right file. The split files are
// made here from a synthesized model and llama.cpp loads them to the same probabilities.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LlamaLogLevel, getLlama } from 'node-llama-cpp';
import type { Llama, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveShape } from '../synth/shapes.js';
import { synthesizeModel } from '../synth/synth.js';
import { summarizeModel } from '../model-summary.js';
import { openGguf, openTensorReader, readTensorBytes } from './gguf-reader.js';
import type { GgufFile } from './gguf-reader.js';
import { GgmlType } from './gguf-types.js';
import { createGgufWriter, gv, writableMetadata } from './gguf-writer.js';
import type { GgufWriteValue } from './gguf-writer.js';

let dir: string;
let single: GgufFile;
let llama: Llama;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-gguf-split-'));
  const shape = resolveShape(
    JSON.stringify({ name: 'split-me', architecture: 'llama', blockCount: 3, embeddingLength: 128, headCount: 4, headCountKv: 2, feedForwardLength: 256, vocabSize: 600, contextLength: 128 }),
  );
  await synthesizeModel({ shape, quant: GgmlType.Q8_0, out: join(dir, 'single.gguf'), seed: 5 });
  single = await openGguf(join(dir, 'single.gguf'));
  llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
});
afterAll(async () => {
  await llama?.dispose();
  await rm(dir, { recursive: true, force: true });
});

/** Writes `single` as `parts` files the way gguf-split does: metadata in the first, split keys in all. */
async function split(name: string, parts: number, opts: { skipLast?: boolean } = {}): Promise<string[]> {
  const per = Math.ceil(single.tensors.length / parts);
  const paths: string[] = [];
  const reader = await openTensorReader(single);
  try {
    for (let i = 0; i < parts; i++) {
      const path = join(dir, `${name}-${String(i + 1).padStart(5, '0')}-of-${String(parts).padStart(5, '0')}.gguf`);
      paths.push(path);
      if (opts.skipLast === true && i === parts - 1) break;
      const tensors = single.tensors.slice(i * per, (i + 1) * per);
      const splitKeys: Array<[string, GgufWriteValue]> = [
        ['split.no', gv.u16(i)],
        ['split.count', gv.u16(parts)],
        ['split.tensors.count', gv.i32(single.tensors.length)],
      ];
      const metadata = i === 0 ? [...writableMetadata(single), ...splitKeys] : splitKeys;
      const w = await createGgufWriter(path, { metadata, tensors });
      for (const t of tensors) await w.write(await reader.read(t));
      await w.finish();
    }
  } finally {
    await reader.close();
  }
  return paths;
}

async function probabilities(path: string): Promise<Map<Token, number>> {
  const model = await llama.loadModel({ modelPath: path });
  try {
    const context = await model.createContext({ contextSize: 32, threads: 1 });
    try {
      const out = await context.getSequence().controlledEvaluate([
        1 as Token,
        [5 as Token, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }],
      ]);
      return out[1]!.next!.probabilities!;
    } finally {
      await context.dispose();
    }
  } finally {
    await model.dispose();
  }
}

describe('split GGUF models', () => {
  it('merges the tensor index of all files and reads each tensor from its own file', async () => {
    const paths = await split('model', 3);
    const f = await openGguf(paths[0]!);
    expect(f.tensors.map((t) => t.name)).toEqual(single.tensors.map((t) => t.name));
    expect(f.splits?.map((s) => s.path)).toEqual(paths);
    expect(f.tensor('output.weight')?.path).toBe(paths[2]);
    expect(f.tensor('token_embd.weight')?.path).toBeUndefined();
    for (const name of ['token_embd.weight', 'blk.1.ffn_up.weight', 'output.weight']) {
      const got = await readTensorBytes(f, f.tensor(name)!);
      expect(got.equals(await readTensorBytes(single, single.tensor(name)!)), name).toBe(true);
    }
    const summary = summarizeModel(f);
    expect(summary.file_count).toBe(3);
    expect(summary.total_bytes).toBeGreaterThan(single.fileSize);
    expect(summary.tensor_bytes).toBe(summarizeModel(single).tensor_bytes);
  });

  it('is loaded by llama.cpp to the same next-token probabilities as the single file', async () => {
    const paths = await split('llama', 2);
    const a = await probabilities(join(dir, 'single.gguf'));
    const b = await probabilities(paths[0]!);
    expect([...b.entries()]).toEqual([...a.entries()]);
  });

  it('refuses a later split and names the first one', async () => {
    const paths = await split('later', 2);
    await expect(openGguf(paths[1]!)).rejects.toMatchObject({ code: 'GGUF_UNSUPPORTED', message: expect.stringMatching(/later-00001-of-00002\.gguf/) });
  });

  it('refuses a split model with a missing file', async () => {
    const paths = await split('missing', 3, { skipLast: true });
    await expect(openGguf(paths[0]!)).rejects.toMatchObject({ code: 'FILE_NOT_FOUND', message: expect.stringMatching(/missing-00003-of-00003/) });
  });
});
