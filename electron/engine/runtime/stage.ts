// A running pipeline stage: the ONNX session of layers [start, end) (plus the embedding lookup
// of the first stage) and its forward pass for prefill (one request, many tokens) and decode
// (many requests, one token each). The caller holds each request's KV cache (a KvCache handle,
// kv-store.ts) and frees it when the request ends; forward() appends to it. Stage.open builds the graph or takes it from the shard cache.
// The onnxruntime session runs on a worker thread by default (ort-worker-session.ts), and the K/V
// buffers live there too (kv-buffers.ts): this thread holds handles (kv-store.ts).
import v8 from 'node:v8';
import vm from 'node:vm';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { availableProviders, createStageSession, defaultThreads, f32Tensor, i32Tensor, tensorF32, tensorOf } from '../ort/session.js';
import type { ExecutionProvider, OrtFeeds, StageSession } from '../ort/session.js';
import { startSessionWorker, stageWorkerEnabled } from './ort-worker-session.js';
import { freeCache, KvStore, localKvHost } from './kv-store.js';
import type { KvCache, KvHost } from './kv-store.js';
import type { KvLayout, KvRun } from './kv-buffers.js';
import { IO, attentionHeadDim, buildStageGraph, stageGraphBuilder } from './stage-graph.js';
import { PREFILL_CHUNK_TOKENS, REPLAY_CHUNK_BYTES, replayRowBytes } from './memory-model.js';
import type { DecoderShape, StageGraphOptions } from './stage-graph.js';
import { encodeModel } from '../ort/onnx-graph.js';
import { batchedReplay, replayFeeds, type ReplayMode } from './replay.js';
import { replayKernelsExact } from './replay-exactness.js';
import { loadStageWeights, openStageWeights } from './stage-weights.js';
import { RepackPool } from './weights/repack-pool.js';
import type { StagePlan } from './stage-weights.js';
import { EmbeddingTable } from './embedding.js';
import { modelFingerprint } from './shard-cache.js';
import type { ShardCache, ShardSource } from './shard-cache.js';
import type { WeightLayout } from './weights/convert.js';

/**
 * int8 activations inside quantized matmuls, as llama.cpp does (faster; every stage of every entry
 * point — generate, serve, the ring — uses the same level, so splits stay exact).
 */
const DEFAULT_ACCURACY_LEVEL = 4;

export interface StageOptions extends Partial<StageGraphOptions> {
  provider?: ExecutionProvider;
  threads?: number;
  /** Where built shards are kept; without it every start builds the graph in memory (protobuf's
   * 2 GiB limit then caps the stage's size: real models should use the cache). */
  cache?: ShardCache;
  /** How the cache identifies the file's bytes (a member's partial model: its spans' sha256); default its mtime. */
  cacheSource?: Omit<ShardSource, 'path'>;
  /** Run the onnxruntime session on a worker thread, keeping the event loop free during forward
   * passes. Default: yes, unless KIWI_STAGE_WORKER=0 (in-thread, for comparison). */
  worker?: boolean;
  /** How a replayed row runs (runtime/replay.ts): default 'auto', one pass where that is exact. */
  replay?: ReplayMode;
  /** A one-pass replay's attention scratch per run, bytes (default REPLAY_CHUNK_BYTES): longer rows run in chunks. */
  replayChunkBytes?: number;
  /** How matrices are laid out (weights/convert.ts): default exact; fast requantizes Q4_0 (lossy). */
  weightLayout?: WeightLayout;
}

/** How a stage came to be (for logs and benchmarks). */
export interface StageOrigin {
  source: 'built' | 'cache';
  /** Reading + repacking + graph building (0 from the cache). */
  buildMs: number;
  /** onnxruntime session creation plus one warm-up run. */
  sessionMs: number;
}

/** Input of a forward pass: token ids (first stage) or hidden states, for `batch` rows of `seq` tokens. */
export type StageInput =
  | { kind: 'ids'; ids: BigInt64Array /* [batch, seq] */; batch: number; seq: number }
  | { kind: 'hidden'; hidden: Float32Array /* [batch, seq, hidden] */; batch: number; seq: number };

/** hidden states [batch, seq, hidden] for the next stage, or logits [batch, tail, vocab] (the last `logitsTail` positions, default 1) from the head. */
export type StageOutput =
  | { kind: 'hidden'; hidden: Float32Array }
  /** hiddenNorm [batch, seq, hidden]: the final norm of every position, when forward() was asked for it. */
  | { kind: 'logits'; logits: Float32Array; hiddenNorm?: Float32Array };

