// Kiwi's planner against the two standard divisions (GPipe's uniform split, exo's
// memory-proportional split) on heterogeneous fleets modelled on the Kafila paper's.
// Then how well the cost model predicts a measured stage on this machine (bench/stage-prediction.ts).
// Run: npx tsx bench/planner.ts [--stage-shape llama-3.2-1b] [--stage-quant q4_0] [--stage-threads N] [--no-stage]
// Prints tables and writes bench/results/planner.json; exits non-zero if Kiwi is ever worse than
// a baseline that fits, or fails to place a model a baseline places.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isKiwiError } from '../electron/engine/errors.js';
import type { DeviceSpec, Fleet, ModelSizes } from '../electron/engine/planner/fleet.js';
import { planFleet, type Division } from '../electron/engine/planner/plan.js';
import { formatStagePrediction, measureStagePrediction } from './stage-prediction.js';

const GB = 1e9;

// Sizes from the GGUF layouts of Q4_K_M files (block = one decoder layer's tensors; head read =
// output projection + final norm; head resident = embedding + output projection). KV: 8 KV heads ×
// 128 dims × (K, V) × fp16 = 4096 bytes per token per layer for all three.
const qwen3_8b: ModelSizes = { name: 'qwen3-8b-q4_k_m', layers: 36, blockBytes: 115e6, headBytes: 510e6, headResidentBytes: 860e6, kvBytesPerTokenPerLayer: 4096 };
const qwen3_32b: ModelSizes = { name: 'qwen3-32b-q4_k_m', layers: 64, blockBytes: 292e6, headBytes: 640e6, headResidentBytes: 1070e6, kvBytesPerTokenPerLayer: 4096 };
const llama3_70b: ModelSizes = { name: 'llama-3.1-70b-q4_k_m', layers: 80, blockBytes: 490e6, headBytes: 862e6, headResidentBytes: 1453e6, kvBytesPerTokenPerLayer: 4096 };

interface Case {
  name: string;
  what: string;
  fleet: Fleet;
}

