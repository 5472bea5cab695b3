import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { PlanJson } from '../planner/plan-json.js';
import type { StepTiming } from './ring-engine.js';
import type { SessionHostEvents } from './session-host-api.js';
import { DriftMonitor, HOP_MIN_STEPS, hopOverheadMs, splitMeasured, type DriftReplan } from './stage-drift-monitor.js';
import { DEFAULT_DRIFT_OPTIONS, detectionStep } from './stage-drift.js';

const ORDER = [{ peer: 0, start: 0, end: 2, head: true, cuts: [] }, { peer: 1, start: 2, end: 3, head: false, cuts: [] }, { peer: 2, start: 3, end: 8, head: false, cuts: [] }];
const PLAN = { stages: [{ device: 'host', stage_ms: 2.2 }, { device: 'ada', stage_ms: 1 }, { device: 'bob', stage_ms: 0.25 }] } as unknown as PlanJson;

function setup(options = DEFAULT_DRIFT_OPTIONS as typeof DEFAULT_DRIFT_OPTIONS | false, plan: PlanJson = PLAN) {
  const events = new EventEmitter<SessionHostEvents>();
  const requests: string[] = [];
  const replanned: DriftReplan[] = [];
  events.on('replanned', (r) => replanned.push(r));
  const monitor = new DriftMonitor(options, {
    served: () => ({ order: ORDER, memberIds: ['id-ada', 'id-bob'], plan, generation: 1 }),
    request: (reason) => requests.push(reason),
  }, events);
  events.emit('serving');
  return { events, monitor, requests, replanned };
}

/** A decode step of one request: the host's blocks 2 ms, ada 1 ms (as planned), bob 5 ms (20x his plan). */
const step = (over: Partial<StepTiming> = {}): StepTiming => ({ ringMs: 9, hostMs: 2.4, firstMs: 2, stageMs: { '2-3': 1, '3-8': 5 }, rows: 1, seq: 1, position: 0, ...over });