export class Stage {
  private constructor(
    readonly plan: StagePlan,
    readonly shape: DecoderShape,
    private readonly session: StageSession,
    private readonly embedding: EmbeddingTable | undefined,
    readonly origin: StageOrigin,
    /** The request caches: handles here, buffers where the session runs. */
    private readonly kv: KvStore,
  ) {
    this.kvNames = Array.from({ length: plan.end - plan.start }, (_, i) => {
      const L = plan.start + i;
      return { pastKey: IO.pastKey(L), pastValue: IO.pastValue(L), newKey: IO.newKey(L), newValue: IO.newValue(L) };
    });
  }

  /** The graph's K/V inputs and outputs per layer. */
  private readonly kvNames: KvRun['names'];

  get provider(): ExecutionProvider {
    return this.session.provider;
  }

  /**
   * Opens the stage of `plan` from a GGUF: from the shard cache when it has it, else reads the
   * range's weights, builds the graph (storing it in the cache, if any) and starts a session.
   */
  static async open(file: GgufFile, shape: DecoderShape, plan: StagePlan, opts: StageOptions = {}): Promise<Stage> {
    const accuracyLevel = opts.accuracyLevel ?? DEFAULT_ACCURACY_LEVEL;
    const layout = opts.weightLayout ?? 'exact';
    const provider = opts.provider ?? availableProviders()[0]!;
    // Without an override the factory may fall back to the next provider if the best fails to start.
    const sessionOpts = { ...(opts.provider !== undefined ? { provider } : {}), ...(opts.threads !== undefined ? { threads: opts.threads } : {}) };
    // The worker thread starts first: it loads onnxruntime while the graph is read or built.
    const worker = (opts.worker ?? stageWorkerEnabled()) ? startSessionWorker() : undefined;
    let prepared: PreparedModel;
    try {
      prepared = await prepareModel(file, shape, plan, opts.cache && { cache: opts.cache, source: { ...opts.cacheSource, path: file.path } }, accuracyLevel, provider, opts.replayInputs ?? false, layout, true);
    } catch (err) {
      await worker?.dispose();
      throw err;
    }
    const { model, embedding, source, buildMs } = prepared;
    // What the build (or the cache lookup) dropped is garbage now, but V8 collects it at its own
    // pace: without this it stays resident while onnxruntime packs the weights (bench/memory.ts:
    // the load peak of a 1B Q4_0 built in the process was 1.37x the packed size, 1.13x with it).
    collectGarbage();
    const t1 = performance.now();
    const kvLayout: KvLayout = { layers: plan.end - plan.start, kvHeads: shape.kvHeads, headDim: attentionHeadDim(shape) };
    let session: StageSession;
    let host: KvHost;
    if (worker !== undefined) {
      const s = await worker.create(model, sessionOpts, kvLayout);
      [session, host] = [s, s.kv];
    } else {
      session = await createStageSession(model, sessionOpts);
      host = localKvHost(kvLayout, session);
    }
    const stage = new Stage(plan, shape, session, embedding, { source, buildMs, sessionMs: 0 }, new KvStore(host));
    try {
      // onnxruntime initializes kernels lazily on the first run: pay that here, not in the first request.
      const warm = stage.emptyCache(1);
      await stage.run(new Float32Array(shape.hidden), [warm], 1, 1);
      freeCache(warm);
    } catch (err) {
      await session.dispose();
      throw err;
    }
    stage.origin.sessionMs = performance.now() - t1;
    const replay = opts.replay ?? 'auto';
    // Probed only where it decides: a graph with the replay inputs, replaying in 'auto' mode (the
    // probe's kernels are the exact layout's).
    const exact = stage.replays && replay === 'auto' && layout === 'exact' && (await replayKernelsExact(accuracyLevel, stage.provider, opts.threads ?? defaultThreads()));
    stage.replayOnePass = batchedReplay(replay, stage.replays, exact);
    stage.replayChunkBytes = opts.replayChunkBytes ?? REPLAY_CHUNK_BYTES;
    return stage;
  }

  /** The head computes the logits of several last positions in one pass (speculative verification; its logits_from input). */
  get verifies(): boolean {
    return this.plan.head && this.session.inputNames.includes(IO.logitsFrom);
  }

  /** The graph can replay a row of positions as decode steps in one pass (its replay inputs; runtime/replay.ts). */
  get replays(): boolean {
    return this.session.inputNames.includes(IO.replay);
  }