// Memory is what a member can give the model: VRAM for a discrete GPU, about 65% of unified
// memory on a Mac (macOS's default GPU wired limit), RAM minus the OS for a CPU box.
const cases: Case[] = [
  {
    name: 'lan-apple-nvidia',
    what: 'shared LAN: two Nvidia desktops and three Macs',
    fleet: {
      model: qwen3_8b,
      context: 8192,
      concurrency: 4,
      devices: [
        { name: 'm2-air-16', memoryBytes: 10.4 * GB, bandwidthGBps: 100, nat: 'restrictive', rendezvousRttMs: 21 },
        { name: 'rtx3060-12', memoryBytes: 11.5 * GB, bandwidthGBps: 360, nat: 'restrictive', rendezvousRttMs: 20 },
        { name: 'm1-pro-32', memoryBytes: 20.8 * GB, bandwidthGBps: 200, nat: 'restrictive', rendezvousRttMs: 22 },
        { name: 'rtx4090-24', memoryBytes: 23 * GB, bandwidthGBps: 1008, nat: 'restrictive', rendezvousRttMs: 20 },
        { name: 'm3-max-36', memoryBytes: 23.4 * GB, bandwidthGBps: 300, nat: 'restrictive', rendezvousRttMs: 23 },
      ],
      rtts: lan(['m2-air-16', 'rtx3060-12', 'm1-pro-32', 'rtx4090-24', 'm3-max-36'], 1.5),
    },
  },
  {
    name: 'intercontinental',
    what: 'five members on two continents, some behind restrictive NATs',
    fleet: {
      model: qwen3_32b,
      context: 4096,
      concurrency: 4,
      devices: [
        { name: 'us-rtx4090', memoryBytes: 23 * GB, bandwidthGBps: 1008, nat: 'permissive', rendezvousRttMs: 12 },
        { name: 'us-m2-max', memoryBytes: 41.6 * GB, bandwidthGBps: 400, nat: 'restrictive', rendezvousRttMs: 18 },
        { name: 'eu-rtx3090', memoryBytes: 23 * GB, bandwidthGBps: 936, nat: 'restrictive', rendezvousRttMs: 95 },
        { name: 'eu-rtx4070', memoryBytes: 11.5 * GB, bandwidthGBps: 504, nat: 'permissive', rendezvousRttMs: 92 },
        { name: 'asia-m3-pro-18', memoryBytes: 11.7 * GB, bandwidthGBps: 150, nat: 'restrictive', rendezvousRttMs: 180 },
      ],
      rtts: [
        { a: 'eu-rtx3090', b: 'eu-rtx4070', rttMs: 4 },
        { a: 'us-rtx4090', b: 'us-m2-max', rttMs: 2 },
      ],
    },
  },
  {
    name: 'memory-speed-disagree',
    what: 'memory and speed rank differently: a big slow CPU box, a fast small GPU',
    fleet: {
      model: llama3_70b,
      context: 4096,
      concurrency: 2,
      devices: [
        { name: 'rtx4090-24', memoryBytes: 23 * GB, bandwidthGBps: 1008 },
        { name: 'cpu-ddr4-64', memoryBytes: 58 * GB, bandwidthGBps: 38 },
        { name: 'm2-ultra-64', memoryBytes: 48 * GB, bandwidthGBps: 800 },
        { name: 'rtx3080-10', memoryBytes: 9.5 * GB, bandwidthGBps: 760 },
      ],
      rtts: lan(['rtx4090-24', 'cpu-ddr4-64', 'm2-ultra-64', 'rtx3080-10'], 1),
    },
  },
  {
    name: 'uniform-cannot-place',
    what: 'a laptop too small for an equal share of the model',
    fleet: {
      model: qwen3_32b,
      context: 8192,
      concurrency: 4,
      devices: [
        { name: 'rtx4090-24', memoryBytes: 23 * GB, bandwidthGBps: 1008 },
        { name: 'laptop-4060-8', memoryBytes: 7.2 * GB, bandwidthGBps: 256 },
        { name: 'rtx3090-24', memoryBytes: 23 * GB, bandwidthGBps: 936 },
      ],
      rtts: lan(['rtx4090-24', 'laptop-4060-8', 'rtx3090-24'], 1),
    },
  },
  {
    name: 'measured-block-times',
    what: 'LAN fleet with measured per-block times (the best input)',
    fleet: {
      model: qwen3_8b,
      context: 4096,
      concurrency: 4,
      devices: [
        { name: 'rtx4090-24', memoryBytes: 23 * GB, bandwidthGBps: 1008, blockMs: 0.16 },
        { name: 'm2-pro-16', memoryBytes: 10.4 * GB, bandwidthGBps: 200, blockMs: 0.75 },
        { name: 'cpu-ddr5-32', memoryBytes: 28 * GB, bandwidthGBps: 70, blockMs: 2.4 },
      ],
      rtts: lan(['rtx4090-24', 'm2-pro-16', 'cpu-ddr5-32'], 1),
    },
  },
];

function lan(names: string[], rttMs: number): Fleet['rtts'] {
  return names.flatMap((a, i) => names.slice(i + 1).map((b) => ({ a, b, rttMs })));
}

interface Row {
  fleet: string;
  what: string;
  model: string;
  devices: number;
  tier: string;
  kiwi: { bottleneck_ms: number; utilization: number; circuit_ms: number; head: string; blocks: Record<string, number> } | { error: string };
  uniform: BaselineRow;
  proportional: BaselineRow;
  uniform_over_kiwi: number | null;
  proportional_over_kiwi: number | null;
}

interface BaselineRow {
  fits: boolean;
  bottleneck_ms: number;
  utilization: number;
}

const rows: Row[] = [];
const failures: string[] = [];
for (const c of cases) {
  const names = (i: number): string => (c.fleet.devices[i] as DeviceSpec).name;
  const baseline = (d: Division): BaselineRow => ({ fits: d.fits, bottleneck_ms: round(d.bottleneck), utilization: round(d.utilization, 3) });
  let row: Row;
  try {
    const plan = planFleet(c.fleet);
    const kiwi = plan.division;
    row = {
      fleet: c.name,
      what: c.what,
      model: c.fleet.model.name,
      devices: c.fleet.devices.length,
      tier: plan.tier,
      kiwi: {
        bottleneck_ms: round(kiwi.bottleneck),
        utilization: round(kiwi.utilization, 3),
        circuit_ms: round(plan.circuit),
        head: names(plan.head),
        blocks: Object.fromEntries(kiwi.stages.map((s) => [names(s.device), s.end - s.start])),
      },
      uniform: baseline(plan.baselines.uniform),
      proportional: baseline(plan.baselines.proportional),
      uniform_over_kiwi: round(plan.baselines.uniform.bottleneck / kiwi.bottleneck, 2),
      proportional_over_kiwi: round(plan.baselines.proportional.bottleneck / kiwi.bottleneck, 2),
    };
    for (const [name, b] of Object.entries(plan.baselines)) {
      if (b.fits && b.bottleneck < kiwi.bottleneck * (1 - 1e-12)) failures.push(`${c.name}: Kiwi's bottleneck ${kiwi.bottleneck} is worse than ${name}'s ${b.bottleneck}`);
    }
  } catch (err) {
    if (!isKiwiError(err)) throw err;
    failures.push(`${c.name}: Kiwi could not place the model: ${err.message}`);
    row = {
      fleet: c.name,
      what: c.what,
      model: c.fleet.model.name,
      devices: c.fleet.devices.length,
      tier: '-',
      kiwi: { error: err.code },
      uniform: { fits: false, bottleneck_ms: NaN, utilization: NaN },
      proportional: { fits: false, bottleneck_ms: NaN, utilization: NaN },
      uniform_over_kiwi: null,
      proportional_over_kiwi: null,
    };
  }
  rows.push(row);
}