describe('DriftMonitor', () => {
  it('judges a step at its position: a long answer slows every stage as the plan\'s position_ms says, which is not drift', () => {
    // As planned at the start of a request (host 2 ms, ada 1, bob 5), each stage adding 0.4 µs a position a layer.
    const stages = [{ device: 'host', stage_ms: 2.2, position_ms: 0.0008 }, { device: 'ada', stage_ms: 1, position_ms: 0.0004 }, { device: 'bob', stage_ms: 5, position_ms: 0.002 }];
    const longStep = (position: number): StepTiming => step({ position, firstMs: 2 + 0.0008 * position, stageMs: { '2-3': 1 + 0.0004 * position, '3-8': 5 + 0.002 * position } });
    const steps = detectionStep(DEFAULT_DRIFT_OPTIONS) + 8;
    // From position 1000 on, bob's steps take 7 ms and more: 40% over his plan at the start of a request.
    const judged = setup(DEFAULT_DRIFT_OPTIONS, { stages } as unknown as PlanJson);
    for (let i = 0; i < steps; i++) judged.monitor.onStep(longStep(1000 + i));
    expect(judged.requests).toEqual([]);
    expect(judged.monitor.status().stages.map((s) => s.measuredMs)).toEqual([2, 1, 5]);
    // A plan without position costs (devices that did not measure them) sees the same steps as drift.
    const unknown = setup(DEFAULT_DRIFT_OPTIONS, { stages: stages.map((s) => ({ ...s, position_ms: 0 })) } as unknown as PlanJson);
    for (let i = 0; i < steps; i++) unknown.monitor.onStep(longStep(1000 + i));
    expect(unknown.requests).toHaveLength(1);
    expect(unknown.requests[0]).toMatch(/^drift: /);
    // The block times it measured are of the start of a request, as plans price them.
    expect(judged.monitor.blockMs.size).toBe(0);
    expect(unknown.monitor.blockMs.get('id-bob')!.blockMs).toBeGreaterThan(1.3);
  });

  it('asks for a re-plan once bob drifts, with the measured block times of every stage, and names it when the re-plan is done', () => {
    const { events, monitor, requests, replanned } = setup();
    for (let i = 1; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step());
    expect(requests).toEqual([]);
    // Plans priced from reported figures keep the planner's own move margin.
    expect(monitor.moveMargin).toBeUndefined();
    monitor.onStep(step());
    expect(requests).toHaveLength(1);
    // The re-plan it asked for keeps a division while it stays within the drift threshold of the best.
    expect(monitor.moveMargin).toBe(DEFAULT_DRIFT_OPTIONS.threshold);
    expect(requests[0]).toMatch(/^drift: bob's stage \(layers 3-8\) took 5\.00 ms per step, predicted 0\.25 ms/);
    // ms per layer: the host's 2 blocks in 2 ms, ada's 1 in 1 ms, bob's 5 in 5 ms (this plan has no fixed step part).
    const cost = (blockMs: number) => ({ blockMs, stepMs: 0 });
    expect(Object.fromEntries(monitor.blockMs)).toEqual({ '': cost(1), 'id-ada': cost(1), 'id-bob': cost(1) });
    expect(monitor.status()).toMatchObject({ last: { name: 'bob', predictedMs: 0.25, measuredMs: 5 }, blockMs: { host: 1, ada: 1, bob: 1 } });

    // A re-plan for another reason (the drift's request folded into it) is not a drift re-plan.
    events.emit('recovered', { epoch: 2, reason: 'cat joined', startedAt: 0, durationMs: 1, bytesMoved: 0, resumedRequests: 0 });
    expect(replanned).toEqual([]);
    // Once that re-plan is done, later ones (a join) get the planner's own margin again.
    expect(monitor.moveMargin).toBeUndefined();
  });

  it('judges the host\'s stage by its blocks against their price (the head\'s taken off), and not a host that runs only the head', () => {
    // Every member as planned; the host's blocks compute 6 ms a step against the 2 of its plan's 2.2 that are not the head's.
    const plan = { stages: [{ device: 'host', stage_ms: 2.2, head_ms: 0.2 }, { device: 'ada', stage_ms: 1, head_ms: 0 }, { device: 'bob', stage_ms: 5, head_ms: 0 }] } as unknown as PlanJson;
    const { monitor, requests } = setup(DEFAULT_DRIFT_OPTIONS, plan);
    // The head itself, whatever it takes, is not judged: its price is the device's estimate, which no re-plan moves.
    for (let i = 0; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step({ hostMs: 6 + 3, firstMs: 6 }));
    expect(requests).toHaveLength(1);
    expect(requests[0]).toMatch(/^drift: host's stage \(layers 0-2\) took 6\.00 ms per step, predicted 2\.00 ms/);
    // Its block time: 6 ms over 2 layers.
    expect(monitor.blockMs.get('')).toEqual({ blockMs: 3, stepMs: 0 });
    expect(monitor.status().stages.map((x) => x.name)).toEqual(['host', 'ada', 'bob']);
    // A host that runs only the head has no blocks to give away: it is not judged.
    const events = new EventEmitter<SessionHostEvents>();
    const headOnly: string[] = [];
    const order = [{ ...ORDER[0]!, end: 0 }, { ...ORDER[1]!, start: 0 }, ORDER[2]!];
    const m = new DriftMonitor(DEFAULT_DRIFT_OPTIONS, { served: () => ({ order, memberIds: ['id-ada', 'id-bob'], plan, generation: 1 }), request: (r) => headOnly.push(r) }, events);
    events.emit('serving');
    for (let i = 0; i < detectionStep(DEFAULT_DRIFT_OPTIONS) + 8; i++) m.onStep(step({ hostMs: 7, firstMs: 0, stageMs: { '0-3': 1, '3-8': 5 } }));
    expect(headOnly).toEqual([]);
    expect(m.status().stages.map((x) => x.name)).toEqual(['ada', 'bob']);
  });

  it('gives up its move margin when the re-plan it asked for would not change the plan', () => {
    const { monitor, requests } = setup();
    for (let i = 0; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step());
    expect(monitor.moveMargin).toBe(DEFAULT_DRIFT_OPTIONS.threshold);
    monitor.unchanged('cat joined');
    expect(monitor.moveMargin).toBe(DEFAULT_DRIFT_OPTIONS.threshold);
    monitor.unchanged(requests[0]!);
    expect(monitor.moveMargin).toBeUndefined();
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

  it('feeds back each stage\'s measured time less its device\'s fixed step part over its layers, keeping that part', () => {
    // The plan priced every stage with a 0.5 ms fixed part (the devices' probes' step_ms).
    const plan = { stages: PLAN.stages.map((s) => ({ ...s, step_ms: 0.5 })), edges: [] } as unknown as PlanJson;
    const { monitor, requests } = setup(DEFAULT_DRIFT_OPTIONS, plan);
    for (let i = 0; i < detectionStep(DEFAULT_DRIFT_OPTIONS); i++) monitor.onStep(step());
    expect(requests).toHaveLength(1);
    // host (2 - 0.5) / 2, ada (1 - 0.5) / 1, bob (5 - 0.5) / 5: a plan pricing step + layers x block gives each its measured time back.
    expect(Object.fromEntries(monitor.blockMs)).toEqual({ '': { blockMs: 0.75, stepMs: 0.5 }, 'id-ada': { blockMs: 0.5, stepMs: 0.5 }, 'id-bob': { blockMs: 0.9, stepMs: 0.5 } });
    expect(monitor.status().blockMs).toEqual({ host: 0.75, ada: 0.5, bob: 0.9 });
  });

  it('splits a measured median as the plan priced it, and puts it all on the layers when it is not above the fixed part', () => {
    expect(splitMeasured(5, 1, 4)).toEqual({ blockMs: 1, stepMs: 1 });
    expect(splitMeasured(0.8, 1, 4)).toEqual({ blockMs: 0.2, stepMs: 0 });
    expect(splitMeasured(3, 0, 3)).toEqual({ blockMs: 1, stepMs: 0 });
  });

  it('measures the ring\'s cost per hop beyond the edges\' one-way times from its decode steps, drift on or off', () => {
    const edges = [{ latency_ms: 2 }, { latency_ms: 2 }, { latency_ms: 2 }];
    const plan = { ...PLAN, edges } as unknown as PlanJson;
    // 12 ms a step: host 2.4 + ada 1 + bob 5 + one-way 3 x (RTT 2 / 2) leaves 0.6 over 3 hops.
    expect(hopOverheadMs(step({ ringMs: 12 }), ORDER, plan)).toBeCloseTo(0.2, 12);
    // An edge of unknown RTT, or a stage's time missing: not told.
    expect(hopOverheadMs(step(), ORDER, { ...PLAN, edges: [...edges.slice(1), { latency_ms: null }] } as unknown as PlanJson)).toBeUndefined();
    expect(hopOverheadMs(step({ stageMs: { '2-3': 1 } }), ORDER, plan)).toBeUndefined();
    for (const options of [DEFAULT_DRIFT_OPTIONS, false] as const) {
      const { monitor } = setup(options, plan);
      for (let i = 1; i < HOP_MIN_STEPS; i++) monitor.onStep(step({ ringMs: 12 + (i % 3 === 0 ? 0.3 : 0) }));
      expect(monitor.hopMs).toBeUndefined();
      // Steps of several rows or tokens are not the unit: not counted.
      monitor.onStep(step({ ringMs: 100, rows: 2 }));
      expect(monitor.hopMs).toBeUndefined();
      monitor.onStep(step({ ringMs: 12 }));
      expect(monitor.hopMs).toBeCloseTo(0.2, 12);
      expect(monitor.status().hopMs).toBeCloseTo(0.2, 12);
    }
    // Noise below the one-way times reads as no overhead, never a negative cost.
    const { monitor } = setup(false, plan);
    for (let i = 0; i < HOP_MIN_STEPS; i++) monitor.onStep(step({ ringMs: 9 }));
    expect(monitor.hopMs).toBe(0);
  });
});
