// The per-block probe of `kiwi bench --model`: decoder blocks of a model's shape and weight type,
// with random weights (a PROBE_BLOCKS-block `kiwi synth` GGUF in a temporary folder), run as real
// stages on this device. A stage step costs a fixed part (the session run and its worker round
// trip, the embedding lookup, feeds and fetches) plus one part per block, so the probe times a
// one-block and a PROBE_BLOCKS-block stage in alternating single-token decode runs after a warm-up:
// the block time is the median of the paired differences over the extra blocks, the fixed step
// time the one-block median less it. Each timed step follows an untimed one of the same stage, as
// a ring stage's steps follow each other on its own device. Timed right after the other stage, a
// one-block step paid for its weights and buffers coming back from memory, which priced every
// stage's fixed part too high: 1B Q4_0 here, a fixed part of 0.7-0.8 ms (one-block step 3.3 ms)
// against 0.16 ms timed warm (3.0 ms), where real stages of 1-16 blocks fit about 0.3-0.6 ms +
// n blocks (bench/stage-prediction.ts). The long stage spans several blocks so that the difference
// is taken where the weights stream from memory: one block of a small model can sit partly in the
// CPU's last-level cache between runs (1B Q4_0 here: [0, 1) to [0, 2) added 2.3 ms, each later
// block 3.1-3.5 ms), and a planned stage holds many. The long stage also runs paired steps over a
// cache of PROBE_FAR_POSITIONS positions: what a block adds per cached position (attention reads
// the cache and GroupQueryAttention copies it into its present: 1B Q4_0 here, about 0.7 µs a
// position a block, so a 4,000-token request's step costs over twice a fresh one's). The head
// (final norm and output projection, at the model's vocabulary and the projection's weight type)
// is timed the same way, as a one-block stage with and without it: priced from the block time
// scaled by the bytes each reads, it came out 15-25% high on a 1B model, whose wide projection
// streams faster per byte than a block's matrices. The probe's stages start after block 0 and take
// hidden states, so none of them reads the embedding table. The planner's best input (issue 4;
// planner/cost-model.ts prices a stage as step + n x block + head). Knows nothing of the device
// bench: the command composes the two.
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
import { Stage, type StageInput } from './stage.js';
import type { KvCache } from './kv-store.js';
import { median } from '../median.js';

export interface BlockProbeOptions {
  provider?: ExecutionProvider;
  threads?: number;
  /** Matmul activation precision, as `kiwi generate` (4: int8 activations, the default; 0: f32). */
  accuracyLevel?: 0 | 4;
  /** Untimed decode runs first (onnxruntime's lazy init, caches). Default 3. */
  warmupRuns?: number;
  /** Timed decode runs of each stage; medians are reported. Default 15. */
  runs?: number;
  signal?: AbortSignal;
  onProgress?: (message: string) => void;
}

export interface BlockProbeResult {
  /** What one more block adds to a single-token decode step: median of (long - one-block) run pairs over the extra blocks. */
  blockMs: number;
  /** The fixed part of a step, whatever the blocks: the one-block median less blockMs (at least 0). */
  stepMs: number;
  /** What one block adds to a step per cached position (ms; at least 0): positionTime of the long stage's near and far runs. */
  positionMs: number;
  /** What the head adds to a step (ms; at least 0): median of (one block + head - one block) run pairs; absent where the probe cannot write the projection's type. */
  headMs?: number;
  runs: number;
  provider: ExecutionProvider;
  /** Every timed run of the one-block stage, in order. */
  samplesMs: number[];
  /** Every timed run of the PROBE_BLOCKS-block stage, paired with samplesMs. */
  longSamplesMs: number[];
  /** The long stage's paired runs over a short cache and over one PROBE_FAR_POSITIONS longer (positionMs). */
  positionSamplesMs: { near: number[]; far: number[] };
  /** Paired runs of the one-block stage and of it with the head (headMs). */
  headSamplesMs?: { without: number[]; with: number[] };
}

/** Blocks of the probe's long stage. */
export const PROBE_BLOCKS = 4;
/** Cached positions of the long stage's far runs (positionMs). */
export const PROBE_FAR_POSITIONS = 1024;

/** The median of (b[i] - a[i]) over paired runs; `what` names the pairing in the error for unpaired input. */
function medianDifference(a: readonly number[], b: readonly number[], what: string): number {
  if (a.length === 0 || a.length !== b.length) throw new Error(`${what}: needs paired runs`);
  return median(a.map((t, i) => b[i]! - t));
}

