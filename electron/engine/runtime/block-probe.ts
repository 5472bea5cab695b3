// The per-block probe of `kiwi bench --model`: one decoder block of a model's shape and weight type,
// with random weights (a one-block `kiwi synth` GGUF in a temporary folder), run as a real stage
// on this device; the result is the median time of repeated single-token decode runs after a
// warm-up. The planner's best input (issue 4). Knows nothing of the device bench: the command
// composes the two.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { GgmlType, ggmlTypeName } from '../model/gguf/gguf-types.js';
import { modelConfigFromGguf } from '../model/model-config.js';
import type { ModelConfig } from '../model/model-config.js';
import { SYNTH_QUANTS, synthesizeModel } from '../model/synth/synth.js';
import type { ModelShape as SynthShape } from '../model/synth/shapes.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ExecutionProvider } from '../ort/session.js';
import { Stage } from './stage.js';
import { median } from '../median.js';

export interface BlockProbeOptions {
  provider?: ExecutionProvider;
  threads?: number;
  /** Matmul activation precision, as `kiwi generate` (4: int8 activations, the default; 0: f32). */
  accuracyLevel?: 0 | 4;
  /** Untimed decode runs first (onnxruntime's lazy init, caches). Default 3. */
  warmupRuns?: number;
  /** Timed decode runs; the median is reported. Default 15. */
  runs?: number;
  signal?: AbortSignal;
  onProgress?: (message: string) => void;
}

export interface BlockProbeResult {
  /** Median wall time of one single-token decode step of one block. */
  blockMs: number;
  runs: number;
  provider: ExecutionProvider;
  /** Every timed run, in order. */
  samplesMs: number[];
}

/** What the probe reproduces of a model: the block's dimensions and its main weight type. */
export interface BlockShape {
  architecture: ModelConfig['architecture'];
  hidden: number;
  feedForward: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  qkvBias: boolean;
  qkNorm: boolean;
  /** A `kiwi synth` weight type (q4_0, q8_0, ...). */
  quant: string;
}

// Vocabulary of the probe file: the synthetic tokenizer's minimum rounded up; the block never sees it.
const PROBE_VOCAB = 512;
const BLOCK_MATRICES = ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'];

/**
 * The block shape of a GGUF model. Its weight type is the one holding most of block 0's matrix
 * elements (a Q4_K_M file mixes Q4_K with some Q6_K: the probe uses Q4_K throughout).
 */
export function blockShapeOf(file: GgufFile): BlockShape {
  const c = modelConfigFromGguf(file);
  const elements = new Map<GgmlType, number>();
  for (const m of BLOCK_MATRICES) {
    const t = file.tensor(`blk.0.${m}.weight`);
    if (t === undefined) continue;
    elements.set(t.type, (elements.get(t.type) ?? 0) + t.dims.reduce((a, b) => a * b, 1));
  }
  const main = [...elements].sort((a, b) => b[1] - a[1])[0]?.[0];
  if (main === undefined) throw new KiwiError('MODEL_UNSUPPORTED', `${file.path} has no block 0 matrices to take the probe's shape from`);
  const quant = Object.entries(SYNTH_QUANTS).find(([, type]) => type === main)?.[0];
  if (quant === undefined) {
    throw new KiwiError('MODEL_UNSUPPORTED', `the probe cannot synthesize ${ggmlTypeName(main)} weights; it supports ${Object.keys(SYNTH_QUANTS).join(', ')}`, {
      type: ggmlTypeName(main),
    });
  }
  return {
    architecture: c.architecture,
    hidden: c.embeddingLength,
    feedForward: c.feedForwardLength,
    heads: c.headCount,
    kvHeads: c.headCountKv,
    headDim: c.headDim,
    qkvBias: c.qkvBias,
    qkNorm: c.qkNorm,
    quant,
  };
}

/** The cache key of a probe: the same block on the same provider gives the same time. */
export function blockProbeKey(s: BlockShape, provider: ExecutionProvider | 'auto' = 'auto'): string {
  const extras = `${s.qkvBias ? '+qkvbias' : ''}${s.qkNorm ? '+qknorm' : ''}`;
  return `${s.architecture}:e${s.hidden}:f${s.feedForward}:h${s.heads}/${s.kvHeads}x${s.headDim}${extras}:${s.quant}:${provider}`;
}

/** Times one block of `shape` on this device (see the file comment). */
export async function measureBlock(shape: BlockShape, opts: BlockProbeOptions = {}): Promise<BlockProbeResult> {
  const warmupRuns = opts.warmupRuns ?? 3;
  const runs = opts.runs ?? 15;
  if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(warmupRuns) || warmupRuns < 0) throw new Error('measureBlock: runs must be >= 1 and warm-up runs >= 0');
  const quant = SYNTH_QUANTS[shape.quant];
  if (quant === undefined) throw new KiwiError('USAGE', `unknown probe weight type '${shape.quant}'; use one of ${Object.keys(SYNTH_QUANTS).join(', ')}`);
  const progress = opts.onProgress ?? (() => undefined);
  const positions = warmupRuns + runs + 1;
  const synthShape: SynthShape = {
    name: 'kiwi-block-probe',
    architecture: shape.architecture as SynthShape['architecture'],
    blockCount: 1,
    embeddingLength: shape.hidden,
    headCount: shape.heads,
    headCountKv: shape.kvHeads,
    headDim: shape.headDim,
    feedForwardLength: shape.feedForward,
    vocabSize: PROBE_VOCAB,
    contextLength: Math.max(positions, 64),
    rmsEps: 1e-5,
    ropeFreqBase: 10000,
    tiedEmbeddings: true,
    qkvBias: shape.qkvBias,
    qkNorm: shape.qkNorm,
  };
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-block-probe-'));
  try {
    const path = join(dir, 'block.gguf');
    progress(`writing a random ${shape.quant} block of the model's shape`);
    await synthesizeModel({ shape: synthShape, quant, out: path, seed: 1, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
    opts.signal?.throwIfAborted();
    const file = await openGguf(path);
    const modelShape = await modelShapeFromGguf(file, { maxPositions: positions });
    progress('building the block stage');
    // Layers [0, 1) without the head: the embedding is a table lookup outside the graph, so the
    // session runs exactly one block.
    const stage = await Stage.open(file, modelShape, { start: 0, end: 1, head: false }, {
      ...(opts.provider !== undefined ? { provider: opts.provider } : {}),
      ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
      accuracyLevel: opts.accuracyLevel ?? 4,
    });
    try {
      const cache = stage.emptyCache(positions);
      const samplesMs: number[] = [];
      for (let i = 0; i < warmupRuns + runs; i++) {
        opts.signal?.throwIfAborted();
        const ids = BigInt64Array.of(BigInt(3 + (i % (PROBE_VOCAB - 3))));
        const t0 = performance.now();
        await stage.forward({ kind: 'ids', ids, batch: 1, seq: 1 }, [cache]);
        const ms = performance.now() - t0;
        if (i >= warmupRuns) {
          samplesMs.push(ms);
          if ((i - warmupRuns + 1) % 5 === 0 || i === warmupRuns + runs - 1) progress(`block run ${i - warmupRuns + 1}/${runs}: ${ms.toFixed(2)} ms`);
        }
      }
      return { blockMs: median(samplesMs), runs, provider: stage.provider, samplesMs };
    } finally {
      await stage.dispose();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
