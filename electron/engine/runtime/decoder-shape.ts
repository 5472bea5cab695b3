// The decoder shape a stage graph needs, derived from the model config (model/model-config.ts)
// plus the rope frequency factors. Invariant: only what Kiwi's graph implements passes.
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { modelConfigFromGguf } from '../model/model-config.js';
import type { ModelConfig } from '../model/model-config.js';
import { llama3FreqFactors } from './rope.js';
import { readRopeFreqFactors } from './stage-weights.js';
import type { DecoderShape } from './stage-graph.js';

/** llama.cpp's `llama` converter permutes q/k for adjacent-pair rope (NORM); qwen2/3 keep NEOX halves. */
const ROPE_INTERLEAVED: Record<string, boolean> = { llama: true, mistral: true, qwen2: false, qwen3: false };

export interface ModelShape extends DecoderShape {
  architecture: string;
  contextLength: number;
  config: ModelConfig;
}

export interface ShapeOptions {
  /** Caps the rope tables and so the context a request may use; default min(context, 8192). */
  maxPositions?: number;
}

export async function modelShapeFromGguf(file: GgufFile, opts: ShapeOptions = {}): Promise<ModelShape> {
  const config = modelConfigFromGguf(file);
  return modelShape(config, await readRopeFreqFactors(file), opts);
}

export function modelShape(config: ModelConfig, freqFactorsTensor: Float32Array | undefined, opts: ShapeOptions = {}): ModelShape {
  const interleaved = ROPE_INTERLEAVED[config.architecture];
  if (interleaved === undefined) {
    throw new KiwiError('MODEL_UNSUPPORTED', `model architecture '${config.architecture}' is not supported`, { architecture: config.architecture });
  }
  const r = config.rope;
  let freqScale = 1;
  let freqFactors = freqFactorsTensor;
  if (r.scalingType === 'linear') freqScale = 1 / r.scalingFactor;
  else if (r.scalingType === 'llama3') {
    if (freqFactors === undefined) {
      if (r.lowFreqFactor === undefined || r.highFreqFactor === undefined || r.originalContextLength === undefined) {
        throw new KiwiError('MODEL_UNSUPPORTED', 'llama3 rope scaling without rope_freqs.weight or its low/high frequency factors');
      }
      freqFactors = llama3FreqFactors(r.dimensionCount, r.freqBase, r.scalingFactor, r.lowFreqFactor, r.highFreqFactor, r.originalContextLength);
    }
  } else if (r.scalingType !== 'none') {
    throw new KiwiError('MODEL_UNSUPPORTED', `rope scaling '${r.scalingType}' is not supported (Kiwi supports none, linear and llama3)`);
  }
  if (r.dimensionCount !== config.headDim) {
    throw new KiwiError('MODEL_UNSUPPORTED', `partial rotary embeddings (${r.dimensionCount} of ${config.headDim} dims) are not supported`);
  }
  if (config.valueHeadDim !== config.headDim) {
    throw new KiwiError('MODEL_UNSUPPORTED', `value head dim ${config.valueHeadDim} differs from key head dim ${config.headDim}`);
  }
  return {
    architecture: config.architecture,
    contextLength: config.contextLength,
    config,
    blockCount: config.blockCount,
    hidden: config.embeddingLength,
    heads: config.headCount,
    kvHeads: config.headCountKv,
    headDim: config.headDim,
    vocab: config.vocabSize,
    rmsEps: config.rmsEps,
    rope: { dims: r.dimensionCount, freqBase: r.freqBase, freqScale, ...(freqFactors !== undefined ? { freqFactors } : {}) },
    ropeInterleaved: interleaved,
    maxPositions: Math.min(opts.maxPositions ?? 8192, config.contextLength),
  };
}
