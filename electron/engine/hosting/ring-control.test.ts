// The control API over the real ring: a host SessionControl hosting through createHostNode and
// two members joining from their own SessionControls (all in this process, on loopback), each
// running its RingMember. The host's /api/status shows the plan's stages, the members their
// assignments, and a chat goes through the ring; a plan the memory cannot hold shows its refusal.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SessionStatus } from '../../../common/control-api.js';
import { testModelPath } from '../model/test-models.js';
import { startControlApi, type ControlApi } from '../server/control-api.js';
import { SessionControl } from './session-control.js';
import type { SessionHostStatus } from '../pipeline/session-host.js';
import { ringHosting, type RingHostingOptions } from './host-node.js';
import { memberRing } from './member-node.js';
import { FlowMeter, ringPlanWire, ringStateWire, sampleHostFlow } from './ring-control.js';

// Controls close in the order they started: the host ends the session first, as at a real session's end.
const cleanups: Array<() => Promise<unknown>> = [];
const folders: string[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
  for (const dir of folders.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function start(control: SessionControl): Promise<ControlApi> {
  const api = await startControlApi({ source: control, staticDir: null });
  cleanups.push(() => control.close(), () => api.close());
  return api;
}

function call(api: ControlApi, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${api.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${api.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
}

async function status(api: ControlApi): Promise<SessionStatus> {
  return SessionStatus.parse(await (await call(api, 'GET', '/status')).json());
}

async function until(what: string, api: ControlApi, ok: (s: SessionStatus) => boolean, timeoutMs = 60_000): Promise<SessionStatus> {
  const started = Date.now();
  for (;;) {
    const s = await status(api);
    if (ok(s)) return s;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function hostControl(ring: RingHostingOptions['ring']): SessionControl {
  return new SessionControl({
    startHosting: ringHosting({
      session: { listenHost: '127.0.0.1', softEvictMs: 5000, hardEvictMs: 60_000 },
      api: { port: 0 },
      ring: { maxPositions: 64, settleMs: 200, ...ring },
    }),
  });
}

async function memberControl(name: string): Promise<SessionControl> {
  const dir = await mkdtemp(join(tmpdir(), `kiwi-ring-control-${name}-`));
  folders.push(dir);
  return new SessionControl({ join: { listenHost: '127.0.0.1', heartbeatMs: 300, name }, memberRing: memberRing({ weightsDir: dir }) });
}

describe('the control API over the ring', () => {
  it('shows the plan\'s stages, each member\'s assignment, and serves through the ring', async () => {
    const model = await testModelPath('stories260K.gguf');
    const host = await start(hostControl({ expect: 2 }));
    expect((await call(host, 'POST', '/session/host', { model, auto_approve: true })).status).toBe(200);
    const { code, rendezvous } = await status(host);
    const members = await Promise.all(['alice', 'bob'].map(async (name) => start(await memberControl(name))));
    for (const m of members) expect((await call(m, 'POST', '/session/join', { code, rendezvous })).status).toBe(200);

    const serving = await until('the ring to serve', host, (s) => s.serving !== null);
    const plan = serving.plan;
    if (plan === null) throw new Error('a serving ring has a plan');
    expect(serving.plan_error).toBeNull();
    expect(plan.measured).toBe(false);
    // Three stages, the host (peer 0) first and holding the head; together they cover every layer once.
    expect(plan.stages.map((s) => s.name).sort()).toEqual(['alice', 'bob', 'host']);
    expect(plan.stages[0]).toMatchObject({ peer: 0, head: true, start: 0 });
    const blocks = plan.stages.filter((s) => s.end > s.start).sort((a, b) => a.start - b.start);
    expect(blocks[0]?.start).toBe(0);
    for (let i = 1; i < blocks.length; i++) expect(blocks[i]?.start).toBe(blocks[i - 1]?.end);
    expect(blocks.at(-1)?.end).toBe(plan.layers);
    expect(plan.layers).toBe(5);
    for (const s of plan.stages.filter((x) => x.peer !== 0)) expect(serving.members.find((m) => m.peer === s.peer)?.name).toBe(s.name);

    // Each member shows the range the host planned for it, loaded.
    for (const [i, m] of members.entries()) {
      const s = await until('the assignment to load', m, (x) => x.assignment?.load_fraction === 1);
      const mine = plan.stages.find((st) => st.peer === s.self_peer);
      expect(mine?.name).toBe(['alice', 'bob'][i]);
      expect(s.assignment).toMatchObject({ start: mine?.start, end: mine?.end, head: false });
    }

    // A chat through the ring; afterwards every stage's time is measured and tokens/s known.
    const res = await call(host, 'POST', '/chat', { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, temperature: 0 });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('data: [DONE]');
    const after = await status(host);
    for (const s of after.plan?.stages ?? []) expect(s.stage_ms).not.toBeNull();
    expect(after.plan?.tokens_per_s).toBeGreaterThan(0);
    expect(after.plan?.measured).toBe(true);
    for (const m of members) expect((await status(m)).assignment?.stage_ms).toBeGreaterThan(0);
    expect(after.flow?.tokens_per_s).toBeGreaterThan(0);
    expect(after.ring_state).toMatchObject({ phase: 'serving', epoch: 1, recovery: null, waiting_until: null, recoveries: [] });
    expect(after.members.every((m) => m.in_ring)).toBe(true);
    // Members see each other by name (the host's roster), each in the ring.
    for (const m of members) {
      const s = await until('the roster', m, (x) => x.members.length >= 2);
      expect(s.members.filter((x) => x.in_ring).map((x) => x.name).sort()).toEqual(expect.arrayContaining(['alice', 'bob']));
    }
  }, 120_000);

  it('hands a pausing member\'s layers back before it goes: the host re-plans without it first', async () => {
    const model = await testModelPath('stories260K.gguf');
    const host = await start(hostControl({ expect: 2 }));
    expect((await call(host, 'POST', '/session/host', { model, auto_approve: true })).status).toBe(200);
    const { code, rendezvous } = await status(host);
    const [alice, bob] = await Promise.all(['alice', 'bob'].map(async (name) => start(await memberControl(name))));
    for (const m of [alice as ControlApi, bob as ControlApi]) expect((await call(m, 'POST', '/session/join', { code, rendezvous })).status).toBe(200);
    await until('the ring to serve', host, (s) => s.serving !== null);
    const alicePeer = (await status(alice as ControlApi)).self_peer;

    // The pause answers once the host released alice: by then the ring no longer counts her.
    expect((await call(alice as ControlApi, 'POST', '/session/pause', { paused: true })).status).toBe(200);
    const after = await status(host);
    expect(after.ring).not.toContain(alicePeer);
    expect(after.ring_state?.epoch).toBe(2);
    expect(after.ring_state?.recoveries.at(-1)?.reason).toMatch(/alice/);
    expect((await status(alice as ControlApi)).phase).toBe('paused');
    // The smaller ring serves.
    const served = await until('the ring of host and bob to serve', host, (s) => s.ring_state?.phase === 'serving' && s.serving !== null);
    expect(served.plan?.stages.map((x) => x.name).sort()).toEqual(['bob', 'host']);
    const res = await call(host, 'POST', '/chat', { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, temperature: 0 });
    expect(await res.text()).toContain('data: [DONE]');
  }, 120_000);

  it('refuses to host a model file that does not exist, before any code is shown', async () => {
    const api = await start(new SessionControl({ startHosting: ringHosting({ api: { port: 0 } }) }));
    const res = await call(api, 'POST', '/session/host', { model: join(tmpdir(), 'kiwi-no-such-model.gguf') });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'FILE_NOT_FOUND', message: expect.stringMatching(/GGUF/) });
    expect(await status(api)).toMatchObject({ role: 'none', code: null, error: { code: 'FILE_NOT_FOUND' } });
  });

  it('shows why the ring has no plan when the devices cannot hold the model', async () => {
    const model = await testModelPath('stories260K.gguf');
    // Members that report no device stand in as the host's: 64 KiB each cannot hold the model.
    const host = await start(hostControl({ expect: 1, hostDevice: { memoryBytes: 64 * 1024 } }));
    expect((await call(host, 'POST', '/session/host', { model, auto_approve: true })).status).toBe(200);
    const { code, rendezvous } = await status(host);
    const alice = await start(await memberControl('alice'));
    expect((await call(alice, 'POST', '/session/join', { code, rendezvous })).status).toBe(200);
    const refused = await until('the plan to be refused', host, (s) => s.plan_error !== null);
    expect(refused.plan).toBeNull();
    expect(refused.plan_error?.code).toBe('PLAN_INSUFFICIENT_MEMORY');
    expect(refused.serving).toBeNull();
  }, 60_000);
});

/** A SessionHost status as the pipeline reports it, for the mapping's own tests. */
function hostStatus(over: Partial<SessionHostStatus> = {}): SessionHostStatus {
  return {
    phase: 'serving', epoch: 1, recovery: undefined, recoveries: [], waitingUntil: undefined,
    session: { code: '1-a-b-c', nameplate: '1', rendezvousUrl: 'ws://x', members: [], ring: [0], links: [] } as unknown as SessionHostStatus['session'],
    plan: undefined, stages: [],
    timing: { steps: 0, meanRingMs: null, meanHostMs: null, meanStageMs: {}, inFlight: 0 },
    kv: undefined, requests: { completed: 0, cancelled: 0, failed: 0 }, error: undefined,
    drift: { options: false, last: null, blockMs: {}, stages: [] },
    ...over,
  };
}

describe('the ring state on the wire', () => {
  it('maps a re-plan in progress, waiting, and the recovery history (newest last, at most 16)', () => {
    const records = Array.from({ length: 18 }, (_, i) => ({ epoch: i + 2, reason: `bob dropped ${i}`, startedAt: 1000 + i, durationMs: 250 + i, bytesMoved: 4096 * i, resumedRequests: i % 3 }));
    const recovering = ringStateWire(hostStatus({ phase: 'recovering', epoch: 19, recovery: { reason: 'bob stopped answering', startedAt: 5000 }, recoveries: records }));
    expect(recovering).toMatchObject({ phase: 'recovering', epoch: 19, recovery: { reason: 'bob stopped answering', started_at: 5000 }, waiting_until: null });
    expect(recovering.recoveries).toHaveLength(16);
    expect(recovering.recoveries.at(-1)).toEqual({ epoch: 19, reason: 'bob dropped 17', started_at: 1017, duration_ms: 267, bytes_moved: 4096 * 17, resumed_requests: 2 });
    const waiting = ringStateWire(hostStatus({ phase: 'waiting', epoch: 2, waitingUntil: 99_000 }));
    expect(waiting).toEqual({ phase: 'waiting', epoch: 2, recovery: null, waiting_until: 99_000, recoveries: [] });
  });

  it('shows each stage\'s predicted and measured ms side by side, measured as the drift monitor\'s decode median where it has one', () => {
    const plan = { stages: [{ device: 'host', start: 0, end: 1, head: true, stage_ms: 1.05 }, { device: 'bob', start: 1, end: 7, head: false, stage_ms: 0.3 }, { device: 'ada', start: 7, end: 8, head: false, stage_ms: 1 }], head: 'host', circuit_ms: 2.35 };
    const s = hostStatus({
      plan: plan as unknown as SessionHostStatus['plan'],
      stages: [{ peer: 0, name: 'host', start: 0, end: 1, head: true, state: 'ready' }, { peer: 2, name: 'bob', start: 1, end: 7, head: false, state: 'ready' }, { peer: 1, name: 'ada', start: 7, end: 8, head: false, state: 'ready' }],
      timing: { steps: 40, meanRingMs: 9, meanHostMs: 2, meanStageMs: { '1-7': 6.2, '7-8': 1.4 }, inFlight: 0 },
      // The monitor judges the host's blocks alone (0.8 ms); its row keeps the head in, as its prediction does.
      drift: { options: false, last: null, blockMs: {}, stages: [{ name: 'host', start: 0, end: 1, predictedMs: 0.9, measuredMs: 0.8, samples: 24 }, { name: 'bob', start: 1, end: 7, predictedMs: 0.3, measuredMs: 4.4, samples: 24 }] },
    });
    expect(ringPlanWire(s).plan?.stages.map((x) => [x.name, x.predicted_ms, x.measured_ms, x.stage_ms])).toEqual([
      ['host', 1.05, 2, 2], ['bob', 0.3, 4.4, 6.2], ['ada', 1, 1.4, 1.4],
    ]);
  });

  it('passes each stage\'s state on, a member that kept its layers as kept', () => {
    const plan = { stages: [{ device: 'host', start: 0, end: 2, head: true, stage_ms: 1 }, { device: 'alice', start: 2, end: 5, head: false, stage_ms: 2 }], head: 'host', circuit_ms: 3 };
    const s = hostStatus({
      plan: plan as unknown as SessionHostStatus['plan'],
      stages: [{ peer: 0, name: 'host', start: 0, end: 2, head: true, state: 'ready' }, { peer: 1, name: 'alice', start: 2, end: 5, head: false, state: 'kept' }],
    });
    expect(ringPlanWire(s).plan?.stages.map((x) => [x.name, x.state])).toEqual([['host', 'ready'], ['alice', 'kept']]);
    // Planned, not assigned yet: no state.
    expect(ringPlanWire(hostStatus({ plan: plan as unknown as SessionHostStatus['plan'] })).plan?.stages.map((x) => x.state)).toEqual([null, null]);
  });
});

describe('FlowMeter', () => {
  const timing = (steps: number, meanRingMs: number | null, inFlight = 0): Pick<SessionHostStatus, 'timing' | 'requests'> => ({
    timing: { steps, meanRingMs, meanHostMs: null, meanStageMs: {}, inFlight }, requests: { completed: 0, cancelled: 0, failed: 0 },
  });

  it('says tokens flow while measured steps change, also once the recent-step window is full, and stops after they stop', () => {
    const m = new FlowMeter();
    sampleHostFlow(m, timing(0, null), -Infinity);
    expect(m.activeAt(0)).toBe(false);
    expect(sampleHostFlow(m, timing(0, null), 1000)).toBe(false);
    expect(sampleHostFlow(m, timing(12, 4.2), 2000)).toBe(true);
    expect(m.activeAt(2500)).toBe(true);
    // 64 recent steps kept: the count stays, the mean moves with every new step.
    sampleHostFlow(m, timing(64, 4.3), 3000);
    expect(sampleHostFlow(m, timing(64, 4.1), 4000)).toBe(true);
    expect(m.activeAt(5000)).toBe(true);
    // Nothing new for two intervals: no longer flowing, and the change is announced.
    expect(sampleHostFlow(m, timing(64, 4.1), 5000)).toBe(false);
    expect(sampleHostFlow(m, timing(64, 4.1), 6000)).toBe(true);
    expect(m.activeAt(6000)).toBe(false);
    // Steps in flight count as flowing even when the means have not moved yet.
    expect(sampleHostFlow(m, timing(64, 4.1, 2), 7000)).toBe(true);
    expect(m.activeAt(7000)).toBe(true);
    // A tick that comes late (the interval delayed on a busy machine) still announces the stop.
    sampleHostFlow(m, timing(65, 4.0), 8000);
    expect(sampleHostFlow(m, timing(65, 4.0), 9999)).toBe(false);
    expect(sampleHostFlow(m, timing(65, 4.0), 11005)).toBe(true);
    expect(m.activeAt(11005)).toBe(false);
  });
});
