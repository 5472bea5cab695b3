// A tiny random-weight llama for runtime tests (model/synth): written to a temp folder, opened, its
// decoder shape read. The default shape has 5 blocks of width 256 (fast to open, big enough for
// 4-bit blocks and grouped-query attention); a test overrides what it needs.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openGguf, type GgufFile } from '../../model/gguf/gguf-reader.js';
import { GgmlType } from '../../model/gguf/gguf-types.js';
import { resolveShape } from '../../model/synth/shapes.js';
import { synthesizeModel } from '../../model/synth/synth.js';
import { modelShapeFromGguf, type ModelShape } from '../decoder-shape.js';

export interface TinyModel {
  path: string;
  file: GgufFile;
  shape: ModelShape;
  /** Removes the model's folder. */
  dispose(): Promise<void>;
}

export const TINY_SHAPE = { name: 'tiny', architecture: 'llama', blockCount: 5, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: 128 };

/** Writes and opens a tiny model: TINY_SHAPE with `shape` over it, in `quant` (default Q4_0), from `seed`. */
export async function tinyModel(opts: { shape?: Partial<typeof TINY_SHAPE> & { tiedEmbeddings?: boolean }; quant?: GgmlType; seed: number }): Promise<TinyModel> {
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-tiny-'));
  const path = join(dir, 'tiny.gguf');
  await synthesizeModel({ shape: resolveShape(JSON.stringify({ ...TINY_SHAPE, ...opts.shape })), quant: opts.quant ?? GgmlType.Q4_0, out: path, seed: opts.seed });
  const file = await openGguf(path);
  return { path, file, shape: await modelShapeFromGguf(file), dispose: () => rm(dir, { recursive: true, force: true }) };
}
