// How well the planner's cost model predicts a measured stage on this machine (issue 4): for a
// `kiwi synth` model, each layer range is opened as a real stage and its single-token decode step
// timed (median after warm-up); the prediction comes from deviceCosts() with this machine as the
// only device, in the bandwidth tier (measured host bandwidth) and in the measured tier (the
// per-block probe of `kiwi bench --model`). Used by bench/planner.ts.
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { blockProbeFor } from '../electron/commands/bench.js';
import { modelSizesFromSummary } from '../electron/commands/plan.js';
import { runDeviceBench } from '../electron/engine/device/device-bench.js';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { summarizeModel } from '../electron/engine/model/model-summary.js';
import { resolveShape } from '../electron/engine/model/synth/shapes.js';
import { SYNTH_QUANTS, synthesizeModel } from '../electron/engine/model/synth/synth.js';
import { deviceCosts } from '../electron/engine/planner/cost-model.js';
import type { Fleet, ModelSizes } from '../electron/engine/planner/fleet.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import type { LayerRange } from '../electron/engine/runtime/layer-range.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import type { KvCache } from '../electron/engine/runtime/stage.js';
import { median } from '../electron/engine/median.js';

export interface StagePredictionOptions {
  /** A `kiwi synth` shape name. */
  shape: string;
  quant: string;
  /** Threads of the bandwidth probe, the block probe and every stage; default all cores. */
  threads?: number;
  /** Ranges to time; the one that ends at the last layer holds the head. */
  ranges: (blockCount: number) => LayerRange[];
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
}

export interface StagePrediction {
  model: string;
  quant: string;
  threads: string;
  provider: string;
  host_bandwidth_gbps: number;
  bandwidth_method: string;
  probe_block_ms: number;
  block_bytes: number;
  head_bytes: number;
  runs: number;
  /** 1-minute load average before and after (the machine may be shared: read the figures with it). */
  load_average: { before: number; after: number };
  stages: StagePredictionRow[];
  /** Mean of |predicted / measured - 1| over the stages. */
  mean_abs_error: { bandwidth: number; block_ms: number };
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
    const path = join(dir, `${opts.shape}-${opts.quant}.gguf`);
    log(`synthesizing ${opts.shape} ${opts.quant}`);
    await synthesizeModel({ shape: resolveShape(opts.shape), quant, out: path, seed: 1 });
    const file = await openGguf(path);
    const sizes: ModelSizes = modelSizesFromSummary(summarizeModel(file));

    // This machine as `kiwi bench --model` measures it (fresh: a private cache folder).
    log('measuring host bandwidth and one probe block');
    const threads = opts.threads;
    const bench = await runDeviceBench({
      cacheDir: join(dir, 'bench'),
      blockProbe: await blockProbeFor(path, undefined, log, threads),
      ...(threads !== undefined ? { bandwidth: { threads } } : {}),
      onProgress: log,
    });
    if (bench.block === null) throw new Error('the device bench returned no block time');
    const gbps = bench.bandwidth.host_gbps;
    const fleet = (blockMs?: number): Fleet => ({
      model: sizes,
      context: 256,
      concurrency: 1,
      devices: [{ name: 'this', memoryBytes: 1e15, bandwidthGBps: gbps, ...(blockMs !== undefined ? { blockMs } : {}) }],
      rtts: [],
    });
    const byBandwidth = deviceCosts(fleet(), 'bandwidth')[0]!;
    const byProbe = deviceCosts(fleet(bench.block.block_ms), 'measured')[0]!;

