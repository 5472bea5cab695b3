// How well the planner's cost model predicts a measured stage on this machine (issues 4, 14): for a
// `kiwi synth` model, each layer range is opened as a real stage and its single-token decode step
// timed (median after warm-up, all stages in interleaved rounds); the prediction comes from
// deviceCosts() with this machine as the only device, in the bandwidth tier (measured host
// bandwidth for the blocks and head) and in the measured tier (the probe of `kiwi bench --model`:
// its block, and its head where it timed one); both take the probe's fixed step time. Each stage
// is also timed over a cache of PROBE_FAR_POSITIONS positions against the measured tier's price
// there (stage_ms + position x the stage's position_ms, from the probe's far runs). Used by
// bench/planner.ts; alone:
//   npx tsx bench/stage-prediction.ts [--shape llama-3.2-1b] [--quant q4_0] [--model FILE] [--layers 1,2,4,8,16]
// times [0, n) without the head and [L - n, L) with it for each n, and writes
// bench/results/stage-prediction-<shape>-<quant>.json.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { measureHostBandwidth } from '../electron/engine/device/memory-bandwidth.js';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { resolveShape } from '../electron/engine/model/synth/shapes.js';
import { SYNTH_QUANTS, synthesizeModel } from '../electron/engine/model/synth/synth.js';
import { deviceCosts, stageCost } from '../electron/engine/planner/cost-model.js';
import type { Fleet, ModelSizes } from '../electron/engine/planner/fleet.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { PROBE_BLOCKS, PROBE_FAR_POSITIONS, blockShapeOf, headTime, openBlockProbe, positionTime, splitStepTime } from '../electron/engine/runtime/block-probe.js';
import type { LayerRange } from '../electron/engine/runtime/layer-range.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import type { KvCache } from '../electron/engine/runtime/kv-store.js';
import { median } from '../electron/engine/median.js';

export interface StagePredictionOptions {
  /** A `kiwi synth` shape name. */
  shape: string;
  quant: string;
  /** Threads of the bandwidth probe, the block probe and every stage; default all cores. */
  threads?: number;
  /** Ranges to time; `head` defaults to holding it when the range ends at the last layer. */
  ranges: (blockCount: number) => Array<LayerRange & { head?: boolean }>;
  /** An existing GGUF of `shape` and `quant` to use instead of synthesizing one. */
  modelPath?: string;
  warmupRuns?: number;
  /** Timing rounds; each runs `runsPerRound` decode steps of every stage in turn. */
  rounds?: number;
  runsPerRound?: number;
  log?: (line: string) => void;
}

export interface StagePredictionRow {
  start: number;
  end: number;
  head: boolean;
  blocks: number;
  measured_ms: number;
  predicted_bandwidth_ms: number;
  predicted_block_ms_ms: number;
  /** predicted / measured. */
  bandwidth_ratio: number;
  block_ms_ratio: number;
  /** The same stage over a cache of PROBE_FAR_POSITIONS more positions, and the measured tier's price there. */
  measured_far_ms: number;
  predicted_far_ms: number;
  far_ratio: number;
}

export interface StagePrediction {
  model: string;
  quant: string;
  threads: string;
  provider: string;
  host_bandwidth_gbps: number;
  /** Every bandwidth round: 3 before the stages, one per round of them, 3 after. */
  host_bandwidth_samples_gbps: number[];
  bandwidth_method: string;
  /** The probe's block: what one more block adds to a step. */
  probe_block_ms: number;
  /** The probe's one-block stage: what `kiwi bench --model` reported as block_ms before the split. */
  probe_one_block_ms: number;
  /** The probe's fixed part of a step (one-block stage less its block). */
  probe_step_ms: number;
  /** The probe's price of a cached position per block (its long stage over PROBE_FAR_POSITIONS positions). */
  probe_position_ms: number;
  /** The probe's head (a one-block stage with and without it); null where it has none (the block time scaled by bytes prices the head). */
  probe_head_ms: number | null;
  /** GGUF bytes of a block and of the head's reads; the runtime's packed bytes of the same. */
  block_bytes: number;
  head_bytes: number;
  block_read_bytes: number;
  head_read_bytes: number;
  runs: number;
  /** 1-minute load average before and after (the machine may be shared: read the figures with it). */
  load_average: { before: number; after: number };
  stages: StagePredictionRow[];
  /** Mean of |predicted / measured - 1| over the stages. */
  mean_abs_error: { bandwidth: number; block_ms: number };
  /** Median of |predicted / measured - 1| over the stages (issue 14's measure); far: the block_ms tier over the long cache. */
  median_abs_error: { bandwidth: number; block_ms: number; far: number };
}