  /** A replayed row runs as one pass (exact at this accuracy level, or asked for); else one decode step per position. */
  private replayOnePass = false;
  private replayChunkBytes = REPLAY_CHUNK_BYTES;

  /** KV-cache bytes one position of one request takes in this stage (K and V, f32, every layer). */
  get kvBytesPerToken(): number {
    return (this.plan.end - this.plan.start) * 2 * this.shape.kvHeads * attentionHeadDim(this.shape) * 4;
  }

  /**
   * A cache for up to `capacity` positions (at most the stage's maxPositions); its buffers grow on
   * use from `allocated` positions (default one growth step). Free it (kv-store.ts freeCache) when
   * its request ends.
   */
  emptyCache(capacity: number = this.shape.maxPositions, allocated?: number): KvCache {
    const cap = Math.min(capacity, this.shape.maxPositions);
    return this.kv.empty(cap, allocated);
  }

  /**
   * Runs the stage for `input.batch` rows; row b continues `caches[b]`. Several rows need
   * seq == 1 (batched decode); prefill runs one request at a time.
   */
  async forward(input: StageInput, caches: KvCache[], opts: { hiddenNorm?: boolean; logitsTail?: number; replay?: boolean } = {}): Promise<StageOutput> {
    const { batch, seq } = input;
    if (caches.length !== batch) throw new Error(`forward: ${caches.length} caches for batch ${batch}`);
    if (batch > 1 && seq !== 1) throw new Error('forward: batched rows must each add one token');
    if (input.kind === 'ids' && this.embedding === undefined) throw new Error('forward: token ids given to a stage without the embedding');
    if (input.kind === 'hidden' && this.plan.start === 0) throw new Error('forward: hidden states given to the first stage');
    const x = input.kind === 'ids' ? this.embedding!.lookup(input.ids) : input.hidden; // [batch, seq, hidden]
    if (opts.hiddenNorm === true && !this.plan.head) throw new Error('forward: only the head has the final norm');
    const tail = opts.logitsTail ?? 1;
    if (tail !== 1 && !(this.verifies && Number.isInteger(tail) && tail >= 1 && tail <= seq)) throw new Error(`forward: logits of the last ${tail} of ${seq} positions need a head that verifies`);
    if (opts.replay === true) {
      if (batch !== 1 || opts.hiddenNorm === true) throw new Error('forward: a replay is one row, without hidden norms');
      // A stage without blocks (the ring's head) has no cache to rebuild, and it slices the last
      // position before its norm and projection: one pass runs them on the decode step's own row.
      if (this.plan.start === this.plan.end && tail === 1) return this.run(x, caches, 1, seq, false, 1);
      // The logits of several positions (an exact verify of drafts) come from decode steps: the probe
      // that makes a one-pass replay exact covers the blocks' quantized matmuls, not the head's projection.
      return this.replayOnePass && tail === 1 ? this.replayChunks(x, caches[0]!, seq) : this.replaySteps(x, caches[0]!, seq, tail);
    }
    return this.run(x, caches, batch, seq, opts.hiddenNorm === true, tail);
  }

  /**
   * A one-pass replay, in chunks of rows: the replay attention holds a copy of the cache per row
   * (K and V, and GQA's output of each), so a chunk is as many rows as fit REPLAY_CHUNK_BYTES.
   * Each position's result does not depend on the chunks (each is exact on its own).
   */
  private async replayChunks(x: Float32Array, cache: KvCache, seq: number): Promise<StageOutput> {
    const { hidden, kvHeads } = this.shape;
    const perRow = replayRowBytes(2 * kvHeads * attentionHeadDim(this.shape) * 4, cache.length + seq);
    // At most a chunk's bytes (at least one row) and a prefill chunk's positions: the memory the plan admits.
    const rows = Math.min(PREFILL_CHUNK_TOKENS, Math.max(1, Math.floor(this.replayChunkBytes / perRow)));
    if (rows >= seq) return this.run(x, [cache], 1, seq, false, 1, true);
    const out = new Float32Array(seq * hidden);
    let last: StageOutput | undefined;
    for (let j = 0; j < seq; j += rows) {
      const n = Math.min(rows, seq - j);
      last = await this.run(x.subarray(j * hidden, (j + n) * hidden), [cache], 1, n, false, 1, true);
      if (last.kind === 'hidden') out.set(last.hidden, j * hidden);
    }
    return last!.kind === 'logits' ? last! : { kind: 'hidden', hidden: out };
  }

