// Reads the weights of one stage (layers [start, end), plus embedding / head when the stage
// has them) from a GGUF by byte range, and converts them to the stage graph's forms.
// Invariant: only tensors of the range are read; a tensor type that cannot be converted ends
// in a KiwiError naming the tensor and type.
import { KiwiError } from '../errors.js';
import type { GgufFile, GgufTensorInfo, GgufTensorReader } from '../model/gguf/gguf-reader.js';
import { openTensorReader } from '../model/gguf/gguf-reader.js';
import type { DecoderShape, LayerWeights, LinearWeight, StageWeights } from './stage-graph.js';
import { hollowLinear, toF32, toLinear } from './weights/convert.js';
import type { WeightLayout } from './weights/convert.js';
import type { RepackPool } from './weights/repack-pool.js';
import type { LayerRange } from './layer-range.js';

export interface StagePlan extends LayerRange {
  /** The stage runs the final norm and output projection. */
  head: boolean;
}

export async function loadStageWeights(file: GgufFile, shape: DecoderShape, plan: StagePlan, layout: WeightLayout = 'exact'): Promise<StageWeights> {
  const source = await openStageWeights(file, shape, { layout });
  try {
    const out: StageWeights = { start: plan.start, end: plan.end, layers: [] };
    for (let L = plan.start; L < plan.end; L++) out.layers.push(await source.layer(L));
    if (plan.head) out.head = await source.head();
    return out;
  } finally {
    await source.close();
  }
}

/** The stage's weights one layer at a time (so a streaming build holds one layer, not the range). */
export interface StageWeightSource {
  layer(L: number): Promise<LayerWeights>;
  /**
   * Layer L's weights as the graph sees their forms (kinds, shapes, bits, which optional tensors
   * exist) with no bytes: for a layer whose built initializers are already on disk (the shard
   * cache), so neither its GGUF bytes nor a conversion are needed. Shapes are checked as in layer().
   */
  hollowLayer(L: number): Promise<LayerWeights>;
  /**
   * Starts reading layer L's GGUF bytes (on libuv's threads) so that they arrive while the layer
   * before is converted; layer(L) then takes them. A layer prefetched and never taken is dropped at close.
   */
  prefetch(L: number | 'head'): void;
  head(): Promise<NonNullable<StageWeights['head']>>;
  close(): Promise<void>;
}

/** Where openStageWeights' time goes (accumulated; for benchmarks): reading GGUF bytes (while any read is under way), converting them. */
export interface WeightTimes {
  readMs: number;
  convertMs: number;
  /** GGUF bytes read. */
  readBytes: number;
}

export interface StageWeightOptions {
  /** Convert matrices on these worker threads (a layer's matrices in parallel); default: on this thread. */
  pool?: RepackPool;
  /** Accumulates where the time goes. */
  times?: WeightTimes;
  /** How matrices are laid out; default exact. */
  layout?: WeightLayout;
}

