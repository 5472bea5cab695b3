// Stage drift (issue 14, closed-loop planning), pure: whether a ring stage's measured time per
// decode step stays off the planner's prediction for it. A stage drifts when, over a full window
// of steps, the median of its measured times is more than `threshold` off its prediction AND that
// gap is larger than the run-to-run spread of the same window (the range of its middle 80%, both
// as ratios), so a
// noisy stage on a shared machine, whose median sits at the prediction or whose spread covers the
// gap, never counts. Hysteresis: that has to hold at every step for another window's worth of
// steps (one unlucky window is not drift), the first `cooldownSteps`
// steps after each new plan are not counted (caches rebuild, a member warms up), a verdict clears
// the window, and the same evidence (the same stage with the same prediction) gives one verdict
// only, so a re-plan that did not change the plan is not asked for again.
import { KiwiError } from '../errors.js';
import { median } from '../median.js';

export interface DriftOptions {
  /** Relative gap between the median measured time and the prediction that counts as drift (0.25: 25%). */
  threshold: number;
  /** Decode steps of a stage in the window; a stage is judged once it is full, and drifts once it stayed off for as many steps again. */
  windowSteps: number;
  /** Steps after a new plan that are not counted. */
  cooldownSteps: number;
}

export const DEFAULT_DRIFT_OPTIONS: DriftOptions = { threshold: 0.25, windowSteps: 24, cooldownSteps: 16 };

/** `--replan-drift off|PERCENT`: never, or the threshold in percent (the window and cool-down keep their defaults). */
export function parseDriftFlag(text: string | undefined): DriftOptions | false {
  if (text === undefined) return DEFAULT_DRIFT_OPTIONS;
  if (text === 'off') return false;
  const percent = Number(text.replace(/%$/, ''));
  if (!/^\d+(\.\d+)?%?$/.test(text) || !(percent >= 1 && percent <= 1000)) {
    throw new KiwiError('USAGE', `--replan-drift must be off or a percentage between 1 and 1000 (default ${DEFAULT_DRIFT_OPTIONS.threshold * 100}), got '${text}'`);
  }
  return { ...DEFAULT_DRIFT_OPTIONS, threshold: percent / 100 };
}

/** The step (counted from a new plan) at which a stage that drifts from the start is found. */
export function detectionStep(o: DriftOptions): number {
  return o.cooldownSteps + 2 * o.windowSteps - 1;
}

/** A stage of the plan being served. */
export interface PlannedStage {
  /** How step timings name it: its layer range ('2-5'). */
  key: string;
  /** The device (member) running it. */
  name: string;
  /** Blocks it holds. */
  layers: number;
  /** The planner's stage time (ms per token), or null when the plan has no time unit (memory tier). */
  predictedMs: number | null;
}

/** A stage found drifting: its median measured time over the window against its prediction. */
export interface Drift {
  key: string;
  name: string;
  layers: number;
  predictedMs: number;
  measuredMs: number;
  /** The window's 10th to 90th percentile range (ms): the run-to-run spread the gap had to exceed. */
  spreadMs: number;
  /** measured / predicted. */
  ratio: number;
  /** Steps observed since the plan was adopted, the cool-down included. */
  steps: number;
  /** The median measured time of every stage with a full window at the verdict, by key. */
  medians: Record<string, number>;
}

/**
 * The median and spread of `xs` (not empty): the 10th to 90th percentile range in ms, and as a
 * ratio (90th / 10th percentile; infinite when the 10th is 0).
 */
export function windowStats(xs: readonly number[]): { median: number; spread: number; spreadRatio: number } {
  const s = [...xs].sort((a, b) => a - b);
  const [lo, hi] = [quantile(s, 0.1), quantile(s, 0.9)];
  return { median: median(s), spread: hi - lo, spreadRatio: lo > 0 ? hi / lo : Number.POSITIVE_INFINITY };
}

