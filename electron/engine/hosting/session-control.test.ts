// SessionControl behind the control API, over real sockets: auth, validation, the static UI, SSE
// snapshots, and a host and a member (two SessionControls on loopback) going through join, approve,
// pause and resume. Also: a request naming no model hosts the built-in one, and wrong codes that
// lock the session's code reach the host's status as its error. (A download's model_sha256:
// model-fetch.test.ts.)
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DeviceCard, SessionStatus, type ControlEvent } from '../../../common/control-api.js';
import { runDeviceBench } from '../device/device-bench.js';
import { defaultModelPath } from '../paths.js';
import { startRendezvous } from '../rendezvous/server.js';
import { createHost } from '../session/host.js';
import { codePassword, parseSessionCode } from '../session/session-code.js';
import { passwordScalar } from '../session/spake2.js';
import { startControlApi, type ControlApi } from '../server/control-api.js';
import { wrongCodeGuess } from '../test-support/wrong-code-guess.js';
import { memberRing } from './member-node.js';
import { SessionControl, type HostingRequest, type StartHosting } from './session-control.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Hosting without serving: the session alone (the serving half has its own tests). */
const sessionOnly: StartHosting = async (req) => {
  const session = await createHost({ autoApprove: req.auto_approve ?? false, listenHost: '127.0.0.1', softEvictMs: 1500, hardEvictMs: 60_000 });
  return { session, model: req.model, serving: null, close: () => session.close() };
};

async function start(control: SessionControl, staticDir: string | null = null): Promise<ControlApi> {
  const api = await startControlApi({ source: control, staticDir });
  cleanups.push(() => api.close(), () => control.close());
  return api;
}

