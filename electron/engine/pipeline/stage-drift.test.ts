import { describe, expect, it } from 'vitest';
import { DEFAULT_DRIFT_OPTIONS, detectionStep, driftReason, parseDriftFlag, StageDrift, windowStats, type PlannedStage } from './stage-drift.js';

/** Deterministic noise in [0, 1): xorshift32. */
function noise(seed: number): () => number {
  let x = (seed * 2654435761) >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
}

const PLAN: PlannedStage[] = [
  { key: '0-4', name: 'ada', layers: 4, predictedMs: 10 },
  { key: '4-8', name: 'bob', layers: 4, predictedMs: 10 },
];
const OPTS = { threshold: 0.25, windowSteps: 24, cooldownSteps: 8 };

/** Feeds `steps` steps; bob's time from `bob(i)`, ada's at her prediction with 2% noise. Returns the step of the first verdict. */
function run(detector: StageDrift, steps: number, bob: (i: number) => number, seed = 1): { at: number | undefined; verdicts: number } {
  const rand = noise(seed);
  let at: number | undefined;
  let verdicts = 0;
  for (let i = 1; i <= steps; i++) {
    const d = detector.observe({ '0-4': 10 * (0.99 + 0.02 * rand()), '4-8': bob(i) });
    if (d !== undefined) {
      verdicts++;
      at ??= i;
    }
  }
  return { at, verdicts };
}

describe('StageDrift', () => {
  it('finds a sustained 40% drift once the cool-down and a full window have passed, naming the stage', () => {
    const detector = new StageDrift(OPTS);
    detector.plan(PLAN);
    const rand = noise(7);
    let found;
    let at = 0;
    for (let i = 1; i <= 200 && found === undefined; i++) {
      found = detector.observe({ '0-4': 10, '4-8': 14 * (0.98 + 0.04 * rand()) });
      at = i;
    }
    expect(at).toBe(detectionStep(OPTS));
    expect(found).toMatchObject({ key: '4-8', name: 'bob', layers: 4, predictedMs: 10, steps: at });
    expect(found!.ratio).toBeGreaterThan(1.35);
    expect(found!.ratio).toBeLessThan(1.45);
    expect(driftReason(found!)).toMatch(/^drift: bob's stage \(layers 4-8\) took 1[34]\.\d\d ms per step, predicted 10\.00 ms/);
  });

  it('finds a stage much faster than predicted too (a member that under-reported its speed)', () => {
    const detector = new StageDrift(OPTS);
    detector.plan(PLAN);
    expect(run(detector, 100, () => 5).at).toBe(detectionStep(OPTS));
  });

  it('does not re-plan a noisy series whose median sits at the prediction, however large its spread', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const detector = new StageDrift(OPTS);
      detector.plan(PLAN);
      const rand = noise(seed);
      // Steps at random fast or slow (a shared machine): the mean moves, the median does not.
      expect(run(detector, 500, () => (rand() < 0.5 ? 6 + 4 * rand() : 10 + 14 * rand()), seed).verdicts).toBe(0);
    }
  });

  it('does not re-plan a series 1.3x off its prediction when its run-to-run spread is larger than the gap', () => {
    const rand = noise(11);
    for (let seed = 1; seed <= 20; seed++) {
      const detector = new StageDrift(OPTS);
      detector.plan(PLAN);
      // Uniform over 9..17 ms: median about 13 (1.3x), spread (10th to 90th percentile) about 6.4 ms (x1.65) > the 3 ms gap (x1.3).
      const uniform = noise(seed * 7919);
      const samples = Array.from({ length: 500 }, () => 9 + 8 * uniform());
      const stats = windowStats(samples);
      expect(stats.median / 10).toBeGreaterThan(1.2);
      expect(stats.spread).toBeGreaterThan(stats.median - 10);
      expect(run(detector, 500, (i) => samples[i - 1]!, seed).verdicts).toBe(0);
    }
    // The same median with a small spread is drift.
    const steady = new StageDrift(OPTS);
    steady.plan(PLAN);
    expect(run(steady, 500, () => 13 * (0.99 + 0.02 * rand())).verdicts).toBe(1);
  });

  it('respects the cool-down after every new plan: steps right after it are not counted', () => {
    const opts = { ...OPTS, cooldownSteps: 50 };
    const detector = new StageDrift(opts);
    detector.plan(PLAN);
    expect(run(detector, detectionStep(opts) - 1, () => 20).verdicts).toBe(0);
    expect(run(detector, 1, () => 20).verdicts).toBe(1);
    // A re-plan with a new prediction: the cool-down starts again before the new evidence counts.
    detector.plan([PLAN[0]!, { ...PLAN[1]!, predictedMs: 12 }]);
    expect(run(detector, detectionStep(opts) - 1, () => 20).verdicts).toBe(0);
    expect(run(detector, 1, () => 20).verdicts).toBe(1);
  });

  it('gives one verdict per evidence: the same stage and prediction drifting on, or planned again unchanged, is not asked twice', () => {
    const detector = new StageDrift(OPTS);
    detector.plan(PLAN);
    expect(run(detector, 1000, () => 20).verdicts).toBe(1);
    // The re-plan made the same plan (nothing to gain): the same evidence stays judged.
    detector.plan(PLAN);
    expect(run(detector, 1000, () => 20).verdicts).toBe(0);
    // Another stage drifting is new evidence.
    expect(run(detector, 1000, () => 10, 5).verdicts).toBe(0);
  });

  it('judges nothing in a plan without times (memory tier) and reports the medians of full windows', () => {
    const detector = new StageDrift(DEFAULT_DRIFT_OPTIONS);
    detector.plan(PLAN.map((s) => ({ ...s, predictedMs: null })));
    expect(run(detector, 500, () => 100).verdicts).toBe(0);
    detector.plan(PLAN);
    run(detector, DEFAULT_DRIFT_OPTIONS.cooldownSteps + DEFAULT_DRIFT_OPTIONS.windowSteps, () => 10);
    expect(detector.measured().size).toBe(2);
    expect(detector.measured().get('4-8')!.medianMs).toBe(10);
    expect(detector.observedSteps).toBe(DEFAULT_DRIFT_OPTIONS.cooldownSteps + DEFAULT_DRIFT_OPTIONS.windowSteps);
  });

  it('reads --replan-drift: off, a percentage, or the default; refuses anything else', () => {
    expect(parseDriftFlag(undefined)).toEqual(DEFAULT_DRIFT_OPTIONS);
    expect(parseDriftFlag('off')).toBe(false);
    expect(parseDriftFlag('40')).toEqual({ ...DEFAULT_DRIFT_OPTIONS, threshold: 0.4 });
    expect(parseDriftFlag('12.5%')).toEqual({ ...DEFAULT_DRIFT_OPTIONS, threshold: 0.125 });
    for (const bad of ['on', '0', '-5', '1e3', '']) expect(() => parseDriftFlag(bad)).toThrow(/--replan-drift must be off or a percentage/);
  });

  it('refuses options out of range', () => {
    expect(() => new StageDrift({ ...OPTS, threshold: 0 })).toThrow(/drift options/);
    expect(() => new StageDrift({ ...OPTS, windowSteps: 2 })).toThrow(/drift options/);
  });
});
