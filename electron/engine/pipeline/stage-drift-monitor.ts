// Closed-loop planning on the host (issue 14): every completed decode step of one request (one row
// of one token, the unit the planner predicts; prefills, batched steps and speculative verify steps
// are not judged) feeds each member stage's measured compute time to the drift detector
// (stage-drift.ts) against the plan's predicted stage_ms. When a stage drifts (a member
// over-reported its speed, a game started, thermal throttling), the measured costs of every stage
// with a full window replace what devices reported in every later plan (ring-assignment.ts
// measuredBlockMs): the stage's fixed part of a step stays the device's own (the plan's step_ms,
// from its block probe, paid once per segment of a stage) and the rest is its
// blocks, block_ms = (median stage ms - segments × step_ms) / layers
// (the host's from its own first blocks), so the next plan predicts that stage at its measured time
// whatever the layer count it gives it. A re-plan is asked for at a safe point (replan-driver.ts,
// as a member's join is: steps in flight finish, held requests carry on bit for bit). The planner
// re-plans only when its plan changes, and a drift re-plan keeps the division served while its
// bottleneck stays within the drift threshold of the best (moveMargin); once it has, the host
// emits `replanned` with reason `drift`, the stage, and predicted against measured ms. The host's
// stage, when it runs blocks, is judged by its blocks alone (what they computed, not their waits
// for a turn) against the plan's price for them, its stage_ms less head_ms: the head's cost is an
// estimate from the device's figures that no re-plan can move, and would blur the verdict.
// Steps are judged at the start of a request, where the plan prices them: each stage's time less
// what its request's cached positions add (the plan's position_ms, from the block probe, times the
// step's position; attention over a 4,000-token cache more than doubles a 1B step), so a long
// answer does not look like drift.
// The same steps measure the ring's per-hop cost beyond the links' one-way times (drift on or
// off): a step's wall time less the host's and every member's compute and the edges' one-way
// times (RTT / 2), over its edges; the median of recent steps is the hop_ms later plans price per
// edge (planner/plan.ts).
import type { EventEmitter } from 'node:events';
import type { SessionHostEvents } from './session-host-api.js';
import type { PlanJson } from '../planner/plan-json.js';
import { oneWayMs } from '../planner/plan.js';
import type { StepTiming } from './ring-engine.js';
import type { RingStage } from './session-fleet.js';
import { driftReason, StageDrift, windowStats, type Drift, type DriftOptions, type PlannedStage } from './stage-drift.js';

/** A device's costs as the ring measured them: ms per block and the fixed part of a step kept from its probe. */
export interface MeasuredCost {
  blockMs: number;
  stepMs: number;
}

/** Recent single-request decode steps whose per-hop overhead is kept (their median is hopMs). */
export const HOP_WINDOW_STEPS = 64;
/** Steps measured before hopMs is given (fewer: undefined). */
export const HOP_MIN_STEPS = 8;

/**
 * The ring's cost per hop beyond the edges' one-way times in one step (ms; may be negative on
 * noise), or undefined when it cannot be told (an edge without a known RTT, a stage's time
 * missing, no edges).
 */
export function hopOverheadMs(t: StepTiming, order: readonly RingStage[], plan: PlanJson): number | undefined {
  const edges = plan.edges ?? [];
  if (edges.length === 0 || edges.some((e) => e.latency_ms === null)) return undefined;
  let compute = t.hostMs;
  for (const s of order.slice(1)) {
    const ms = t.stageMs[`${s.start}-${s.end}`];
    if (ms === undefined || !Number.isFinite(ms)) return undefined;
    compute += ms;
  }
  const wire = edges.reduce((n, e) => n + oneWayMs({ latencyMs: e.latency_ms }), 0);
  return (t.ringMs - compute - wire) / edges.length;
}

/**
 * A stage's measured median split as the plan priced it: its device's fixed step part kept (once
 * per segment the stage runs in), the rest over its layers; when the median is not above those
 * fixed parts, all of it over the layers.
 */
export function splitMeasured(medianMs: number, stepMs: number, layers: number, segments = 1): MeasuredCost {
  return medianMs > segments * stepMs ? { blockMs: (medianMs - segments * stepMs) / layers, stepMs } : { blockMs: medianMs / layers, stepMs: 0 };
}