function call(api: ControlApi, method: string, path: string, body?: unknown, token = api.token): Promise<Response> {
  return fetch(`${api.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
  });
}

async function status(api: ControlApi): Promise<SessionStatus> {
  return SessionStatus.parse(await (await call(api, 'GET', '/status')).json());
}


async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('control API', () => {
  it('refuses requests without the token or with a wrong one', async () => {
    const api = await start(new SessionControl());
    const none = await fetch(`${api.url}/status`);
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: { code: string } }).error.code).toBe('CONTROL_UNAUTHORIZED');
    expect((await call(api, 'GET', '/status', undefined, `${api.token}x`)).status).toBe(401);
    expect((await call(api, 'GET', '/status', undefined, api.token.slice(1))).status).toBe(401);
    const ok = await call(api, 'GET', '/status');
    expect(ok.status).toBe(200);
    expect(SessionStatus.parse(await ok.json()).role).toBe('none');
  });

  it('refuses malformed, invalid and oversized bodies with a code', async () => {
    const api = await start(new SessionControl({ startHosting: sessionOnly }));
    const bad = await call(api, 'POST', '/session/join', '{not json');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('CONTROL_BAD_REQUEST');
    const invalid = await call(api, 'POST', '/session/decide', { member_id: 'x', approve: 'yes' });
    expect(((await invalid.json()) as { error: { message: string } }).error.message).toMatch(/approve/);
    const extra = await call(api, 'POST', '/session/host', { model: 'm.gguf', evil: true });
    expect(extra.status).toBe(400);
    expect((await call(api, 'POST', '/session/host', { model: 'm.gguf', standby_gb: -1 })).status).toBe(400);
    const big = await call(api, 'POST', '/session/host', { model: 'x'.repeat(70_000) });
    expect(big.status).toBe(413);
    expect((await call(api, 'GET', '/session/host')).status).toBe(405);
    expect((await call(api, 'GET', '/nothing')).status).toBe(404);
  });

  it('answers actions that do not fit the current state with 409 and a reason', async () => {
    const api = await start(new SessionControl({ startHosting: sessionOnly }));
    const pause = await call(api, 'POST', '/session/pause', { paused: true });
    expect(pause.status).toBe(409);
    expect(((await pause.json()) as { error: { message: string } }).error.message).toMatch(/Join a session/);
    const decide = await call(api, 'POST', '/session/decide', { member_id: 'nobody', approve: true });
    expect(decide.status).toBe(409);
    const chat = await call(api, 'POST', '/chat', { messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(503);
    expect(((await chat.json()) as { error: { code: string } }).error.code).toBe('CONTROL_NOT_SERVING');
  });

  it('serves the built UI without the token and nothing outside its folder', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kiwi-ui-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, 'index.html'), '<!doctype html><title>Kiwi</title>');
    await writeFile(join(tmpdir(), 'kiwi-secret-outside.txt'), 'secret');
    cleanups.push(() => rm(join(tmpdir(), 'kiwi-secret-outside.txt'), { force: true }));
    const api = await start(new SessionControl(), dir);
    const origin = api.url.replace(/\/api$/, '');
    const index = await fetch(`${origin}/`);
    expect(index.headers.get('content-type')).toMatch(/text\/html/);
    expect(await index.text()).toContain('<title>Kiwi</title>');
    expect(api.uiUrl).toBe(`${origin}/#token=${encodeURIComponent(api.token)}`);
    expect((await fetch(`${origin}/%2e%2e/kiwi-secret-outside.txt`)).status).toBe(404);
    expect((await fetch(`${origin}/..%2fkiwi-secret-outside.txt`)).status).toBe(404);
    expect((await fetch(`${origin}/missing.js`)).status).toBe(404);
  });

  it('streams snapshots over SSE, starting with the current status and device card', async () => {
    const control = new SessionControl({ startHosting: sessionOnly });
    const api = await start(control);
    const res = await call(api, 'GET', '/events');
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const seen: ControlEvent[] = [];
    let buffer = '';
    const next = async (match: (e: ControlEvent) => boolean): Promise<ControlEvent> => {
      for (;;) {
        const hit = seen.find(match);
        if (hit !== undefined) return hit;
        const { value, done } = await reader.read();
        if (done) throw new Error('event stream ended');
        buffer += new TextDecoder().decode(value);
        let i: number;
        while ((i = buffer.indexOf('\n\n')) >= 0) {
          const data = buffer.slice(0, i).split('\n').find((l) => l.startsWith('data: '));
          buffer = buffer.slice(i + 2);
          if (data !== undefined) seen.push(JSON.parse(data.slice(6)) as ControlEvent);
        }
      }
    };
    const first = await next((e) => e.type === 'status');
    expect(first.type === 'status' && first.status.role).toBe('none');
    expect(await next((e) => e.type === 'device')).toEqual({ type: 'device', device: DeviceCard.parse({ state: 'idle', progress: null, fraction: null, summary: null, error: null }) });
    expect((await call(api, 'POST', '/session/host', { model: 'tiny.gguf' })).status).toBe(200);
    const hosting = await next((e) => e.type === 'status' && e.status.role === 'host');
    expect(hosting.type === 'status' && hosting.status.code).toMatch(/^\d+-[a-z]+-[a-z]+-[a-z]+$/);
    await reader.cancel();
  });

  it('takes a member through join, approval, pause and resume while the host watches', async () => {
    const host = await start(new SessionControl({ startHosting: sessionOnly }));
    const member = await start(new SessionControl({ join: { listenHost: '127.0.0.1', heartbeatMs: 200, name: 'alice' } }));
    const hosting = SessionStatus.parse(await (await call(host, 'POST', '/session/host', { model: 'tiny.gguf' })).json());
    expect(hosting).toMatchObject({ role: 'host', self_peer: 0, ring: [0], serving: null });

    const joined = await call(member, 'POST', '/session/join', { code: hosting.code, rendezvous: hosting.rendezvous });
    expect(SessionStatus.parse(await joined.json())).toMatchObject({ role: 'member', phase: 'pending', code: hosting.code });
    const pending = await until('a pending member', () => status(host), (s) => s.members.some((m) => m.state === 'pending'));
    const alice = pending.members[0];
    expect(alice).toMatchObject({ name: 'alice', state: 'pending', connected: true });
    // The host approves by the fingerprint the member's own screen shows.
    expect(alice?.fingerprint).toMatch(/^[0-9a-z]{4}-[0-9a-z]{4}$/);
    expect((await status(member)).self_fingerprint).toBe(alice?.fingerprint);

    expect((await call(host, 'POST', '/session/decide', { member_id: alice?.member_id, approve: true })).status).toBe(200);
    await until('the member active', () => status(member), (s) => s.phase === 'active');
    const ring = await until('a direct ring link with an RTT', () => status(host), (s) => s.ring.length === 2 && s.links.some((l) => l.state === 'up' && l.rtt_ms !== null));
    expect(ring.links[0]).toMatchObject({ a: 0, kind: 'direct' });

    const paused = SessionStatus.parse(await (await call(member, 'POST', '/session/pause', { paused: true })).json());
    expect(paused).toMatchObject({ phase: 'paused', paused: true });
    await until('the member out of the ring', () => status(host), (s) => s.ring.length === 1 && s.members[0]?.state === 'left');
    await call(member, 'POST', '/session/pause', { paused: false });
    // The same identity rejoins without a second approval.
    await until('the member back in the ring', () => status(host), (s) => s.ring.length === 2 && s.members.length === 1 && s.members[0]?.state === 'active');
    expect((await status(member)).phase).toBe('active');

    await call(member, 'POST', '/session/leave');
    expect((await status(member)).role).toBe('none');
    await call(host, 'POST', '/session/leave');
    expect((await status(host)).role).toBe('none');
  });

  it('sends a join\'s memory budget to the host as the member\'s memory, and refuses one below the runtime', async () => {
    let hosted: Awaited<ReturnType<typeof createHost>> | undefined;
    const capture: StartHosting = async (req) => {
      const session = (hosted = await createHost({ autoApprove: true, listenHost: '127.0.0.1' }));
      return { session, model: req.model, serving: null, close: () => session.close() };
    };
    const host = await start(new SessionControl({ startHosting: capture }));
    const member = await start(new SessionControl({ join: { listenHost: '127.0.0.1', name: 'dora' } }));
    const hosting = SessionStatus.parse(await (await call(host, 'POST', '/session/host', { model: 'tiny.gguf' })).json());
    const small = await call(member, 'POST', '/session/join', { code: hosting.code, rendezvous: hosting.rendezvous, memory_mb: 100 });
    expect(small.status).toBe(400);
    expect(((await small.json()) as { error: { message: string } }).error.message).toMatch(/memory budget of 100 cannot hold a member: its runtime alone needs 192 MiB/);
    expect((await status(member)).role).toBe('none');
    expect((await call(member, 'POST', '/session/join', { code: hosting.code, rendezvous: hosting.rendezvous, memory_mb: 1024 })).status).toBe(200);
    const caps = await until('the member\'s capabilities at the host', async () => hosted?.status().members[0]?.capabilities, (c) => c !== undefined);
    expect(caps).toMatchObject({ memory_budget_bytes: 1024 * 2 ** 20, fleet_device: { memory_bytes: 1024 * 2 ** 20 } });
  });

  it('gives a join\'s standby disk budget to the member\'s ring, as kiwi join --standby-gb, and refuses a negative one', async () => {
    const capture: StartHosting = async (req) => {
      const session = await createHost({ autoApprove: true, listenHost: '127.0.0.1' });
      return { session, model: req.model, serving: null, close: () => session.close() };
    };
    const host = await start(new SessionControl({ startHosting: capture }));
    const weightsDir = await mkdtemp(join(tmpdir(), 'kiwi-standby-join-'));
    let standby: unknown;
    const real = memberRing({ weightsDir });
    const member = await start(new SessionControl({
      join: { listenHost: '127.0.0.1', name: 'erin' },
      memberRing: (session, onChange, opts) => {
        const ring = real(session, onChange, opts);
        standby = opts;
        return ring;
      },
    }));
    const hosting = SessionStatus.parse(await (await call(host, 'POST', '/session/host', { model: 'tiny.gguf' })).json());
    expect((await call(member, 'POST', '/session/join', { code: hosting.code, rendezvous: hosting.rendezvous, standby_gb: -1 })).status).toBe(400);
    expect((await call(member, 'POST', '/session/join', { code: hosting.code, rendezvous: hosting.rendezvous, standby_gb: 2.5 })).status).toBe(200);
    expect(standby).toEqual({ standbyBytes: 2_500_000_000, memoryBudget: false });
    await call(member, 'POST', '/session/leave');
    await rm(weightsDir, { recursive: true, force: true });
  });

  it('finds the host\'s rendezvous from its LAN announcement when the join names none', async () => {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    const announcing: StartHosting = async (req) => {
      const session = await createHost({ autoApprove: true, listenHost: '127.0.0.1', lanBeacon: { port, targets: ['127.0.0.1'], intervalMs: 50 } });
      return { session, model: req.model, serving: null, close: () => session.close() };
    };
    const host = await start(new SessionControl({ startHosting: announcing }));
    const member = await start(new SessionControl({ join: { name: 'carol' }, lan: { port, timeoutMs: 5000 } }));
    await call(host, 'POST', '/session/host', { model: 'tiny.gguf' });
    const hosting = await status(host);
    const joined = SessionStatus.parse(await (await call(member, 'POST', '/session/join', { code: hosting.code })).json());
    expect(joined).toMatchObject({ role: 'member', phase: 'active', rendezvous: hosting.rendezvous });
  });

  it('reports a wrong code as the member\'s error and returns to idle', async () => {
    const host = await start(new SessionControl({ startHosting: sessionOnly }));
    const member = await start(new SessionControl({ join: { name: 'mallory' } }));
    await call(host, 'POST', '/session/host', { model: 'tiny.gguf' });
    const hosting = await status(host);
    // Same nameplate, one word different: a well-formed code that fails the PAKE.
    const words = (hosting.code as string).split('-');
    const wrong = [...words.slice(0, -1), words.at(-1) === 'kiwi' ? 'orbit' : 'kiwi'].join('-');
    const res = await call(member, 'POST', '/session/join', { code: wrong, rendezvous: hosting.rendezvous });
    expect(res.status).toBe(400);
    const after = await status(member);
    expect(after.role).toBe('none');
    expect(after.error?.code).toMatch(/PAKE|SESSION_CODE_INVALID/);
  });

  it('hosts the built-in model for a request that names none, and refuses one where there is no default', async () => {
    const builtIn = defaultModelPath();
    expect(builtIn !== undefined && existsSync(builtIn)).toBe(true);
    const hosted: HostingRequest[] = [];
    const recording: StartHosting = async (req) => {
      hosted.push(req);
      return sessionOnly(req);
    };
    const without = await start(new SessionControl({ startHosting: recording }));
    const refused = await call(without, 'POST', '/session/host', {});
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'CONTROL_BAD_REQUEST', message: expect.stringMatching(/Give the model/) });
    expect((await status(without)).role).toBe('none');

    const withDefault = await start(new SessionControl({ startHosting: recording, defaultModel: builtIn }));
    // A checksum belongs to a download; the built-in file has none to check.
    expect((await call(withDefault, 'POST', '/session/host', { model_sha256: 'a'.repeat(64) })).status).toBe(400);
    const res = await call(withDefault, 'POST', '/session/host', { auto_approve: true });
    expect(res.status).toBe(200);
    expect(SessionStatus.parse(await res.json())).toMatchObject({ role: 'host', model: builtIn });
    expect(hosted).toEqual([{ model: builtIn, auto_approve: true }]);
    await call(withDefault, 'POST', '/session/leave');
    // A model the request names still wins over the default; the app's weight layout and draft model settings come along.
    expect((await call(withDefault, 'POST', '/session/host', { model: 'tiny.gguf', weight_layout: 'fast', draft_model: '/m/draft.gguf' })).status).toBe(200);
    expect((await status(withDefault)).model).toBe('tiny.gguf');
    expect(hosted[1]).toEqual({ model: 'tiny.gguf', weight_layout: 'fast', draft_model: '/m/draft.gguf' });
    await call(withDefault, 'POST', '/session/leave');
    expect((await call(withDefault, 'POST', '/session/host', { model: 'tiny.gguf', weight_layout: 'quick' })).status).toBe(400);
    expect((await call(withDefault, 'POST', '/session/host', { model: 'tiny.gguf', draft_model: '' })).status).toBe(400);
  });

  it('shows the host that its code stopped working after too many wrong codes', async () => {
    // A rendezvous without limits of its own: only the host's count stops the guesses.
    const lax = { maxFailedAttempts: 100_000, maxFailedAttemptsTotal: 100_000, maxPendingPerSource: 100_000, maxConnectionsPerIp: 100_000, messagesPerSecond: 1e6, messageBurst: 1e6 };
    const rv = await startRendezvous({ limits: lax });
    cleanups.push(() => rv.close());
    const guarded: StartHosting = async (req) => {
      const session = await createHost({ rendezvousUrl: rv.url, autoApprove: false, listenHost: '127.0.0.1', maxPakeFailures: 3 });
      return { session, model: req.model, serving: null, close: () => session.close() };
    };
    const api = await start(new SessionControl({ startHosting: guarded, coalesceMs: 5 }));
    const hosting = SessionStatus.parse(await (await call(api, 'POST', '/session/host', { model: 'tiny.gguf' })).json());
    expect(hosting.error).toBeNull();
    const code = parseSessionCode(hosting.code as string);
    const wrong = passwordScalar(codePassword({ ...code, words: [code.words[0] === 'apple' ? 'lemon' : 'apple', ...code.words.slice(1)] }), String(code.nameplate));
    // Real key exchanges with a wrong code, each answered by the host and failing its confirmation.
    for (let i = 0; i < 3; i++) expect(await wrongCodeGuess(rv.url, code.nameplate, wrong)).toBe('answered');
    const locked = await until('the lock in the host\'s status', () => status(api), (s) => s.error !== null);
    expect(locked).toMatchObject({ role: 'host', error: { code: 'PAKE_LOCKED', message: expect.stringMatching(/3 attempts with a wrong code.*new session for a new code/) } });
    // The session goes on for the members it has; the next guess gets no answer.
    expect(await wrongCodeGuess(rv.url, code.nameplate, wrong)).toBe('refused');
    expect((await status(api)).role).toBe('host');
  });

  it('runs the device benchmark and shows its progress, then the card', async () => {
    const cacheDir = await mkdtemp(join(tmpdir(), 'kiwi-bench-'));
    cleanups.push(() => rm(cacheDir, { recursive: true, force: true }));
    const progress: string[] = [];
    const control = new SessionControl({
      runBench: (onProgress, signal) => runDeviceBench({ cacheDir, onProgress, signal, bandwidth: { method: 'js', threads: 1, bytesPerThread: 4 * 1024 * 1024, rounds: 2, passesPerRound: 1 } }),
    });
    control.subscribe((e) => {
      if (e.type === 'device' && e.device.progress !== null) progress.push(e.device.progress);
    });
    const api = await start(control);
    const started = DeviceCard.parse(await (await call(api, 'POST', '/device/bench', {})).json());
    expect(started.state).toBe('running');
    const done = await until('the device card', async () => DeviceCard.parse(await (await call(api, 'GET', '/device')).json()), (d) => d.state !== 'running', 60_000);
    expect(done.error).toBeNull();
    expect(done.summary?.cores).toBeGreaterThan(0);
    expect(done.summary?.memory_total_bytes).toBeGreaterThan(0);
    expect(done.summary?.providers).toContain('cpu');
    expect(done.summary?.host_bandwidth_gbps).toBeGreaterThan(0);
    expect(progress.some((p) => /memory bandwidth: round 1\/2/.test(p))).toBe(true);
  }, 90_000);
});