/** Marginal block time and fixed step time from paired runs of a one-block and a `blocks`-block stage (see the file comment). */
export function splitStepTime(oneBlockMs: readonly number[], longMs: readonly number[], blocks = PROBE_BLOCKS): { blockMs: number; stepMs: number } {
  if (!(blocks >= 2)) throw new Error('splitStepTime: needs paired runs of a one-block and a longer stage');
  const diff = medianDifference(oneBlockMs, longMs, 'splitStepTime') / (blocks - 1);
  const one = median([...oneBlockMs]);
  // No positive difference (load from elsewhere swamped it): the whole one-block step stands for the block.
  const blockMs = diff > 0 ? diff : one;
  return { blockMs, stepMs: Math.max(0, one - blockMs) };
}

/**
 * What one block adds per cached position, from paired steps of a `blocks`-block stage over a short
 * cache and over one `gap` positions longer: the median paired difference over blocks × gap, at least 0.
 */
export function positionTime(nearMs: readonly number[], farMs: readonly number[], blocks: number, gap: number): number {
  if (!(blocks >= 1) || !(gap >= 1)) throw new Error('positionTime: needs paired runs over a near and a farther cache');
  return Math.max(0, medianDifference(nearMs, farMs, 'positionTime') / (blocks * gap));
}

/** What the head adds to a step: the median paired difference of a one-block stage with and without it, at least 0. */
export function headTime(withoutMs: readonly number[], withMs: readonly number[]): number {
  return Math.max(0, medianDifference(withoutMs, withMs, 'headTime'));
}

/** What the probe reproduces of a model: the block's dimensions and its main weight type, and its head. */
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
  /** The head's output projection: rows (the vocabulary) and `kiwi synth` weight type; absent where synth cannot write that type (the head is then priced from the block). */
  head?: { vocab: number; quant: string };
}

// Vocabulary of a probe file without a head to time: the synthetic tokenizer's minimum rounded up.
const PROBE_VOCAB = 512;
/** The one type synth names for a ggml type ('q4_k_m' is a mix, not a type). */
const synthQuantOf = (type: GgmlType): string | undefined => Object.entries(SYNTH_QUANTS).find(([, t]) => t === type)?.[0];
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
  const quant = synthQuantOf(main);
  if (quant === undefined) {
    throw new KiwiError('MODEL_UNSUPPORTED', `the probe cannot synthesize ${ggmlTypeName(main)} weights; it supports ${Object.keys(SYNTH_QUANTS).join(', ')}`, {
      type: ggmlTypeName(main),
    });
  }
  const projection = file.tensor('output.weight') ?? file.tensor('token_embd.weight');
  const headQuant = projection !== undefined ? synthQuantOf(projection.type) : undefined;
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
    ...(headQuant !== undefined ? { head: { vocab: c.vocabSize, quant: headQuant } } : {}),
  };
}

/** Bump when the probe's figures change meaning (2: block_ms is the marginal block, step_ms the fixed part; 3: position_ms; 4: steps timed warm, head_ms). */
const PROBE_VERSION = 4;

/** The cache key of a probe: the same block on the same provider gives the same time. */
export function blockProbeKey(s: BlockShape, provider: ExecutionProvider | 'auto' = 'auto'): string {
  const extras = `${s.qkvBias ? '+qkvbias' : ''}${s.qkNorm ? '+qknorm' : ''}`;
  const head = s.head !== undefined ? `:o${s.head.vocab}${s.head.quant}` : '';
  return `${s.architecture}:e${s.hidden}:f${s.feedForward}:h${s.heads}/${s.kvHeads}x${s.headDim}${extras}:${s.quant}${head}:${provider}:p${PROBE_VERSION}`;
}

/** The probe's two stages, open: bench/stage-prediction.ts times them between its own stages. */
export interface OpenBlockProbe {
  provider: ExecutionProvider;
  /** Run `i`: one timed decode step of the one-block and of the long stage, each after an untimed one (order alternating with i); their ms. */
  pair(i: number): Promise<[number, number]>;
  /** Run `i`: one decode step of the long stage over a short cache and over one farPositions longer (order alternating with i); their ms. */
  far(i: number): Promise<[number, number]>;
  /** Run `i`, where the shape has a head: one timed step of the one-block stage and of it with the head, each after an untimed one; their ms. */
  head?: (i: number) => Promise<[number, number]>;
  dispose(): Promise<void>;
}

