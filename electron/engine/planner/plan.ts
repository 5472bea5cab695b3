// The planner (Kafila §V): ring order from reachability, the exact block division for each choice
// of head, head placement with the anchor rule, admission, and the baselines for comparison.
// Pure: takes a validated Fleet, returns a plan or throws a KiwiError. Layer ranges are integer
// half-open [start, end).
import { KiwiError } from '../errors.js';
import { memoryShortfall } from './admission.js';
import { proportionalCounts, uniformCounts } from './baselines.js';
import { chooseTier, deviceCosts, stageCost, stageMemoryBytes, type DeviceCost, type Tier } from './cost-model.js';
import type { Fleet, RunningRange } from './fleet.js';
import { fetchBlocks, fewestMoves, heldPrefix, MOVE_MARGIN, reopenBlocks, stageCuts, type HeldPrefix } from './moves.js';
import { partitionChain } from './partition.js';
import { orderRing, type Ring, type RingEdge } from './ring-order.js';

/** Kafila keeps the anchor as head unless another head shortens the bottleneck by more than this. */
export const ANCHOR_MARGIN = 0.05;

export interface PlanOptions {
  /** Relative improvement another head must beat to replace the anchor (default 0.05). */
  anchorMargin?: number;
  /** The device holding the head now (re-planning keeps it when it is good enough); default: the first device. */
  currentHead?: string;
  /**
   * When devices say what they hold (DeviceSpec.holds): the share of the bottleneck a division may
   * give up to fetch fewer blocks (default MOVE_MARGIN, 0.05; 0: the fastest division, fewest
   * moves only among equals).
   */
  moveMargin?: number;
  /**
   * A re-plan after a loss may also give up one block on its bottleneck stage beyond moveMargin,
   * where that reopens at least this many blocks fewer in all (absent: never). Layers come whole:
   * at 11 blocks a stage one block is 9%, so the division that keeps the survivors' segments is
   * often just outside a 5% margin, and the fastest one reopens them whole, dropping their caches
   * too: seconds of recovery (bench/faults) for a stage one block slower until the next re-plan.
   */
  reopenSlackBlocks?: number;
}

export interface StagePlan {
  /** Index into fleet.devices. */
  device: number;
  start: number;
  end: number;
  head: boolean;
  /** Per-token cost: ms, or a relative unit in the `memory` tier. */
  cost: number;
  /** Of cost, the device's fixed part of a step (DeviceCost.step; 0 outside the time tiers), paid once per segment. */
  step: number;
  /** Of cost, the head's part (DeviceCost.head; 0 for a stage without it). */
  headCost: number;
  /** The sessions the stage runs in: more than one when a stage was reshaped or opened split (runtime/stage-segments.ts). */
  segments: number;
  /** The boundaries between those sessions (planner/moves.ts stageCuts). */
  cuts: readonly number[];
  /** What the stage's step adds per cached position of its request (blocks × DeviceCost.position); not in cost, which is at position 0. */
  position: number;
  memoryBytes: number;
  fits: boolean;
  /** Blocks of [start, end) the device does not hold (DeviceSpec.holds) and must fetch. */
  fetchBlocks: number;
}

export interface Division {
  /** In ring order from the head. */
  stages: StagePlan[];
  fits: boolean;
  bottleneck: number;
  /** Mean stage cost over the bottleneck: the share of the fleet's time spent working in a full pipeline. */
  utilization: number;
}

export interface PlanResult {
  tier: Tier;
  /** Device indices in ring order, starting with the head. */
  order: number[];
  head: number;
  division: Division;
  /** Edges in ring order from the head (none for a single device). */
  edges: RingEdge[];
  /**
   * One token's trip around the ring: Σ stage cost + Σ known edges' one-way time (half the RTT: a
   * token crosses each edge once, one way) + Σ hop cost (each edge's sending device's).
   */
  circuit: number;
  /** Per edge (ring order from the head): the sending device's measured hop cost beyond the one-way time (0 unmeasured). */
  hops: number[];
  baselines: { uniform: Division; proportional: Division };
  /** The exact bottleneck for each rotation of the anchor-first ring (null: does not fit). */
  rotations: Array<number | null>;
}

