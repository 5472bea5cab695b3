import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { PlanJson } from '../planner/plan-json.js';
import type { StepTiming } from './ring-engine.js';
import type { SessionHostEvents } from './session-host-api.js';
import { DriftMonitor, type DriftReplan } from './stage-drift-monitor.js';
import { DEFAULT_DRIFT_OPTIONS, detectionStep } from './stage-drift.js';

const ORDER = [{ peer: 0, start: 0, end: 2, head: true }, { peer: 1, start: 2, end: 3, head: false }, { peer: 2, start: 3, end: 8, head: false }];
const PLAN = { stages: [{ device: 'host', stage_ms: 2.2 }, { device: 'ada', stage_ms: 1 }, { device: 'bob', stage_ms: 0.25 }] } as unknown as PlanJson;

function setup(options = DEFAULT_DRIFT_OPTIONS as typeof DEFAULT_DRIFT_OPTIONS | false) {
  const events = new EventEmitter<SessionHostEvents>();
  const requests: string[] = [];
  const replanned: DriftReplan[] = [];
  events.on('replanned', (r) => replanned.push(r));
  const monitor = new DriftMonitor(options, {
    served: () => ({ order: ORDER, memberIds: ['id-ada', 'id-bob'], plan: PLAN, generation: 1 }),
    request: (reason) => requests.push(reason),
  }, events);
  events.emit('serving');
  return { events, monitor, requests, replanned };
}

/** A decode step of one request: the host's blocks 2 ms, ada 1 ms (as planned), bob 5 ms (20x his plan). */
const step = (over: Partial<StepTiming> = {}): StepTiming => ({ ringMs: 9, hostMs: 2.4, firstMs: 2, stageMs: { '2-3': 1, '3-8': 5 }, rows: 1, seq: 1, ...over });

describe('DriftMonitor', () => {
  it('asks for a re-plan once bob drifts, with the measured block times of every stage, and names it when the re-plan is done', () => {
    const { events, monitor, requests, replanned } = setup();
    for (let i = 1; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step());
    expect(requests).toEqual([]);
    monitor.onStep(step());
    expect(requests).toHaveLength(1);
    expect(requests[0]).toMatch(/^drift: bob's stage \(layers 3-8\) took 5\.00 ms per step, predicted 0\.25 ms/);
    // ms per layer: the host's 2 blocks in 2 ms, ada's 1 in 1 ms, bob's 5 in 5 ms.
    expect(Object.fromEntries(monitor.blockMs)).toEqual({ '': 1, 'id-ada': 1, 'id-bob': 1 });
    expect(monitor.status()).toMatchObject({ last: { name: 'bob', predictedMs: 0.25, measuredMs: 5 }, blockMs: { host: 1, ada: 1, bob: 1 } });

    // A re-plan for another reason (the drift's request folded into it) is not a drift re-plan.
    events.emit('recovered', { epoch: 2, reason: 'cat joined', startedAt: 0, durationMs: 1, bytesMoved: 0, resumedRequests: 0 });
    expect(replanned).toEqual([]);
  });

  it('emits `replanned` with the stage and its predicted and measured ms when the re-plan it asked for completes', () => {
    const { events, monitor, requests, replanned } = setup();
    for (let i = 0; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step());
    events.emit('recovered', { epoch: 2, reason: requests[0]!, startedAt: 0, durationMs: 1, bytesMoved: 0, resumedRequests: 1 });
    expect(replanned).toEqual([expect.objectContaining({
      reason: 'drift', epoch: 1, steps: detectionStep(DEFAULT_DRIFT_OPTIONS),
      stage: { name: 'bob', start: 3, end: 8, predictedMs: 0.25, measuredMs: 5, spreadMs: 0 },
    })]);
    // The new ring starts a cool-down: the same figures are judged afresh only after it.
    expect(monitor.status().stages.every((s) => s.samples === 0)).toBe(true);
  });

  it('counts only single-request decode steps (the unit the plan predicts), and nothing with drift off', () => {
    const { monitor, requests } = setup();
    for (let i = 0; i < 500; i++) {
      monitor.onStep(step({ rows: 4 }));
      monitor.onStep(step({ seq: 12 }));
    }
    expect(requests).toEqual([]);
    const off = setup(false);
    for (let i = 0; i < 500; i++) off.monitor.onStep(step());
    expect(off.requests).toEqual([]);
    expect(off.monitor.status()).toMatchObject({ options: false, last: null, stages: [] });
  });

  it('forgets a member\'s measured time when it leaves or joins anew', () => {
    const { monitor } = setup();
    for (let i = 0; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step());
    monitor.forget('id-bob');
    expect([...monitor.blockMs.keys()].sort()).toEqual(['', 'id-ada']);
  });
});