  /**
   * A replay where one pass is not exact (runtime/replay.ts): one decode step per position, here,
   * without ring trips. A head returns the logits of the last `tail` positions, [tail, vocab].
   */
  private async replaySteps(x: Float32Array, cache: KvCache, seq: number, tail = 1): Promise<StageOutput> {
    const { hidden, vocab } = this.shape;
    const out = new Float32Array(seq * hidden);
    const logits = tail > 1 ? new Float32Array(tail * vocab) : undefined;
    let last: StageOutput | undefined;
    for (let j = 0; j < seq; j++) {
      last = await this.run(x.subarray(j * hidden, (j + 1) * hidden), [cache], 1, 1);
      if (last.kind === 'hidden') out.set(last.hidden, j * hidden);
      else if (logits !== undefined && j >= seq - tail) logits.set(last.logits, (j - seq + tail) * vocab);
    }
    if (logits !== undefined) return { kind: 'logits', logits };
    if (last === undefined || last.kind === 'logits') return last ?? { kind: 'hidden', hidden: out };
    return { kind: 'hidden', hidden: out };
  }

  /** The session run: x [batch, seq, hidden] f32 after the embedding. */
  private async run(x: Float32Array, caches: KvCache[], batch: number, seq: number, hiddenNorm = false, logitsTail = 1, replay = false): Promise<StageOutput> {
    const total = Math.max(...caches.map((c) => c.length)) + seq;
    const feeds: OrtFeeds = {};
    feeds[IO.hiddenIn] = f32Tensor(x, [batch, seq, this.shape.hidden]);
    // seqlens_k[b] = total length of row b - 1: GQA writes row b's new K/V at its own position.
    feeds[IO.seqlensK] = i32Tensor(Int32Array.from(caches, (c) => c.length + seq - 1), [batch]);
    feeds[IO.totalSeqLen] = i32Tensor(Int32Array.of(total), []);
    if (this.plan.head) feeds[IO.logitsFrom] = tensorOf(BigInt64Array.of(BigInt(-logitsTail)), [1]);
    if (this.replays) Object.assign(feeds, replayFeeds(replay ? caches[0]!.length : undefined, seq));
    const outputName = this.plan.head ? IO.logits : IO.hiddenOut;
    const fetches = hiddenNorm ? [outputName, IO.hiddenNorm] : [outputName];
    // The caches are read in place where they live (the session's thread) and take the new positions there.
    const out = await this.kv.run(feeds, fetches, caches, seq, this.kvNames);
    const result = tensorF32(out[outputName], outputName);
    if (!this.plan.head) return { kind: 'hidden', hidden: result };
    return hiddenNorm ? { kind: 'logits', logits: result, hiddenNorm: tensorF32(out[IO.hiddenNorm], IO.hiddenNorm) } : { kind: 'logits', logits: result };
  }

  async dispose(): Promise<void> {
    await this.session.dispose();
    this.kv.close();
  }
}

interface PreparedModel {
  /** A model file in the shard cache, or the encoded bytes. */
  model: string | Uint8Array;
  embedding: EmbeddingTable | undefined;
  source: StageOrigin['source'];
  buildMs: number;
}