/** A stage's measured ms of a step at `position` as at the start of a request, where the plan prices it (at least 0). */
export function atStart(ms: number, stage: { position_ms?: number | null } | undefined, position: number): number {
  return Math.max(0, ms - (stage?.position_ms ?? 0) * position);
}

/** What `replanned` tells: why, which stage, and its times before the re-plan. */
export interface DriftReplan {
  reason: 'drift';
  /** The ring's generation the re-plan started. */
  epoch: number;
  stage: { name: string; start: number; end: number; predictedMs: number; measuredMs: number; spreadMs: number };
  /** Decode steps of the drifted ring observed, its cool-down included. */
  steps: number;
  /** The block times the new plan used (ms per layer), by device name. */
  blockMs: Record<string, number>;
  message: string;
}

/** What the monitor reads of SessionHost. */
export interface DriftMonitorHost {
  /** The ring served and the plan it was built from, once one serves. */
  served(): { order: readonly RingStage[]; memberIds: readonly string[]; plan: PlanJson; generation: number } | undefined;
  /** Asks for a re-plan at a safe point (not a fault). */
  request(reason: string): void;
}

export interface DriftStatus {
  /** false: --replan-drift off. */
  options: DriftOptions | false;
  /** The latest drift found, whether it changed the plan or not. */
  last: Drift | null;
  /** Block times measured in this session (ms per layer) that plans use, by device name. */
  blockMs: Record<string, number>;
  /** The ring's measured cost per hop beyond the links' one-way times (median of recent decode steps, at least 0), or null before enough steps. */
  hopMs?: number | null;
  /** Each stage of the ring served (the host's by its blocks, when it runs any): predicted ms per token and the median of its recent decode steps. */
  stages: Array<{ name: string; start: number; end: number; predictedMs: number; measuredMs: number | null; samples: number }>;
}

export class DriftMonitor {
  private readonly detector: StageDrift | undefined;
  /** By member id ('' for the host): what replaces reported block and step times in plans. */
  readonly blockMs = new Map<string, MeasuredCost>();
  /** Per-hop overhead of recent decode steps (hopOverheadMs). */
  private readonly hopSamples: number[] = [];
  private readonly names = new Map<string, string>();
  /** The host's first-block times of recent decode steps. */
  private readonly hostFirst: number[] = [];
  private pending: { reason: string; drift: Drift; epoch: number } | undefined;
  private last: Drift | undefined;

  constructor(
    private readonly options: DriftOptions | false,
    private readonly host: DriftMonitorHost,
    events: EventEmitter<SessionHostEvents>,
  ) {
    this.detector = options === false ? undefined : new StageDrift(options);
    events.on('serving', () => this.adopted());
    events.on('recovered', (record) => {
      const p = this.pending;
      this.pending = undefined;
      this.adopted();
      if (p !== undefined && record.reason === p.reason) events.emit('replanned', this.replanned(p));
    });
  }

  /** A member that left or joined anew: its measured time is stale. */
  forget(memberId: string): void {
    this.blockMs.delete(memberId);
  }

  status(): DriftStatus {
    const stages = (this.detector?.current() ?? []).map(({ planned: p, medianMs, samples }) => {
      const [start, end] = p.key.split('-').map(Number) as [number, number];
      return { name: p.name, start, end, predictedMs: p.predictedMs!, measuredMs: medianMs, samples };
    });
    return { options: this.options, last: this.last ?? null, blockMs: this.namedBlockMs(), hopMs: this.hopMs ?? null, stages };
  }

  /**
   * How much slower than the best a division may be and still be kept (the planner's moveMargin)
   * in the re-plan a drift asked for: the drift threshold. Divisions priced from measured stage
   * times that are closer than that differ by what the detector calls noise (a stage priced from
   * one layer count is off by about that much at another), so moving layers for less would re-plan
   * on noise; a stage really off by more still moves. Undefined for any other re-plan (a join gets
   * the planner's own, tighter margin).
   */
  get moveMargin(): number | undefined {
    return this.pending !== undefined && this.detector !== undefined ? this.detector.options.threshold : undefined;
  }

  /**
   * Whether the next re-plan may grow members' stages in place (runtime/stage-segments.ts): not
   * one a drift asked for. A segment saves a recovery its survivors' reloads, but each costs a step
   * a session run more, which a re-plan made to price stages from their measured times would
   * only blur (an extra segment's cost is within the detector's noise on a small model).
   */
  get growInPlace(): boolean {
    return this.pending === undefined;
  }