    const positions = warmupRuns + rounds * runsPerRound + 1;
    const shape = await modelShapeFromGguf(file, { maxPositions: positions + 8 });
    const stages: Array<{ range: LayerRange; head: boolean; stage: Stage; cache: KvCache; samples: number[]; steps: number }> = [];
    // Decode input: a token id for the first stage, else a hidden state of unit scale.
    const hidden = Float32Array.from({ length: shape.hidden }, (_, i) => Math.sin(i * 12.9898) * 0.5);
    const step = async (s: (typeof stages)[number]): Promise<number> => {
      const input =
        s.range.start === 0
          ? { kind: 'ids' as const, ids: BigInt64Array.of(BigInt(300 + s.steps)), batch: 1, seq: 1 }
          : { kind: 'hidden' as const, hidden, batch: 1, seq: 1 };
      s.steps++;
      const t0 = performance.now();
      await s.stage.forward(input, [s.cache]);
      return performance.now() - t0;
    };
    try {
      for (const range of opts.ranges(shape.blockCount)) {
        const head = range.end === shape.blockCount;
        log(`building stage [${range.start}, ${range.end})${head ? ' + head' : ''}`);
        const stage = await Stage.open(file, shape, { ...range, head }, { accuracyLevel: 4, ...(threads !== undefined ? { threads } : {}) });
        stages.push({ range, head, stage, cache: stage.emptyCache(positions), samples: [], steps: 0 });
      }
      for (const s of stages) for (let i = 0; i < warmupRuns; i++) await step(s);
      // Rounds over all stages in turn, so a burst of load from elsewhere on the machine falls on
      // every stage alike instead of on whichever was being timed.
      for (let r = 0; r < rounds; r++) {
        log(`round ${r + 1}/${rounds}`);
        for (const s of stages) for (let i = 0; i < runsPerRound; i++) s.samples.push(await step(s));
      }
    } finally {
      for (const s of stages) await s.stage.dispose();
    }
    const rows: StagePredictionRow[] = stages.map((s) => {
      const blocks = s.range.end - s.range.start;
      const measured = median(s.samples);
      const bw = blocks * byBandwidth.perBlock + (s.head ? byBandwidth.head : 0);
      const probe = blocks * byProbe.perBlock + (s.head ? byProbe.head : 0);
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
      };
    });
    const provider = stages[0]?.stage.provider ?? 'none';
    const mae = (key: 'bandwidth_ratio' | 'block_ms_ratio'): number => round(rows.reduce((a, r) => a + Math.abs(r[key] - 1), 0) / rows.length);
    return {
      model: opts.shape,
      quant: opts.quant,
      threads: threads !== undefined ? String(threads) : 'all cores',
      provider,
      host_bandwidth_gbps: gbps,
      bandwidth_method: bench.bandwidth.method,
      probe_block_ms: bench.block.block_ms,
      block_bytes: sizes.blockBytes,
      head_bytes: sizes.headBytes,
      runs,
      load_average: { before: round(loadBefore, 2), after: round(loadavg()[0]!, 2) },
      stages: rows,
      mean_abs_error: { bandwidth: mae('bandwidth_ratio'), block_ms: mae('block_ms_ratio') },
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export function formatStagePrediction(p: StagePrediction): string {
  const header = ['stage', 'blocks', 'measured ms', 'bandwidth tier ms', 'ratio', 'block_ms tier ms', 'ratio'];
  const body = p.stages.map((r) => [
    `[${r.start}, ${r.end})${r.head ? ' + head' : ''}`,
    String(r.blocks),
    r.measured_ms.toFixed(2),
    r.predicted_bandwidth_ms.toFixed(2),
    `${r.bandwidth_ratio.toFixed(2)}×`,
    r.predicted_block_ms_ms.toFixed(2),
    `${r.block_ms_ratio.toFixed(2)}×`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cols: string[]): string => cols.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [
    `stage prediction on this machine: ${p.model} ${p.quant}, ${p.provider} (${p.threads} threads), host bandwidth ${p.host_bandwidth_gbps} GB/s (${p.bandwidth_method}), ` +
      `probe block ${p.probe_block_ms} ms, load average ${p.load_average.before} → ${p.load_average.after}, median of ${p.runs} runs`,
    line(header),
    ...body.map(line),
    `mean |predicted/measured - 1|: bandwidth tier ${(p.mean_abs_error.bandwidth * 100).toFixed(0)}%, block_ms tier ${(p.mean_abs_error.block_ms * 100).toFixed(0)}%`,
  ].join('\n');
}

function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