export async function measureStagePrediction(opts: StagePredictionOptions): Promise<StagePrediction> {
  const log = opts.log ?? (() => undefined);
  const warmupRuns = opts.warmupRuns ?? 3;
  const rounds = opts.rounds ?? 8;
  const runsPerRound = opts.runsPerRound ?? 5;
  const runs = rounds * runsPerRound;
  const quant = SYNTH_QUANTS[opts.quant];
  if (quant === undefined) throw new Error(`unknown quant ${opts.quant}`);
  const loadBefore = loadavg()[0]!;
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-stage-'));
  try {
    const path = opts.modelPath ?? join(dir, `${opts.shape}-${opts.quant}.gguf`);
    if (opts.modelPath === undefined) {
      log(`synthesizing ${opts.shape} ${opts.quant}`);
      await synthesizeModel({ shape: resolveShape(opts.shape), quant, out: path, seed: 1 });
    }
    const file = await openGguf(path);
    const sizes: ModelSizes = modelSizesFromGguf(file);

    // This machine's bandwidth as `kiwi bench` measures it (its probe, every core), one round before
    // each round of stages and a few before and after them (the machine may be shared: the median
    // of all rounds stands for the run, under the same load as the stages).
    const threads = opts.threads;
    const bandwidthSamples: number[] = [];
    let bandwidthMethod = '';
    const bandwidth = async (bwRounds: number): Promise<void> => {
      const b = await measureHostBandwidth({ rounds: bwRounds, ...(threads !== undefined ? { threads } : {}) });
      bandwidthSamples.push(...b.samplesGBps);
      bandwidthMethod = b.method;
    };
    log('measuring host bandwidth');
    await bandwidth(3);

    const positions = warmupRuns + rounds * runsPerRound + 1;
    // The block probe of `kiwi bench --model` (a one-block and a PROBE_BLOCKS-block stage of the model's block, and
    // the one-block stage with the model's head), timed in the same rounds as the stages so that all see the same load.
    const probe = await openBlockProbe(blockShapeOf(file), { positions, ...(threads !== undefined ? { threads } : {}), onProgress: log });
    const probeSamples: [number[], number[]] = [[], []];
    const positionSamples: [number[], number[]] = [[], []];
    const headSamples: [number[], number[]] = [[], []];
    const shape = await modelShapeFromGguf(file, { maxPositions: PROBE_FAR_POSITIONS + positions + 8 });
    type Timed = { range: LayerRange; head: boolean; stage: Stage; cache: KvCache; far: KvCache; samples: number[]; farSamples: number[]; steps: number };
    const stages: Timed[] = [];
    // Decode input: a token id for the first stage, else a hidden state of unit scale.
    const hidden = Float32Array.from({ length: shape.hidden }, (_, i) => Math.sin(i * 12.9898) * 0.5);
    const step = async (s: Timed, cache = s.cache): Promise<number> => {
      const input =
        s.range.start === 0
          ? { kind: 'ids' as const, ids: BigInt64Array.of(BigInt(300 + s.steps)), batch: 1, seq: 1 }
          : { kind: 'hidden' as const, hidden, batch: 1, seq: 1 };
      s.steps++;
      const t0 = performance.now();
      await s.stage.forward(input, [cache]);
      return performance.now() - t0;
    };
    /** A cache of PROBE_FAR_POSITIONS positions for `stage`, filled in prefill chunks. */
    const farCache = async (stage: Stage, start: number): Promise<KvCache> => {
      const c = stage.emptyCache(PROBE_FAR_POSITIONS + positions);
      for (let p = 0; p < PROBE_FAR_POSITIONS; p += 256) {
        const n = Math.min(256, PROBE_FAR_POSITIONS - p);
        const input = start === 0
          ? { kind: 'ids' as const, ids: BigInt64Array.from({ length: n }, (_, j) => BigInt(300 + ((p + j) % 5000))), batch: 1, seq: n }
          : { kind: 'hidden' as const, hidden: Float32Array.from({ length: n * shape.hidden }, (_, i) => hidden[i % shape.hidden]!), batch: 1, seq: n };
        await stage.forward(input, [c]);
      }
      return c;
    };
    try {
      for (const range of opts.ranges(shape.blockCount)) {
        const head = range.head ?? range.end === shape.blockCount;
        log(`building stage [${range.start}, ${range.end})${head ? ' + head' : ''}`);
        // With the replay inputs, as ring stages open (a plain step runs their one-position dummy row).
        const stage = await Stage.open(file, shape, { ...range, head }, { accuracyLevel: 4, replayInputs: true, ...(threads !== undefined ? { threads } : {}) });
        stages.push({ range, head, stage, cache: stage.emptyCache(positions), far: await farCache(stage, range.start), samples: [], farSamples: [], steps: 0 });
      }
      for (let i = 0; i < warmupRuns; i++) await probe.pair(i);
      for (let i = 0; i < warmupRuns; i++) await probe.far(i);
      for (let i = 0; i < warmupRuns; i++) await probe.head?.(i);
      for (const s of stages) for (let i = 0; i < warmupRuns; i++) await step(s);
      for (const s of stages) for (let i = 0; i < warmupRuns; i++) await step(s, s.far);
      // Rounds over all stages in turn, so a burst of load from elsewhere on the machine falls on
      // every stage alike instead of on whichever was being timed.
      for (let r = 0; r < rounds; r++) {
        log(`round ${r + 1}/${rounds}`);
        await bandwidth(1);
        for (let i = 0; i < runsPerRound; i++) {
          const [one, two] = await probe.pair(warmupRuns + r * runsPerRound + i);
          probeSamples[0].push(one);
          probeSamples[1].push(two);
          const [near, far] = await probe.far(warmupRuns + r * runsPerRound + i);
          positionSamples[0].push(near);
          positionSamples[1].push(far);
          const head = await probe.head?.(warmupRuns + r * runsPerRound + i);
          if (head !== undefined) {
            headSamples[0].push(head[0]);
            headSamples[1].push(head[1]);
          }
        }
        for (const s of stages) for (let i = 0; i < runsPerRound; i++) s.samples.push(await step(s));
        for (const s of stages) for (let i = 0; i < runsPerRound; i++) s.farSamples.push(await step(s, s.far));
      }
    } finally {
      for (const s of stages) await s.stage.dispose();
      await probe.dispose();
    }
    log('measuring host bandwidth again');
    await bandwidth(3);
    const gbps = round(median(bandwidthSamples), 2);
    const split = splitStepTime(...probeSamples);
    const stepMs = round(split.stepMs);
    const blockMs = round(split.blockMs);
    const positionMs = positionTime(...positionSamples, PROBE_BLOCKS, PROBE_FAR_POSITIONS);
    const headMs = headSamples[0].length > 0 ? round(headTime(...headSamples)) : undefined;
    const fleet = (measured?: { blockMs: number; headMs?: number }): Fleet => ({
      model: sizes,
      context: 256,
      concurrency: 1,
      devices: [{ name: 'this', memoryBytes: 1e15, bandwidthGBps: gbps, stepMs, ...measured }],
      rtts: [],
    });
    const byBandwidth = deviceCosts(fleet(), 'bandwidth')[0]!;
    const byProbe = deviceCosts(fleet({ blockMs, ...(headMs !== undefined ? { headMs } : {}) }), 'measured')[0]!;
    const rows: StagePredictionRow[] = stages.map((s) => {
      const blocks = s.range.end - s.range.start;
      const measured = median(s.samples);
      const bw = stageCost(byBandwidth, blocks, s.head);
      const probe = stageCost(byProbe, blocks, s.head);
      const measuredFar = median(s.farSamples);
      const predictedFar = probe + blocks * positionMs * PROBE_FAR_POSITIONS;
      return {
        start: s.range.start,
        end: s.range.end,
        head: s.head,
        blocks,
        measured_ms: round(measured),
        predicted_bandwidth_ms: round(bw),
        predicted_block_ms_ms: round(probe),
        bandwidth_ratio: round(bw / measured),
        block_ms_ratio: round(probe / measured),
        measured_far_ms: round(measuredFar),
        predicted_far_ms: round(predictedFar),
        far_ratio: round(predictedFar / measuredFar),
      };
    });
    const provider = probe.provider;
    type RatioKey = 'bandwidth_ratio' | 'block_ms_ratio' | 'far_ratio';
    const mae = (key: RatioKey): number => round(rows.reduce((a, r) => a + Math.abs(r[key] - 1), 0) / rows.length);
    const mde = (key: RatioKey): number => round(median(rows.map((r) => Math.abs(r[key] - 1))));
    return {
      model: opts.shape,
      quant: opts.quant,
      threads: threads !== undefined ? String(threads) : 'all cores',
      provider,
      host_bandwidth_gbps: gbps,
      host_bandwidth_samples_gbps: bandwidthSamples.map((x) => round(x, 2)),
      bandwidth_method: bandwidthMethod,
      probe_block_ms: blockMs,
      probe_one_block_ms: round(median(probeSamples[0])),
      probe_step_ms: stepMs,
      probe_position_ms: round(positionMs, 7),
      probe_head_ms: headMs ?? null,
      block_bytes: sizes.blockBytes,
      head_bytes: sizes.headBytes,
      block_read_bytes: sizes.blockResidentBytes ?? sizes.blockBytes,
      head_read_bytes: sizes.headReadBytes ?? sizes.headBytes,
      runs,
      load_average: { before: round(loadBefore, 2), after: round(loadavg()[0]!, 2) },
      stages: rows,
      mean_abs_error: { bandwidth: mae('bandwidth_ratio'), block_ms: mae('block_ms_ratio') },
      median_abs_error: { bandwidth: mde('bandwidth_ratio'), block_ms: mde('block_ms_ratio'), far: mde('far_ratio') },
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export function formatStagePrediction(p: StagePrediction): string {
  const header = ['stage', 'blocks', 'measured ms', 'bandwidth tier ms', 'ratio', 'block_ms tier ms', 'ratio', `measured @${PROBE_FAR_POSITIONS}`, 'predicted', 'ratio'];
  const body = p.stages.map((r) => [
    `[${r.start}, ${r.end})${r.head ? ' + head' : ''}`,
    String(r.blocks),
    r.measured_ms.toFixed(2),
    r.predicted_bandwidth_ms.toFixed(2),
    `${r.bandwidth_ratio.toFixed(2)}×`,
    r.predicted_block_ms_ms.toFixed(2),
    `${r.block_ms_ratio.toFixed(2)}×`,
    r.measured_far_ms.toFixed(2),
    r.predicted_far_ms.toFixed(2),
    `${r.far_ratio.toFixed(2)}×`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cols: string[]): string => cols.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [
    `stage prediction on this machine: ${p.model} ${p.quant}, ${p.provider} (${p.threads} threads), host bandwidth ${p.host_bandwidth_gbps} GB/s (${p.bandwidth_method}), ` +
      `probe block ${p.probe_block_ms} ms + step ${p.probe_step_ms} ms${p.probe_head_ms !== null ? ` + head ${p.probe_head_ms} ms` : ''} + ${(p.probe_position_ms * 1000).toFixed(3)} µs a cached position (one-block stage ${p.probe_one_block_ms} ms), load average ${p.load_average.before} → ${p.load_average.after}, median of ${p.runs} runs`,
    line(header),
    ...body.map(line),
    `|predicted/measured - 1|: bandwidth tier median ${pct(p.median_abs_error.bandwidth)} (mean ${pct(p.mean_abs_error.bandwidth)}), ` +
      `block_ms tier median ${pct(p.median_abs_error.block_ms)} (mean ${pct(p.mean_abs_error.block_ms)}), over ${PROBE_FAR_POSITIONS} cached positions median ${pct(p.median_abs_error.far)}`,
  ].join('\n');
}

function pct(x: number): string {
  return `${(x * 100).toFixed(0)}%`;
}

function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  const arg = (name: string): string | undefined => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const shape = arg('--shape') ?? 'llama-3.2-1b';
  const quant = arg('--quant') ?? 'q4_0';
  const layers = (arg('--layers') ?? '1,2,4,8,16').split(',').map(Number);
  const modelPath = arg('--model');
  const threads = arg('--threads');
  const p = await measureStagePrediction({
    shape,
    quant,
    ...(modelPath !== undefined ? { modelPath } : {}),
    ...(threads !== undefined ? { threads: Number(threads) } : {}),
    ...(arg('--rounds') !== undefined ? { rounds: Number(arg('--rounds')) } : {}),
    // [0, n) without the head (token ids in, the embedding lookup) and [L - n, L) with it (hidden states in).
    ranges: (n) => layers.filter((k) => k <= n).flatMap((k) => [{ start: 0, end: k, head: false }, { start: n - k, end: n, head: true }]),
    log: (line) => console.error(`stage prediction: ${line}`),
  });
  console.log(formatStagePrediction(p));
  await mkdir(join('bench', 'results'), { recursive: true });
  const out = join('bench', 'results', `stage-prediction-${shape}-${quant}.json`);
  await writeFile(out, `${JSON.stringify({ generated_at: new Date().toISOString(), ...p }, null, 2)}\n`);
  console.log(`wrote ${out}`);
}
