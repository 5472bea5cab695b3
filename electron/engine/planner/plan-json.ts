// The public JSON of `kiwi plan` (documented in README.md next to this file): snake_case, ms
// rounded to microseconds, and null times in the `memory` tier, which has no time unit.
import type { Tier } from './cost-model.js';
import type { Fleet } from './fleet.js';
import type { Division, PlanResult } from './plan.js';
import { predictReach, type Reach } from './nat-reach.js';
import type { EdgeKind } from './ring-order.js';

export interface StageJson {
  device: string;
  start: number;
  end: number;
  head: boolean;
  stage_ms: number | null;
  /** Of stage_ms, the device's fixed part of a step (its probe's step_ms; 0 unmeasured, null in the memory tier), paid once per segment. */
  step_ms: number | null;
  /** Of stage_ms, the head's part (final norm and output projection; 0 for a stage without the head, null in the memory tier). */
  head_ms: number | null;
  /** The sessions the stage runs in: more than one when a re-plan reshaped it or it was split where losing a member would cut it (fault cuts). */
  segments: number;
  /** What the stage's step adds per position its request has cached (blocks × the device's position_ms; 0 unmeasured, null in the memory tier). stage_ms is at position 0. */
  position_ms: number | null;
  memory_bytes: number;
  /** Weight bytes of the blocks the device does not hold and must fetch: fetch blocks × block_bytes. */
  fetch_bytes: number;
}

export interface DivisionJson {
  fits: boolean;
  bottleneck_ms: number | null;
  utilization: number;
  stages: StageJson[];
}

export interface EdgeJson {
  from: string;
  to: string;
  kind: EdgeKind;
  latency_ms: number | null;
  /** The sending device's measured hop cost beyond the one-way time, part of circuit_ms (0 unmeasured; null in the memory tier). */
  hop_ms: number | null;
  /** What the members' NATs predict the edge becomes (nat-reach.ts), measured RTT or not. */
  predicted: Reach;
}

export interface PlanJson {
  tier: Tier;
  order: string[];
  head: string;
  stages: StageJson[];
  bottleneck_ms: number | null;
  circuit_ms: number | null;
  utilization: number;
  /** Σ stages' fetch_bytes. */
  fetch_bytes: number;
  edges: EdgeJson[];
  baselines: { uniform: DivisionJson; proportional: DivisionJson };
}

export function toPlanJson(fleet: Fleet, plan: PlanResult): PlanJson {
  const name = (i: number): string => fleet.devices[i]?.name as string;
  const timed = plan.tier !== 'memory';
  const ms = (x: number): number | null => (timed ? round(x, 3) : null);
  const stages = (d: Division): StageJson[] =>
    d.stages.map((s) => ({ device: name(s.device), start: s.start, end: s.end, head: s.head, stage_ms: ms(s.cost), step_ms: ms(s.step), head_ms: ms(s.headCost), segments: s.segments, position_ms: timed ? round(s.position, 6) : null, memory_bytes: s.memoryBytes, fetch_bytes: s.fetchBlocks * fleet.model.blockBytes }));
  const division = (d: Division): DivisionJson => ({
    fits: d.fits,
    bottleneck_ms: ms(d.bottleneck),
    utilization: round(d.utilization, 4),
    stages: stages(d),
  });
  return {
    tier: plan.tier,
    order: plan.order.map(name),
    head: name(plan.head),
    stages: stages(plan.division),
    bottleneck_ms: ms(plan.division.bottleneck),
    circuit_ms: ms(plan.circuit),
    utilization: round(plan.division.utilization, 4),
    fetch_bytes: plan.division.stages.reduce((n, s) => n + s.fetchBlocks * fleet.model.blockBytes, 0),
    edges: plan.edges.map((e, i) => ({ from: name(e.from), to: name(e.to), kind: e.kind, latency_ms: e.latencyMs === null ? null : round(e.latencyMs, 3), hop_ms: ms(plan.hops[i] ?? 0),
      predicted: predictReach(fleet.devices[e.from]!, fleet.devices[e.to]!),
    })),
    baselines: { uniform: division(plan.baselines.uniform), proportional: division(plan.baselines.proportional) },
  };
}

/**
 * `plan` with its stages run in `segments[i]` sessions each (fault cuts made after planning,
 * pipeline/fault-cuts.ts): every session more is one more fixed part of a step (step_ms), in the
 * stage's cost and so in the bottleneck, the utilization and the circuit.
 */
export function withSegments(plan: PlanJson, segments: readonly number[]): PlanJson {
  let added = 0;
  const stages = plan.stages.map((s, i) => {
    const n = segments[i] ?? s.segments;
    if (n === s.segments) return s;
    const extra = s.stage_ms !== null && s.step_ms !== null ? (n - s.segments) * s.step_ms : 0;
    added += extra;
    return { ...s, segments: n, stage_ms: s.stage_ms === null ? null : round(s.stage_ms + extra, 3) };
  });
  if (plan.bottleneck_ms === null || plan.circuit_ms === null) return { ...plan, stages };
  const costs = stages.map((s) => s.stage_ms ?? 0);
  const bottleneck = Math.max(...costs);
  return {
    ...plan, stages,
    bottleneck_ms: round(bottleneck, 3),
    circuit_ms: round(plan.circuit_ms + added, 3),
    utilization: bottleneck > 0 ? round(costs.reduce((a, b) => a + b, 0) / costs.length / bottleneck, 4) : 1,
  };
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
