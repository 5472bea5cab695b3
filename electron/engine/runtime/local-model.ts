// Composition for running a whole model in this process: GGUF + tokenizer + a chain of stages
// (one per --split range). Used by `kiwi generate` and the benchmarks.
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ModelShape } from './decoder-shape.js';
import type { LayerRange } from './layer-range.js';
import type { StageOptions } from './stage.js';
import { StageChain, buildStageChain } from './stage-chain.js';

export interface LocalModel {
  file: GgufFile;
  shape: ModelShape;
  tokenizer: Tokenizer;
  chain: StageChain;
  dispose(): Promise<void>;
}

export interface LocalModelOptions extends StageOptions {
  /** Stage ranges; default one stage with every layer. */
  split?: readonly LayerRange[];
  maxPositions?: number;
}

export async function openLocalModel(path: string, opts: LocalModelOptions = {}): Promise<LocalModel> {
  const file = await openGguf(path);
  const shape = await modelShapeFromGguf(file, opts.maxPositions !== undefined ? { maxPositions: opts.maxPositions } : {});
  const tokenizer = createTokenizer(file.metadata);
  const chain = await buildStageChain(file, shape, opts.split ?? [{ start: 0, end: shape.blockCount }], opts);
  return { file, shape, tokenizer, chain, dispose: () => chain.dispose() };
}
