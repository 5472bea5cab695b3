// The control API over the real ring: a host SessionControl hosting through createSessionHost and
// two members joining from their own SessionControls (all in this process, on loopback), each
// running its RingMember. The host's /api/status shows the plan's stages, the members their
// assignments, and a chat goes through the ring; a plan the memory cannot hold shows its refusal.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SessionStatus } from '../../../common/control-api.js';
import { testModelPath } from '../model/test-models.js';
import { startControlApi, type ControlApi } from './control-api.js';
import { SessionControl } from './control-api-source.js';
import { memberRing, ringHosting, type RingHostingOptions } from './ring-control.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function start(control: SessionControl): Promise<ControlApi> {
  const api = await startControlApi({ source: control, staticDir: null });
  cleanups.push(() => api.close(), () => control.close());
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
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
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
  }, 120_000);

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