/**
 * Writes the probe's file and opens its one-block and PROBE_BLOCKS-block stages (and the one-block
 * stage with the head) for `positions` decode steps each of pair(), far() and head(), the far cache
 * prefilled with `farPositions` (default PROBE_FAR_POSITIONS).
 */
export async function openBlockProbe(
  shape: BlockShape,
  opts: Omit<BlockProbeOptions, 'warmupRuns' | 'runs'> & { positions: number; farPositions?: number },
): Promise<OpenBlockProbe> {
  const quant = SYNTH_QUANTS[shape.quant];
  if (quant === undefined) throw new KiwiError('USAGE', `unknown probe weight type '${shape.quant}'; use one of ${Object.keys(SYNTH_QUANTS).join(', ')}`);
  const headType = shape.head !== undefined ? SYNTH_QUANTS[shape.head.quant] : undefined;
  if (headType === 'q4_k_m') throw new KiwiError('USAGE', "the probe's head takes one weight type, not the q4_k_m mix");
  const progress = opts.onProgress ?? (() => undefined);
  const { positions } = opts;
  const farPositions = opts.farPositions ?? PROBE_FAR_POSITIONS;
  const capacity = farPositions + positions;
  // pair() and head() run two steps of each stage per call.
  const pairPositions = 2 * positions;
  const synthShape: SynthShape = {
    name: 'kiwi-block-probe',
    architecture: shape.architecture as SynthShape['architecture'],
    // Block 0 is never run: the stages start at block 1 and take hidden states.
    blockCount: PROBE_BLOCKS + 1,
    embeddingLength: shape.hidden,
    headCount: shape.heads,
    headCountKv: shape.kvHeads,
    headDim: shape.headDim,
    feedForwardLength: shape.feedForward,
    vocabSize: shape.head?.vocab ?? PROBE_VOCAB,
    contextLength: Math.max(capacity, pairPositions, 64),
    rmsEps: 1e-5,
    ropeFreqBase: 10000,
    tiedEmbeddings: true,
    qkvBias: shape.qkvBias,
    qkNorm: shape.qkNorm,
  };
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-block-probe-'));
  const stages: Stage[] = [];
  const dispose = async (): Promise<void> => {
    for (const s of stages) await s.dispose();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const path = join(dir, 'block.gguf');
    progress(`writing a random ${shape.quant} block of the model's shape${shape.head !== undefined ? ` and a ${shape.head.quant} head of ${shape.head.vocab} rows` : ''}`);
    await synthesizeModel({ shape: synthShape, quant, ...(headType !== undefined ? { headType } : {}), out: path, seed: 1, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
    opts.signal?.throwIfAborted();
    const file = await openGguf(path);
    const modelShape = await modelShapeFromGguf(file, { maxPositions: Math.max(capacity, pairPositions) });
    progress(`building the one- and ${PROBE_BLOCKS}-block stages${shape.head !== undefined ? ' and the one-block stage with the head' : ''}`);
    const stageOpts = {
      ...(opts.provider !== undefined ? { provider: opts.provider } : {}),
      ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
      accuracyLevel: opts.accuracyLevel ?? 4,
      // Ring stages have the replay inputs (a re-plan replays in one pass): time the graphs they run.
      replayInputs: true,
    };
    for (const end of [2, PROBE_BLOCKS + 1]) stages.push(await Stage.open(file, modelShape, { start: 1, end, head: false }, stageOpts));
    if (shape.head !== undefined) stages.push(await Stage.open(file, modelShape, { start: 1, end: 2, head: true }, stageOpts));
  } catch (e) {
    await dispose();
    throw e;
  }
  // Per pairing, its own caches (the one-block stage runs in both).
  const pairCaches = [stages[0]!.emptyCache(pairPositions), stages[1]!.emptyCache(pairPositions)] as const;
  const headCaches = stages.length > 2 ? ([stages[0]!.emptyCache(pairPositions), stages[2]!.emptyCache(pairPositions)] as const) : undefined;
  const long = stages[1]!;
  const near = long.emptyCache(positions);
  const farCache = long.emptyCache(capacity);
  // Decode input: a hidden state of unit scale, a little different each run.
  const input = (i: number, seq = 1): StageInput => ({
    kind: 'hidden',
    hidden: Float32Array.from({ length: seq * shape.hidden }, (_, j) => Math.sin((i + 1) * 12.9898 + j * 78.233)),
    batch: 1,
    seq,
  });
  try {
    progress(`filling a ${farPositions}-position cache`);
    for (let p = 0; p < farPositions; p += 256) {
      opts.signal?.throwIfAborted();
      await long.forward(input(p, Math.min(256, farPositions - p)), [farCache]);
    }
  } catch (e) {
    await dispose();
    throw e;
  }
  const step = async (cache: KvCache, i: number): Promise<number> => {
    opts.signal?.throwIfAborted();
    const x = input(i);
    const t0 = performance.now();
    await long.forward(x, [cache]);
    return performance.now() - t0;
  };
  /** One timed step of stages a and b (over their caches), each after an untimed one, in an order alternating with i (drift falls on both alike). */
  const paired = async (a: number, b: number, caches: readonly [KvCache, KvCache], i: number): Promise<[number, number]> => {
    const x = input(i);
    const ms: [number, number] = [0, 0];
    for (const k of i % 2 === 0 ? [0, 1] : [1, 0]) {
      opts.signal?.throwIfAborted();
      const stage = stages[k === 0 ? a : b]!;
      await stage.forward(x, [caches[k]!]);
      const t0 = performance.now();
      await stage.forward(x, [caches[k]!]);
      ms[k] = performance.now() - t0;
    }
    return ms;
  };
  return {
    async far(i) {
      if (i % 2 === 0) {
        const a = await step(near, i);
        return [a, await step(farCache, i)];
      }
      const b = await step(farCache, i);
      return [await step(near, i), b];
    },
    provider: stages[0]!.provider,
    pair: (i) => paired(0, 1, pairCaches, i),
    ...(headCaches !== undefined ? { head: (i: number) => paired(0, 2, headCaches, i) } : {}),
    dispose,
  };
}

/** Times blocks of `shape` on this device (see the file comment). */
export async function measureBlock(shape: BlockShape, opts: BlockProbeOptions = {}): Promise<BlockProbeResult> {
  const warmupRuns = opts.warmupRuns ?? 3;
  const runs = opts.runs ?? 15;
  if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(warmupRuns) || warmupRuns < 0) throw new Error('measureBlock: runs must be >= 1 and warm-up runs >= 0');
  const progress = opts.onProgress ?? (() => undefined);
  const probe = await openBlockProbe(shape, { ...opts, positions: warmupRuns + runs + 1 });
  try {
    const [near, far] = await pairedRuns(probe.far, warmupRuns, runs);
    const positionMs = positionTime(near, far, PROBE_BLOCKS, PROBE_FAR_POSITIONS);
    progress(`${PROBE_BLOCKS} blocks over ${PROBE_FAR_POSITIONS} cached positions: ${median(far).toFixed(2)} ms against ${median(near).toFixed(2)} (${(positionMs * 1000).toFixed(3)} µs a position a block)`);
    const [one, long] = await pairedRuns(probe.pair, warmupRuns, runs, (done, a, b) => {
      if (done % 5 === 0 || done === runs) progress(`block run ${done}/${runs}: ${a.toFixed(2)} ms one block, ${b.toFixed(2)} ms ${PROBE_BLOCKS}`);
    });
    let head: Pick<BlockProbeResult, 'headMs' | 'headSamplesMs'> = {};
    if (probe.head !== undefined) {
      const [without, withHead] = await pairedRuns(probe.head, warmupRuns, runs);
      head = { headMs: headTime(without, withHead), headSamplesMs: { without, with: withHead } };
      progress(`head: ${head.headMs!.toFixed(2)} ms (${median(withHead).toFixed(2)} ms one block with it, ${median(without).toFixed(2)} without)`);
    }
    return { ...splitStepTime(one, long), positionMs, ...head, runs, provider: probe.provider, samplesMs: one, longSamplesMs: long, positionSamplesMs: { near, far } };
  } finally {
    await probe.dispose();
  }
}

/** `warmupRuns` untimed calls of a paired run, then `runs` timed ones: their results as two lists. */
async function pairedRuns(run: (i: number) => Promise<[number, number]>, warmupRuns: number, runs: number, onRun?: (done: number, a: number, b: number) => void): Promise<[number[], number[]]> {
  const out: [number[], number[]] = [[], []];
  for (let i = 0; i < warmupRuns + runs; i++) {
    const [a, b] = await run(i);
    if (i < warmupRuns) continue;
    out[0].push(a);
    out[1].push(b);
    onRun?.(i - warmupRuns + 1, a, b);
  }
  return out;
}