printTable(rows);

const args = process.argv.slice(2);
const argValue = (name: string, fallback: string): string => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
};
// Stages of a synthetic model: the first quarter (with the embedding), the middle half, the last
// quarter with the head, one block, and the whole model.
const stagePrediction = args.includes('--no-stage')
  ? null
  : await measureStagePrediction({
      shape: argValue('--stage-shape', 'llama-3.2-1b'),
      quant: argValue('--stage-quant', 'q4_0'),
      ...(args.includes('--stage-threads') ? { threads: Number(argValue('--stage-threads', '0')) } : {}),
      ranges: (n) => [
        { start: 0, end: Math.floor(n / 4) },
        { start: Math.floor(n / 4), end: Math.floor((3 * n) / 4) },
        { start: Math.floor(n / 2), end: Math.floor(n / 2) + 1 },
        { start: Math.floor((3 * n) / 4), end: n },
        { start: 0, end: n },
      ],
      log: (line) => console.error(`stage prediction: ${line}`),
    });
if (stagePrediction !== null) console.log(`\n${formatStagePrediction(stagePrediction)}`);

const result = {
  generated_at: new Date().toISOString(),
  note: 'bottlenecks in ms per token from the cost model (bandwidth tier unless measured block times are given); a baseline that does not fit in memory cannot serve at all',
  // Predicted (cost model: bandwidth tier, and block_ms tier from the per-block probe) vs measured decode ms per token of real stages.
  stage_prediction: stagePrediction,
  fleets: rows,
  failures,
};
await mkdir(join('bench', 'results'), { recursive: true });
await writeFile(join('bench', 'results', 'planner.json'), `${JSON.stringify(result, null, 2)}\n`);
console.log(`\nwrote bench/results/planner.json`);
if (failures.length > 0) {
  console.error(failures.join('\n'));
  process.exitCode = 1;
}

function printTable(rs: Row[]): void {
  const header = ['fleet', 'model', 'dev', 'kiwi ms', 'util', 'uniform ms', 'util', 'prop. ms', 'util', 'uni/kiwi', 'prop/kiwi'];
  const cell = (b: BaselineRow): string[] => [b.fits ? b.bottleneck_ms.toFixed(2) : `${b.bottleneck_ms.toFixed(2)} (no fit)`, pct(b.utilization)];
  const body = rs.map((r) => [
    r.fleet,
    r.model,
    String(r.devices),
    ...('error' in r.kiwi ? [r.kiwi.error, '-'] : [r.kiwi.bottleneck_ms.toFixed(2), pct(r.kiwi.utilization)]),
    ...cell(r.uniform),
    ...cell(r.proportional),
    r.uniform_over_kiwi === null ? '-' : `${r.uniform_over_kiwi.toFixed(2)}×`,
    r.proportional_over_kiwi === null ? '-' : `${r.proportional_over_kiwi.toFixed(2)}×`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] as string).length)));
  const line = (cols: string[]): string => cols.map((c, i) => (i < 2 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  ');
  console.log(line(header));
  for (const b of body) console.log(line(b));
  console.log('');
  for (const r of rs) {
    if ('error' in r.kiwi) continue;
    console.log(`${r.fleet} (${r.what}): head ${r.kiwi.head}, blocks ${JSON.stringify(r.kiwi.blocks)}, circuit ${r.kiwi.circuit_ms} ms`);
  }
}

function pct(x: number): string {
  return Number.isFinite(x) ? `${(x * 100).toFixed(0)}%` : '-';
}

function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
