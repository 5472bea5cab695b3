// Closed-loop planning on the host (issue 14): every completed decode step of one request (one row
// of one token, the unit the planner predicts; prefills, batched steps and speculative verify steps
// are not judged) feeds each member stage's measured compute time to
// the drift detector (stage-drift.ts) against the plan's predicted stage_ms. When a stage drifts
// (a member over-reported its speed, a game started, thermal throttling), the measured block
// times of every stage with a full window (median stage ms / layers held; the host's from its own
// first blocks) replace what devices reported in every later plan (ring-assignment.ts
// measuredBlockMs), and a re-plan is asked for at a safe point (replan-driver.ts, as a member's
// join is: steps in flight finish, held requests carry on bit for bit). The planner re-plans only
// when its plan changes; once it has, the host emits `replanned` with reason `drift`, the stage,
// and predicted against measured ms. The host's own stage is measured but not judged (its time
// mixes the embedding and the head, which the plan prices separately).
import type { EventEmitter } from 'node:events';
import type { SessionHostEvents } from './session-host-api.js';
import type { PlanJson } from '../planner/plan-json.js';
import type { StepTiming } from './ring-engine.js';
import type { RingStage } from './session-fleet.js';
import { driftReason, StageDrift, windowStats, type Drift, type DriftOptions, type PlannedStage } from './stage-drift.js';

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
  /** Each member stage of the ring served: predicted ms per token and the median of its recent decode steps. */
  stages: Array<{ name: string; start: number; end: number; predictedMs: number; measuredMs: number | null; samples: number }>;
}

export class DriftMonitor {
  private readonly detector: StageDrift | undefined;
  /** By member id ('' for the host): what replaces reported block times in plans. */
  readonly blockMs = new Map<string, number>();
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
    return { options: this.options, last: this.last ?? null, blockMs: this.namedBlockMs(), stages };
  }

  /** One completed ring step. */
  onStep(t: StepTiming): void {
    const served = this.host.served();
    if (this.detector === undefined || served === undefined || t.rows !== 1 || t.seq !== 1) return;
    const window = this.detector.options.windowSteps;
    if (served.order[0]!.end > 0 && this.detector.observedSteps >= this.detector.options.cooldownSteps) {
      this.hostFirst.push(t.firstMs);
      if (this.hostFirst.length > window) this.hostFirst.shift();
    }
    const drift = this.detector.observe(t.stageMs);
    if (drift === undefined) return;
    this.last = drift;
    // Every stage measured over a full window: times in one unit, taken on the same steps.
    for (const [i, s] of served.order.entries()) {
      const layers = s.end - s.start;
      if (i === 0) {
        if (layers > 0 && this.hostFirst.length >= window) this.blockMs.set('', windowStats(this.hostFirst).median / layers);
        continue;
      }
      const ms = drift.medians[`${s.start}-${s.end}`];
      if (ms !== undefined && layers > 0) this.blockMs.set(served.memberIds[i - 1]!, ms / layers);
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
      if (i > 0) stages.push({ key: `${s.start}-${s.end}`, name: p.device, layers: s.end - s.start, predictedMs: p.stage_ms });
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
    return Object.fromEntries([...this.blockMs].map(([id, ms]) => [this.names.get(id) ?? id, ms]));
  }
}