export function planFleet(fleet: Fleet, options: PlanOptions = {}): PlanResult {
  const { model, devices } = fleet;
  const m = devices.length;
  checkHolds(fleet);
  if (m > model.layers) {
    throw new KiwiError(
      'PLAN_TOO_MANY_DEVICES',
      `${m} devices cannot share ${model.layers} blocks: every admitted device needs at least one. Admit at most ${model.layers} devices.`,
      { devices: m, layers: model.layers },
    );
  }
  const tier = chooseTier(devices);
  const costs = deviceCosts(fleet, tier);
  const ring = orderRing(devices, fleet.rtts);

  const anchorName = options.currentHead ?? (devices[0]?.name as string);
  const anchorDevice = devices.findIndex((d) => d.name === anchorName);
  if (anchorDevice < 0) throw new KiwiError('USAGE', `the current head '${anchorName}' is not a device of this fleet`);
  const anchor = ring.order.indexOf(anchorDevice);

  // Exact division for every head choice (rotation of the ring).
  const solved = ring.order.map((_, r) => {
    const chain = rotate(ring.order, r);
    const part = partitionChain(chain.map((i) => costs[i] as DeviceCost), model.layers, 0);
    return part === null ? null : { r, chain, part };
  });
  const feasible = solved.filter((s) => s !== null);
  if (feasible.length === 0) throw insufficientMemory(fleet, costs);

  const circuitOf = (s: (typeof feasible)[number]): number =>
    s.part.counts.reduce((acc, k, i) => acc + stageCost(costs[s.chain[i] as number] as DeviceCost, k, i === 0), 0);
  let best = feasible[0] as (typeof feasible)[number];
  for (const s of feasible) {
    if (s.part.bottleneck < best.part.bottleneck || (s.part.bottleneck === best.part.bottleneck && circuitOf(s) < circuitOf(best))) best = s;
  }
  const margin = options.anchorMargin ?? ANCHOR_MARGIN;
  const atAnchor = solved[anchor];
  // Head changes cost a reload of the embedding; keep the anchor unless the gain beats the noise.
  const chosen =
    atAnchor != null && atAnchor.part.bottleneck - best.part.bottleneck <= margin * atAnchor.part.bottleneck ? atAnchor : best;

  const held = heldPrefix(devices.map((d) => d.holds), model.layers);
  const runs = devices.map((d) => d.runs);
  let counts = chosen.part.counts;
  if (devices.some((d) => (d.holds?.length ?? 0) > 0)) {
    // Re-plans keep what members hold: the division within the margin of this head's best
    // bottleneck that fetches the fewest blocks, then reopens the fewest on its busiest stage and
    // in all (stages kept as they run), unless the fastest one does no worse.
    const bound = chosen.part.bottleneck * (1 + (options.moveMargin ?? MOVE_MARGIN));
    const fewest = fewestMoves(costs, chosen.chain, model.layers, held, bound, runs);
    const work = (c: readonly number[]): number[] => {
      const reopened = perStage(chosen.chain, c, (d, s, e) => reopenBlocks(runs, d, s, e));
      return [sum(perStage(chosen.chain, c, (d, s, e) => fetchBlocks(held, d, s, e))), Math.max(...reopened), sum(reopened)];
    };
    if (fewest !== null && lexicographicallyLess(work(fewest), work(counts))) counts = fewest;
    if (options.reopenSlackBlocks !== undefined) {
      const slack = bottleneckBlockCost(costs, chosen.chain, chosen.part.counts);
      const wider = fewestMoves(costs, chosen.chain, model.layers, held, bound + slack, runs);
      if (wider !== null && lexicographicallyLess(work(wider), work(counts)) && (work(counts)[2] as number) - (work(wider)[2] as number) >= options.reopenSlackBlocks) counts = wider;
    }
  }
  const division = evaluate(costs, chosen.chain, counts, held, runs);
  const edges = rotate(ring.edges, chosen.r);
  // A hop's own cost (encode, crypto, hand-off) is paid per edge by the stage that sends on it.
  const hops = edges.map((e) => costs[e.from]?.hop ?? 0);
  const circuit = division.stages.reduce((acc, s) => acc + s.cost, 0) + edges.reduce((acc, e, i) => acc + oneWayMs(e) + (hops[i] as number), 0);

  // Baselines: same ring, head on the anchor.
  const baseChain = rotate(ring.order, anchor);
  const uniform = evaluate(costs, baseChain, uniformCounts(model.layers, m));
  const proportional = evaluate(
    costs,
    baseChain,
    proportionalCounts(
      model.layers,
      baseChain.map((i) => devices[i]?.memoryBytes ?? 0),
    ),
  );

  return {
    tier,
    order: chosen.chain,
    head: chosen.chain[0] as number,
    division,
    edges,
    circuit,
    hops,
    baselines: { uniform, proportional },
    rotations: solved.map((s) => (s === null ? null : s.part.bottleneck)),
  };
}

