// The nodes as `kiwi host` and `kiwi join` compose them (host-node.ts, member-node.ts), in this
// process on loopback: a host without a model is a session alone shown on its loopback control API
// (token in a 0600 file that goes with the node), a member node joins it and shows itself on its
// own control API, and leaving hands back and is seen by the host. A missing model file fails
// before any session (and so any code) exists. The ring itself: ring-control.test.ts and the
// process tests of `kiwi host`.
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SessionStatus } from '../../../common/control-api.js';
import { isKiwiError } from '../errors.js';
import { testModelPath } from '../model/test-models.js';
import { generateIdentity } from '../session/identity.js';
import type { ControlEndpoint } from './control-endpoint.js';
import { createHostNode, ringOptionsFor, type HostNode } from './host-node.js';
import { createMemberNode } from './member-node.js';

let runtimeDir: string;
const saved = process.env.KIWI_RUNTIME_DIR;
beforeAll(async () => {
  runtimeDir = await mkdtemp(join(tmpdir(), 'kiwi-host-node-'));
  process.env.KIWI_RUNTIME_DIR = runtimeDir;
});
afterAll(async () => {
  if (saved === undefined) delete process.env.KIWI_RUNTIME_DIR;
  else process.env.KIWI_RUNTIME_DIR = saved;
  await rm(runtimeDir, { recursive: true, force: true });
});
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function status(c: ControlEndpoint): Promise<SessionStatus> {
  const res = await fetch(`${c.api.url}/status`, { headers: { authorization: `Bearer ${c.api.token}` } });
  return SessionStatus.parse(await res.json());
}

async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  for (let i = 0; ; i++) {
    const v = await read();
    if (ok(v)) return v;
    if (i > 600) throw new Error(`gave up waiting for ${what}: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const exists = (p: string): Promise<boolean> => stat(p).then(() => true, () => false);

async function hostNode(): Promise<HostNode> {
  const node = await createHostNode({
    session: { embeddedRendezvous: { host: '127.0.0.1', port: 0 }, listenHost: '127.0.0.1', autoApprove: true },
    control: { port: 0 },
  });
  cleanups.push(() => node.close());
  return node;
}

describe('ringOptionsFor', () => {
  it('gives the ring the request\'s fast weight layout over the app\'s options, and leaves them as they are otherwise', () => {
    const app = { threads: 2, settleMs: 100 };
    expect(ringOptionsFor({ weight_layout: 'fast' }, app)).toEqual({ threads: 2, settleMs: 100, weightLayout: 'fast' });
    expect(ringOptionsFor({ weight_layout: 'exact' }, app)).toBe(app);
    expect(ringOptionsFor({}, undefined)).toEqual({});
  });

  it('gives the ring the request\'s draft model, drafting with k adapted to what pays unless the app chose a mode', () => {
    const app = { threads: 2 };
    expect(ringOptionsFor({ draft_model: '/m/draft.gguf' }, app)).toEqual({ threads: 2, draftModel: '/m/draft.gguf', speculative: { kind: 'auto' } });
    expect(ringOptionsFor({ draft_model: '/m/draft.gguf' }, { speculative: { kind: 'off' } })).toEqual({ draftModel: '/m/draft.gguf', speculative: { kind: 'auto' } });
    expect(ringOptionsFor({ draft_model: '/m/draft.gguf', weight_layout: 'fast' }, { speculative: { kind: 'fixed', k: 3 } })).toEqual({ draftModel: '/m/draft.gguf', speculative: { kind: 'fixed', k: 3 }, weightLayout: 'fast' });
  });

  it('gives the ring the request\'s standby disk (the host form\'s, as kiwi host --standby-gb), none for 0', () => {
    const app = { threads: 2 };
    expect(ringOptionsFor({ standby_gb: 2.5 }, app)).toEqual({ threads: 2, standbyBytes: 2.5e9 });
    expect(ringOptionsFor({ standby_gb: 0 }, app)).toBe(app);
  });
});

describe('createHostNode and createMemberNode', () => {
  it('a host without a model is a session alone on its control API, and its token file goes with it', async () => {
    const seen: string[] = [];
    const node = await createHostNode({
      session: { embeddedRendezvous: { host: '127.0.0.1', port: 0 }, listenHost: '127.0.0.1' },
      onSession: (s) => seen.push(s.code),
      control: { port: 0 },
    });
    expect(seen).toEqual([node.session.code]);
    expect(node.ring).toBeUndefined();
    const control = node.control as ControlEndpoint;
    expect((await stat(control.tokenFile)).mode & 0o777).toBe(0o600);
    const s = await status(control);
    expect(s).toMatchObject({ role: 'host', code: node.session.code, model: null, serving: null });
    await node.close();
    expect(await exists(control.tokenFile)).toBe(false);
  });

  it('refuses a model file that does not exist before a session is opened', async () => {
    const seen: string[] = [];
    const err = await createHostNode({ model: { path: join(runtimeDir, 'missing.gguf') }, onSession: (s) => seen.push(s.code) }).catch((e: unknown) => e);
    expect(isKiwiError(err, 'FILE_NOT_FOUND')).toBe(true);
    expect(seen).toEqual([]);
  });

  it('refuses a draft model file that does not exist before a session is opened, as the app asks for it', async () => {
    const seen: string[] = [];
    const ring = ringOptionsFor({ draft_model: join(runtimeDir, 'missing-draft.gguf') });
    const err = await createHostNode({ model: { path: await testModelPath('stories260K.gguf'), ring }, onSession: (s) => seen.push(s.code) }).catch((e: unknown) => e);
    expect(isKiwiError(err, 'FILE_NOT_FOUND')).toBe(true);
    expect((err as Error).message).toMatch(/missing-draft\.gguf does not exist\. The draft model must be/);
    expect(seen).toEqual([]);
  });

  it('a member node joins the host, shows itself on its own control API, and leaving is seen by the host', async () => {
    const host = await hostNode();
    const weights = await mkdtemp(join(tmpdir(), 'kiwi-member-node-'));
    cleanups.push(() => rm(weights, { recursive: true, force: true }));
    const member = await createMemberNode({
      code: host.session.code,
      rendezvousUrl: host.session.rendezvousUrl,
      name: 'ada',
      identity: generateIdentity(),
      capabilities: { bench: false },
      session: { listenHost: '127.0.0.1', heartbeatMs: 200 },
      ring: { weightsDir: weights, shardCache: false },
      control: true,
    });
    cleanups.push(async () => member.closeControl());
    await member.connect();
    const hostControl = host.control as ControlEndpoint;
    await until('the host to see ada', () => status(hostControl), (s) => s.members.some((m) => m.name === 'ada' && m.state === 'active'));
    const mine = await until('the member to be active', () => status(member.control as ControlEndpoint), (s) => s.phase === 'active');
    expect(mine).toMatchObject({ role: 'member', code: host.session.code, rendezvous: host.session.rendezvousUrl, assignment: null });
    expect(member.status().links).toEqual(member.member.linkStatuses());

    const tokenFile = (member.control as ControlEndpoint).tokenFile;
    await member.closeControl();
    expect(await exists(tokenFile)).toBe(false);
    await member.leave();
    await until('the host to see ada leave', () => status(hostControl), (s) => s.members.every((m) => m.name !== 'ada' || m.state === 'left'));
  });
});