function quantile(sorted: readonly number[], q: number): number {
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export class StageDrift {
  private readonly stages = new Map<string, { planned: PlannedStage; samples: number[]; streak: number }>();
  private steps = 0;
  /** Evidence already judged: name, range and prediction. */
  private readonly judged = new Set<string>();

  constructor(readonly options: DriftOptions = DEFAULT_DRIFT_OPTIONS) {
    if (!(options.threshold > 0) || !Number.isInteger(options.windowSteps) || options.windowSteps < 4 || !Number.isInteger(options.cooldownSteps) || options.cooldownSteps < 0) {
      throw new Error(`bug: drift options out of range: ${JSON.stringify(options)}`);
    }
  }

  /** A new plan is served: windows restart, after a cool-down. */
  plan(stages: readonly PlannedStage[]): void {
    this.stages.clear();
    this.steps = 0;
    for (const s of stages) if (s.predictedMs !== null && s.predictedMs > 0 && s.layers > 0) this.stages.set(s.key, { planned: s, samples: [], streak: 0 });
  }

  /** Steps observed since the plan was adopted. */
  get observedSteps(): number {
    return this.steps;
  }

  /** Each judged stage with the median of its window so far (null before its first counted step). */
  current(): Array<{ planned: PlannedStage; medianMs: number | null; samples: number }> {
    return [...this.stages.values()].map((s) => ({ planned: s.planned, medianMs: s.samples.length > 0 ? windowStats(s.samples).median : null, samples: s.samples.length }));
  }

  /** The median measured time of each stage whose window is full, by key. */
  measured(): Map<string, { planned: PlannedStage; medianMs: number }> {
    const out = new Map<string, { planned: PlannedStage; medianMs: number }>();
    for (const [key, s] of this.stages) if (s.samples.length >= this.options.windowSteps) out.set(key, { planned: s.planned, medianMs: windowStats(s.samples).median });
    return out;
  }

  /**
   * One decode step's measured stage times (ms, by key). Returns the stage that drifts most, once
   * per evidence, or undefined.
   */
  observe(stageMs: Readonly<Record<string, number>>): Drift | undefined {
    this.steps++;
    if (this.steps <= this.options.cooldownSteps) return undefined;
    const { threshold, windowSteps } = this.options;
    let worst: Drift | undefined;
    for (const [key, s] of this.stages) {
      const ms = stageMs[key];
      if (ms === undefined || !Number.isFinite(ms) || ms < 0) continue;
      s.samples.push(ms);
      if (s.samples.length > windowSteps) s.samples.shift();
      if (s.samples.length < windowSteps) continue;
      const predicted = s.planned.predictedMs!;
      const { median: m, spread, spreadRatio } = windowStats(s.samples);
      // Noise on a shared machine is multiplicative (a stage 2x slower now and then), so the gap
      // and the spread compare as ratios: the median must sit further off the prediction than the
      // window's middle 80% spans.
      const off = Math.abs(m - predicted) > threshold * predicted && Math.abs(Math.log(m / predicted)) > Math.log(spreadRatio);
      // It has to stay off for another window's worth of steps: one unlucky window is not drift.
      s.streak = off ? s.streak + 1 : 0;
      if (s.streak < windowSteps || this.judged.has(evidence(s.planned))) continue;
      const d: Drift = { key, name: s.planned.name, layers: s.planned.layers, predictedMs: predicted, measuredMs: m, spreadMs: spread, ratio: m / predicted, steps: this.steps, medians: {} };
      if (worst === undefined || Math.abs(Math.log(d.ratio)) > Math.abs(Math.log(worst.ratio))) worst = d;
    }
    if (worst === undefined) return undefined;
    for (const [key, m] of this.measured()) worst.medians[key] = m.medianMs;
    this.judged.add(evidence(this.stages.get(worst.key)!.planned));
    // The next verdict needs a fresh window of its own.
    for (const s of this.stages.values()) {
      s.samples.length = 0;
      s.streak = 0;
    }
    return worst;
  }
}

function evidence(s: PlannedStage): string {
  return `${s.name}|${s.key}|${s.predictedMs}`;
}

/** The reason a drift re-plan gives, as events and status show it. */
export function driftReason(d: Drift): string {
  return `drift: ${d.name}'s stage (layers ${d.key}) took ${d.measuredMs.toFixed(2)} ms per step, predicted ${d.predictedMs.toFixed(2)} ms (x${d.ratio.toFixed(2)}, spread ${d.spreadMs.toFixed(2)} ms, after ${d.steps} steps)`;
}