/** The stage's ONNX model: from the shard cache, else read, repacked and built (and stored). */
async function prepareModel(
  file: GgufFile,
  shape: DecoderShape,
  plan: StagePlan,
  cached: { cache: ShardCache; source: ShardSource } | undefined,
  accuracyLevel: NonNullable<StageOptions['accuracyLevel']>,
  provider: ExecutionProvider,
  /**
   * The graph's replay inputs (stage-graph.ts). Off by default (one process never re-plans, and they
   * cost a plain decode step about 3%); ring stages have them, and their plan admits the scratch a
   * replay leaves (memory-model.ts replayScratchBytes). Without them a replayed row runs as decode
   * steps inside each stage (replaySteps).
   */
  replayInputs: boolean,
  layout: WeightLayout,
  /** For a session now: the embedding table is read and large stages convert on worker threads; else (buildIntoCache) on one worker. */
  forSession: boolean,
): Promise<PreparedModel> {
  // The embedding table is read while the weights are converted.
  const embedded = plan.start === 0 && forSession ? EmbeddingTable.fromGguf(file, shape.vocab, shape.hidden) : Promise.resolve(undefined);
  embedded.catch(() => undefined); // awaited below
  const t0 = performance.now();
  const cache = cached?.cache;
  const key = cache && {
    model: await modelFingerprint(file),
    start: plan.start,
    end: plan.end,
    head: plan.head,
    accuracyLevel,
    maxPositions: shape.maxPositions,
    provider,
    ...(replayInputs ? { replay: true as const } : {}),
    ...(layout === 'fast' ? { layout } : {}),
  };
  const found = cached && key && (await cached.cache.lookup(key, cached.source));
  if (found !== undefined) return { model: found, embedding: await embedded, source: 'cache', buildMs: 0 };
  if (cached && key) {
    // Streamed: one layer's weights are read, converted and written to its layer file at a time;
    // a layer built before (for any range) is added hollow and its file reused as it is.
    const build = (pool: RepackPool | undefined) => cached.cache.build(key, cached.source, async ({ place, reused, flush }) => {
      const source = await openStageWeights(file, shape, { layout, ...(pool !== undefined ? { pool } : {}) });
      try {
        const b = stageGraphBuilder(shape, plan, { accuracyLevel, replayInputs }, { place });
        const raw = (L: number): boolean => L < plan.end && !reused(L);
        if (raw(plan.start)) source.prefetch(plan.start);
        for (let L = plan.start; L < plan.end; L++) {
          // The next layer's bytes are read while this one is converted.
          if (raw(L + 1)) source.prefetch(L + 1);
          else if (L + 1 === plan.end && plan.head) source.prefetch('head');
          b.addLayer(raw(L) ? await source.layer(L) : await source.hollowLayer(L));
          await flush(); // the layer before this one is written while the next is converted
        }
        return b.finish(plan.head ? await source.head() : undefined);
      } finally {
        await source.close();
      }
    });
    // Matrices are converted on worker threads, a layer's in parallel, unless the stage is small
    // (a worker's start would cost more than it saves). Should a worker die, the build runs again here.
    // A build for later (buildIntoCache) converts on one worker: a core, and the event loop stays free.
    const pool = !forSession ? new RepackPool(1) : stageBytes(file, plan) >= POOL_MIN_BYTES ? new RepackPool() : undefined;
    let model: string;
    try {
      model = await build(pool);
    } catch (err) {
      if (pool?.failed !== true) throw err;
      model = await build(undefined);
    } finally {
      await pool?.close();
    }
    return { model, embedding: await embedded, source: 'built', buildMs: performance.now() - t0 };
  }
  // Without a cache the model is built in memory (small models, tests).
  const model = encodeModel(buildStageGraph(shape, await loadStageWeights(file, shape, plan, layout), { accuracyLevel, replayInputs })).model;
  return { model, embedding: await embedded, source: 'built', buildMs: performance.now() - t0 };
}

/**
 * Builds the layers of `plan` into the shard cache and starts no session: layers a re-plan may give
 * this process later (a member's standby layers) then open from the cache, as any cached layer
 * does, instead of being converted on the recovery's critical path. Matrices convert on one worker
 * thread (it runs beside a serving stage: one core, and this thread's event loop keeps serving),
 * about one layer's bytes in flight. Returns the build's milliseconds (0: the range was built).
 */
export async function buildIntoCache(file: GgufFile, shape: DecoderShape, plan: StagePlan, opts: Pick<StageOptions, 'accuracyLevel' | 'cacheSource' | 'provider' | 'replayInputs' | 'weightLayout'> & { cache: ShardCache }): Promise<number> {
  const provider = opts.provider ?? availableProviders()[0]!;
  const { buildMs } = await prepareModel(file, shape, plan, { cache: opts.cache, source: { ...opts.cacheSource, path: file.path } }, opts.accuracyLevel ?? DEFAULT_ACCURACY_LEVEL, provider, opts.replayInputs ?? false, opts.weightLayout ?? 'exact', false);
  collectGarbage(); // the converted layer's buffers, at once rather than at V8's next collection
  return buildMs;
}

/** A stage of at least this many GGUF bytes converts on worker threads (runtime/weights/repack-pool.ts). */
const POOL_MIN_BYTES = 64 * 2 ** 20;

/** GGUF bytes of the stage's layers (the head's are not counted: a stage of the head alone stays on this thread). */
function stageBytes(file: GgufFile, plan: StagePlan): number {
  let sum = 0;
  for (const t of file.tensors) {
    const m = /^blk\.(\d+)\./.exec(t.name);
    if (m !== null && Number(m[1]) >= plan.start && Number(m[1]) < plan.end) sum += t.byteLength;
  }
  return sum;
}

let gc: (() => void) | undefined;

/** A full garbage collection now (V8's gc, exposed once at first use). */
function collectGarbage(): void {
  if (gc === undefined) {
    v8.setFlagsFromString('--expose-gc');
    gc = vm.runInNewContext('gc') as () => void;
  }
  gc();
}