export async function openStageWeights(file: GgufFile, shape: DecoderShape, opts: StageWeightOptions = {}): Promise<StageWeightSource> {
  const { times, pool } = opts;
  const layout = opts.layout ?? 'exact';
  const opened = await openTensorReader(file);
  // readMs counts the time any read is under way (reads overlap: a layer's are issued at once).
  let reading = 0;
  let since = 0;
  const timedRead: GgufTensorReader['read'] = times === undefined ? (t) => opened.read(t) : async (t) => {
    if (reading++ === 0) since = performance.now();
    try {
      const bytes = await opened.read(t);
      times.readBytes += bytes.byteLength;
      return bytes;
    } finally {
      if (--reading === 0) times.readMs += performance.now() - since;
    }
  };
  // Reads started by prefetch, by tensor name, until taken.
  const ahead = new Map<string, Promise<Buffer>>();
  const reader = {
    read: (t: GgufTensorInfo): Promise<Buffer> => {
      const early = ahead.get(t.name);
      ahead.delete(t.name);
      return early ?? timedRead(t);
    },
    prefetch: (t: GgufTensorInfo): void => {
      if (ahead.has(t.name)) return;
      const p = timedRead(t);
      p.catch(() => undefined); // reported when taken
      ahead.set(t.name, p);
    },
    close: async (): Promise<void> => {
      await Promise.allSettled(ahead.values());
      ahead.clear();
      await opened.close();
    },
  };
  const timed = <T>(convert: () => T): T => {
    if (times === undefined) return convert();
    const t0 = performance.now();
    const out = convert();
    times.convertMs += performance.now() - t0;
    return out;
  };
  const tensor = (name: string): GgufTensorInfo => {
    const t = file.tensor(name);
    if (t === undefined) throw new KiwiError('MODEL_UNSUPPORTED', `tensor '${name}' is missing from ${file.path}`, { tensor: name });
    return t;
  };
  const vectorInfo = (name: string, length: number): GgufTensorInfo => {
    const t = tensor(name);
    if (t.dims.reduce((a, b) => a * b, 1) !== length) {
      throw new KiwiError('GGUF_INVALID', `tensor '${name}' has shape [${t.dims.join(', ')}], expected ${length} elements`);
    }
    return t;
  };
  const matrixInfo = (name: string, n: number, k: number): GgufTensorInfo => {
    const t = tensor(name);
    if (t.dims.length !== 2 || t.dims[0] !== k || t.dims[1] !== n) {
      throw new KiwiError('GGUF_INVALID', `tensor '${name}' has shape [${t.dims.join(', ')}], expected [${k}, ${n}]`);
    }
    return t;
  };
  const vector = async (name: string, length: number): Promise<Float32Array> => {
    const t = vectorInfo(name, length);
    const bytes = await reader.read(t);
    return timed(() => toF32(t, bytes));
  };
  const matrix = async (name: string, n: number, k: number): Promise<LinearWeight> => {
    const t = matrixInfo(name, n, k);
    const bytes = await reader.read(t);
    if (pool !== undefined) {
      const t0 = performance.now();
      const w = await pool.convert(t, bytes, n, k, layout);
      if (times !== undefined) times.convertMs += performance.now() - t0;
      return w;
    }
    return timed(() => toLinear(t, bytes, n, k, layout));
  };
  // The same tensors without their bytes (hollowLayer).
  const hollow = {
    vector: (name: string, length: number): Promise<Float32Array> => {
      vectorInfo(name, length);
      return Promise.resolve(new Float32Array(0));
    },
    matrix: (name: string, n: number, k: number): Promise<LinearWeight> => Promise.resolve(hollowLinear(matrixInfo(name, n, k), n, k, layout)),
  };

  const { hidden, heads, kvHeads, headDim, vocab } = shape;
  // Tied embeddings: llama.cpp uses token_embd.weight when output.weight is absent.
  const outputName = (): string => (file.tensor('output.weight') !== undefined ? 'output.weight' : 'token_embd.weight');
  const readLayer = async (L: number, read: { vector: typeof vector; matrix: typeof matrix }): Promise<LayerWeights> => {
    const p = `blk.${L}`;
    const ffn = tensor(`${p}.ffn_gate.weight`).dims[1] ?? 0;
    const { vector: vec, matrix: mat } = read;
    const optionalVector = async (name: string, length: number) => (file.tensor(name) !== undefined ? vec(name, length) : undefined);
    // All of the layer's conversions at once (a pool runs them in parallel), then gathered in order.
    const [attnNorm, q, k, v, o, ffnNorm, gate, up, down] = await Promise.all([
      vec(`${p}.attn_norm.weight`, hidden),
      mat(`${p}.attn_q.weight`, heads * headDim, hidden),
      mat(`${p}.attn_k.weight`, kvHeads * headDim, hidden),
      mat(`${p}.attn_v.weight`, kvHeads * headDim, hidden),
      mat(`${p}.attn_output.weight`, hidden, heads * headDim),
      vec(`${p}.ffn_norm.weight`, hidden),
      mat(`${p}.ffn_gate.weight`, ffn, hidden),
      mat(`${p}.ffn_up.weight`, ffn, hidden),
      mat(`${p}.ffn_down.weight`, hidden, ffn),
    ] as const);
    const weights: LayerWeights = { attnNorm, q, k, v, o, ffnNorm, gate, up, down };
    const qBias = await optionalVector(`${p}.attn_q.bias`, heads * headDim);
    const kBias = await optionalVector(`${p}.attn_k.bias`, kvHeads * headDim);
    const vBias = await optionalVector(`${p}.attn_v.bias`, kvHeads * headDim);
    const qNorm = await optionalVector(`${p}.attn_q_norm.weight`, headDim);
    const kNorm = await optionalVector(`${p}.attn_k_norm.weight`, headDim);
    if (qBias) weights.qBias = qBias;
    if (kBias) weights.kBias = kBias;
    if (vBias) weights.vBias = vBias;
    if (qNorm) weights.qNorm = qNorm;
    if (kNorm) weights.kNorm = kNorm;
    return weights;
  };
  const layer = (L: number): Promise<LayerWeights> => readLayer(L, { vector, matrix });
  const prefetch = (L: number | 'head'): void => {
    if (L === 'head') {
      for (const name of ['output_norm.weight', outputName()]) reader.prefetch(tensor(name));
      return;
    }
    const p = `blk.${L}.`;
    for (const t of file.tensors) if (t.name.startsWith(p)) reader.prefetch(t);
  };
  const hollowLayer = (L: number): Promise<LayerWeights> => readLayer(L, hollow);
  const head = async (): Promise<NonNullable<StageWeights['head']>> => {
    return { norm: await vector('output_norm.weight', hidden), output: await matrix(outputName(), vocab, hidden) };
  };
  return { layer, hollowLayer, prefetch, head, close: () => reader.close() };
}

/** Reads the Llama 3 rope frequency factors, if the model has them. */
export async function readRopeFreqFactors(file: GgufFile, reader?: GgufTensorReader): Promise<Float32Array | undefined> {
  const t = file.tensor('rope_freqs.weight');
  if (t === undefined) return undefined;
  const own = reader ?? (await openTensorReader(file));
  try {
    return toF32(t, await own.read(t));
  } finally {
    if (reader === undefined) await own.close();
  }
}