  /** The re-plan asked for `reason` was not made (its plan would not change): no drift re-plan is pending. */
  unchanged(reason: string): void {
    if (this.pending?.reason === reason) this.pending = undefined;
  }

  /** The ring's measured cost per hop beyond the links' one-way times, once HOP_MIN_STEPS steps gave one (at least 0). */
  get hopMs(): number | undefined {
    return this.hopSamples.length < HOP_MIN_STEPS ? undefined : Math.max(0, windowStats(this.hopSamples).median);
  }

  /** One completed ring step. */
  onStep(t: StepTiming): void {
    const served = this.host.served();
    if (served === undefined || t.rows !== 1 || t.seq !== 1) return;
    const hop = hopOverheadMs(t, served.order, served.plan);
    if (hop !== undefined) {
      this.hopSamples.push(hop);
      if (this.hopSamples.length > HOP_WINDOW_STEPS) this.hopSamples.shift();
    }
    if (this.detector === undefined) return;
    const window = this.detector.options.windowSteps;
    if (served.order[0]!.end > 0 && this.detector.observedSteps >= this.detector.options.cooldownSteps) {
      this.hostFirst.push(atStart(t.firstMs, served.plan.stages[0], t.position));
      if (this.hostFirst.length > window) this.hostFirst.shift();
    }
    const stageMs: Record<string, number> = {};
    for (const [i, s] of served.order.entries()) {
      const key = `${s.start}-${s.end}`;
      const ms = i === 0 ? t.firstMs : t.stageMs[key];
      if (ms !== undefined) stageMs[key] = atStart(ms, served.plan.stages[i], t.position);
    }
    const drift = this.detector.observe(stageMs);
    if (drift === undefined) return;
    this.last = drift;
    // Every stage measured over a full window: times in one unit, taken on the same steps, each
    // split as the plan priced it (its device's fixed part kept).
    for (const [i, s] of served.order.entries()) {
      const layers = s.end - s.start;
      const step = served.plan.stages[i]?.step_ms ?? 0;
      const segments = served.plan.stages[i]?.segments ?? 1;
      if (i === 0) {
        if (layers > 0 && this.hostFirst.length >= window) this.blockMs.set('', splitMeasured(windowStats(this.hostFirst).median, step, layers));
        continue;
      }
      const ms = drift.medians[`${s.start}-${s.end}`];
      if (ms !== undefined && layers > 0) this.blockMs.set(served.memberIds[i - 1]!, splitMeasured(ms, step, layers, segments));
    }
    const reason = driftReason(drift);
    this.pending = { reason, drift, epoch: served.generation };
    this.host.request(reason);
  }

  /** A ring (the first or a re-planned one) serves: its plan's predictions are what steps are judged against. */
  private adopted(): void {
    const served = this.host.served();
    if (served === undefined || this.detector === undefined) return;
    this.hostFirst.length = 0;
    this.names.clear();
    const stages: PlannedStage[] = [];
    for (const [i, s] of served.order.entries()) {
      const p = served.plan.stages[i];
      if (p === undefined) continue;
      this.names.set(i === 0 ? '' : served.memberIds[i - 1]!, p.device);
      // The host's stage is judged by its blocks, when it runs any (a head alone has nothing to move).
      const predictedMs = i === 0 && p.stage_ms !== null ? p.stage_ms - (p.head_ms ?? 0) : p.stage_ms;
      if (s.end > s.start) stages.push({ key: `${s.start}-${s.end}`, name: p.device, layers: s.end - s.start, predictedMs });
    }
    this.detector.plan(stages);
  }

  private replanned(p: { reason: string; drift: Drift; epoch: number }): DriftReplan {
    const [start, end] = p.drift.key.split('-').map(Number) as [number, number];
    const d = p.drift;
    return {
      reason: 'drift', epoch: p.epoch, steps: d.steps, blockMs: this.namedBlockMs(), message: p.reason,
      stage: { name: d.name, start, end, predictedMs: d.predictedMs, measuredMs: d.measuredMs, spreadMs: d.spreadMs },
    };
  }

  private namedBlockMs(): Record<string, number> {
    return Object.fromEntries([...this.blockMs].map(([id, m]) => [this.names.get(id) ?? id, m.blockMs]));
  }
}