/** Stages, costs and fit of a division of blocks over a chain whose first device holds the head (`runs`: what each device runs now, whose reshape sets its segments). */
export function evaluate(costs: readonly DeviceCost[], chain: readonly number[], counts: readonly number[], held: HeldPrefix = [], runs: ReadonlyArray<RunningRange | undefined> = []): Division {
  let start = 0;
  const stages = chain.map((device, i) => {
    const blocks = counts[i] as number;
    const c = costs[device] as DeviceCost;
    const head = i === 0;
    const memoryBytes = stageMemoryBytes(c, blocks, head);
    const cuts = stageCuts(runs, device, start, start + blocks);
    const segments = cuts.length + 1;
    const stage: StagePlan = { device, start, end: start + blocks, head, cost: stageCost(c, blocks, head, segments), step: c.step ?? 0, headCost: head ? c.head : 0, segments, cuts, position: blocks * (c.position ?? 0), memoryBytes, fits: memoryBytes <= c.memoryBytes + (c.overheadBytes ?? 0), fetchBlocks: fetchBlocks(held, device, start, start + blocks) };
    start += blocks;
    return stage;
  });
  const bottleneck = Math.max(...stages.map((s) => s.cost));
  const mean = stages.reduce((acc, s) => acc + s.cost, 0) / stages.length;
  return { stages, fits: stages.every((s) => s.fits), bottleneck, utilization: bottleneck > 0 ? mean / bottleneck : 1 };
}

function insufficientMemory(fleet: Fleet, costs: readonly DeviceCost[]): KiwiError {
  const short = memoryShortfall(costs, fleet.model.layers);
  const device = fleet.devices[short.device]?.name as string;
  const others = short.cannotHoldABlock.filter((i) => i !== short.device).map((i) => fleet.devices[i]?.name);
  const gib = (short.shortByBytes / 2 ** 30).toFixed(2);
  const message = short.alone
    ? `the fleet cannot hold ${fleet.model.name} at context ${fleet.context} × ${fleet.concurrency} requests: '${device}' is short by ${short.shortByBytes} bytes (${gib} GiB) even with the best division. Free that much memory on '${device}', admit another device, or lower the context or concurrency.`
    : `the fleet cannot hold ${fleet.model.name} at context ${fleet.context} × ${fleet.concurrency} requests: '${device}' lacks ${short.shortByBytes} bytes (${gib} GiB) to hold even one block, and so do ${others.map((n) => `'${n}'`).join(', ')}. Give those devices more memory, leave them out, or lower the context or concurrency.`;
  return new KiwiError('PLAN_INSUFFICIENT_MEMORY', message, { device, short_by_bytes: short.shortByBytes });
}

/** One more block's cost on the bottleneck stage of `counts` over `chain`. */
function bottleneckBlockCost(costs: readonly DeviceCost[], chain: readonly number[], counts: readonly number[]): number {
  const stageCosts = chain.map((d, i) => stageCost(costs[d] as DeviceCost, counts[i] as number, i === 0));
  return (costs[chain[stageCosts.indexOf(Math.max(...stageCosts))] as number] as DeviceCost).perBlock;
}

/** Per stage of `counts` along `chain`, `blocks(device, start, end)` (blocks fetched, blocks reopened). */
function perStage(chain: readonly number[], counts: readonly number[], blocks: (device: number, start: number, end: number) => number): number[] {
  let start = 0;
  return chain.map((device, i) => {
    const k = counts[i] as number;
    start += k;
    return blocks(device, start - k, start);
  });
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

function lexicographicallyLess(a: readonly number[], b: readonly number[]): boolean {
  const i = a.findIndex((x, j) => x !== b[j]);
  return i >= 0 && (a[i] as number) < (b[i] as number);
}

function checkHolds(fleet: Fleet): void {
  for (const d of fleet.devices) {
    for (const r of d.holds ?? []) {
      if (!Number.isInteger(r.start) || !Number.isInteger(r.end) || r.start < 0 || r.end <= r.start || r.end > fleet.model.layers) {
        throw new KiwiError('FLEET_INVALID', `'${d.name}' holds [${r.start}, ${r.end}), which is not a block range of ${fleet.model.name} (${fleet.model.layers} blocks).`, { device: d.name });
      }
    }
  }
}

function rotate<T>(xs: readonly T[], r: number): T[] {
  return [...xs.slice(r), ...xs.slice(0, r)];
}

export type { Ring };

/**
 * What a token's crossing of the edge costs on the wire: half its measured RTT (0 unmeasured).
 * Measured (bench/ring.ts, a 3-stage ring through delay proxies of 10 and 40 ms one way): ms per
 * token = compute + 3 one-way delays, where pricing each edge at its RTT (Kafila §IV-B) predicted 1.7-1.9x.
 */
export function oneWayMs(e: Pick<RingEdge, 'latencyMs'>): number {
  return (e.latencyMs ?? 0) / 2;
}
