import { describe, expect, it } from 'vitest';
import type { ModelSizes } from '../planner/fleet.js';
import type { MemberView, SessionStatus } from '../session/host.js';
import { AUTO_WIRE_POLICY, EXACT_WIRE_POLICY, type WirePolicy } from './link-wire.js';
import {
  assignRing, bytesMoved, hostBlocks, hostStageReady, isRingPair, peerFaultAccepted, planSessionRing, ringLoad, ringMemberIds, stageReported, type StageStatus,
} from './ring-assignment.js';
import type { RingStage } from './session-fleet.js';
import { Assign } from './ring-protocol.js';

const member = (peer: number): MemberView => ({
  memberId: `id${peer}`, name: `m${peer}`, fingerprint: 'abcd-0000', peer, state: 'active', connected: true, addresses: [], lastSeenMs: 0, capabilities: undefined,
});
const stage = (peer: number, start: number, end: number, cuts: number[] = []): RingStage => ({ peer, start, end, head: peer === 0, cuts });
type Links = SessionStatus['links'];
const link = (a: number, b: number, kind: 'direct' | 'relayed', throughputMBps?: number): Links[number] => ({ a, b, state: 'up', kind, rttMs: 2, ...(throughputMBps !== undefined ? { throughputMBps } : {}) });
const ringLinks = (peers: number[], kind: 'direct' | 'relayed' = 'direct'): Links => peers.map((p, i) => link(p, peers[(i + 1) % peers.length]!, kind, 1000));
const model = { fingerprint: 'f'.repeat(64), name: 'm.gguf', fileBytes: 1234 };

function assign(order: RingStage[], links: Links, wirePolicy: WirePolicy = EXACT_WIRE_POLICY) {
  return assignRing({ epoch: 3, order, members: order.slice(1).map((s) => member(s.peer)), links, hidden: 64, wirePolicy, hostName: 'host', model, maxPositions: 256 });
}

/** Each member's message as `id: [start,end) prev>next send/zstd receive/zstd`. */
function messages(a: ReturnType<typeof assign>): string[] {
  return a.assigns.map(({ memberId, message: m }) => `${memberId}: [${m.start},${m.end}) ${m.prev}>${m.next} ${m.encoding}${m.zstd ? '+z' : ''} in ${m.receive.tensor}${m.receive.zstd ? '+z' : ''}`);
}

describe('assignRing', () => {
  it.each<[string, RingStage[], Links, WirePolicy, string[], string]>([
    ['two members after the host\'s blocks', [stage(0, 0, 2), stage(1, 2, 5), stage(2, 5, 8)], ringLinks([0, 1, 2]), EXACT_WIRE_POLICY,
      ['id1: [2,5) 0>2 f32 in f32', 'id2: [5,8) 1>0 f32 in f32'], '1..2 f32 in f32'],
    ['three members', [stage(0, 0, 2), stage(1, 2, 4), stage(2, 4, 6), stage(3, 6, 8)], ringLinks([0, 1, 2, 3]), EXACT_WIRE_POLICY,
      ['id1: [2,4) 0>2 f32 in f32', 'id2: [4,6) 1>3 f32 in f32', 'id3: [6,8) 2>0 f32 in f32'], '1..3 f32 in f32'],
    ['head only on the host: the first member embeds token ids', [stage(0, 0, 0), stage(1, 0, 4), stage(2, 4, 8)], ringLinks([0, 1, 2]), EXACT_WIRE_POLICY,
      ['id1: [0,4) 0>2 f32 in ids', 'id2: [4,8) 1>0 f32 in f32'], '1..2 f32 in f32'],
    ['the ids into an embedding member take the host link\'s zstd', [stage(0, 0, 0), stage(1, 0, 4), stage(2, 4, 8)], ringLinks([0, 1, 2]), { activations: 'f16', zstd: 'on' },
      ['id1: [0,4) 0>2 f16+z in ids+z', 'id2: [4,8) 1>0 f16+z in f16+z'], '1..2 f16+z in f16+z'],
    ['one member with the host', [stage(0, 0, 3), stage(1, 3, 8)], [link(0, 1, 'direct', 1000)], EXACT_WIRE_POLICY,
      ['id1: [3,8) 0>0 f32 in f32'], '1..1 f32 in f32'],
    ['auto: each link gets its own wire, the next stage receives it', [stage(0, 0, 2), stage(1, 2, 5), stage(2, 5, 8)],
      [link(0, 1, 'direct', 1000), link(1, 2, 'relayed', 0.5), link(2, 0, 'direct', 1000)], AUTO_WIRE_POLICY,
      ['id1: [2,5) 0>2 int8+z in f32', 'id2: [5,8) 1>0 f32 in int8+z'], '1..2 f32 in f32'],
    ['auto: a link nobody measured is taken at its kind\'s default', [stage(0, 0, 2), stage(1, 2, 8)],
      [{ a: 0, b: 1, state: 'up', kind: 'relayed', rttMs: 30 }], AUTO_WIRE_POLICY,
      ['id1: [2,8) 0>0 int8 in int8'], '1..1 int8 in int8'],
  ])('%s', (_name, order, links, policy, expected, engine) => {
    const a = assign(order, links, policy);
    expect(messages(a)).toEqual(expected);
    const e = a.engine;
    expect(`${e.firstPeer}..${e.lastPeer} ${e.wire.encoding}${e.wire.zstd ? '+z' : ''} in ${e.receive.tensor}${e.receive.zstd ? '+z' : ''}`).toBe(engine);
  });

  it('gives every message the epoch, the model and the context, and the host\'s weight layout when it is not exact', () => {
    const order = [stage(0, 0, 2), stage(1, 2, 5), stage(2, 5, 8)];
    const a = assign(order, ringLinks([0, 1, 2]));
    expect(a.assigns[0]!.message).toMatchObject({ kind: 'assign', epoch: 3, model, maxPositions: 256 });
    expect(a.assigns.map((x) => x.message.layout)).toEqual([undefined, undefined]);
    const fast = assignRing({ epoch: 3, order, members: order.slice(1).map((s) => member(s.peer)), links: ringLinks([0, 1, 2]), hidden: 64, wirePolicy: EXACT_WIRE_POLICY, hostName: 'host', model, maxPositions: 256, layout: 'fast' });
    expect(fast.assigns.map((x) => x.message.layout)).toEqual(['fast', 'fast']);
    // What a member accepts: exact, fast or none; anything else is a protocol error.
    expect(Assign.safeParse(fast.assigns[0]!.message).success).toBe(true);
    expect(Assign.safeParse({ ...fast.assigns[0]!.message, layout: 'quick' }).success).toBe(false);
  });

  it('tells a survivor its cuts: where the plan reshaped its stage (not in a drift re-plan, not under a memory budget)', () => {
    // bob ran [5, 8) and left; the host has room for one block beside the head, so ada's [2, 5) becomes [1, 8): a segment each side.
    const sizes: ModelSizes = { name: 'm', layers: 8, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
    const ada = (capabilities: MemberView['capabilities']): MemberView => ({ ...member(1), memberId: 'ada', name: 'ada', capabilities });
    const replan = (capabilities: MemberView['capabilities'], growInPlace?: boolean) => {
      const { order, plan } = planSessionRing({
        members: [ada(capabilities)], memoryLimits: new Map(), ...(growInPlace !== undefined ? { growInPlace } : {}),
        serving: { order: [stage(0, 0, 2), stage(1, 2, 5), stage(2, 5, 8)], memberIds: ['ada', 'bob'] },
        model: sizes, context: 256, concurrency: 1, hostName: 'host', hostDevice: { memoryBytes: 250_000_000 }, links: [],
      });
      const a = assignRing({ epoch: 4, order, members: [ada(capabilities)], links: ringLinks([0, 1]), hidden: 64, wirePolicy: EXACT_WIRE_POLICY, hostName: 'host', model, maxPositions: 256 });
      return { stage: order[1]!, segments: plan.stages[1]!.segments, cuts: a.assigns[0]!.message.cuts };
    };
    const device = { fleet_device: { memory_bytes: 4_000_000_000 } };
    expect(replan(device)).toEqual({ stage: { peer: 1, start: 1, end: 8, head: false, cuts: [2, 5] }, segments: 3, cuts: [2, 5] });
    expect(replan(device, false)).toEqual({ stage: { peer: 1, start: 1, end: 8, head: false, cuts: [] }, segments: 1, cuts: undefined });
    expect(replan({ ...device, memory_budget_bytes: 4_000_000_000 })).toEqual({ stage: { peer: 1, start: 1, end: 8, head: false, cuts: [] }, segments: 1, cuts: undefined });
    // What a member accepts: cuts ascending strictly inside its range, at most a stage's segments.
    const message = assign([stage(0, 0, 2), stage(1, 2, 8)], ringLinks([0, 1])).assigns[0]!.message;
    expect(Assign.safeParse({ ...message, cuts: [4, 6] }).success).toBe(true);
    for (const cuts of [[2], [8], [6, 4], [4, 4], [3, 4, 5], ['4']]) expect(Assign.safeParse({ ...message, cuts }).success).toBe(false);
  });

  it('reshapes the host\'s stage where its range only grows (not in a drift re-plan, not under a memory budget)', () => {
    // bob ran [4, 8) and left; the host and ada hold four blocks each, so the host's [0, 2) becomes [0, 4): one segment added.
    const sizes: ModelSizes = { name: 'm', layers: 8, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
    const ada: MemberView = { ...member(1), memberId: 'ada', name: 'ada', capabilities: { fleet_device: { memory_bytes: 450_000_000 } } };
    const replan = (hostCapabilities?: Record<string, unknown>, growInPlace?: boolean) => planSessionRing({
      members: [ada], memoryLimits: new Map(), ...(growInPlace !== undefined ? { growInPlace } : {}), ...(hostCapabilities !== undefined ? { hostCapabilities } : {}),
      serving: { order: [stage(0, 0, 2), stage(1, 2, 4), stage(2, 4, 8)], memberIds: ['ada', 'bob'] },
      model: sizes, context: 256, concurrency: 1, hostName: 'host', hostDevice: { memoryBytes: 550_000_000 }, links: [],
    }).order[0]!;
    expect(replan()).toEqual({ peer: 0, start: 0, end: 4, head: true, cuts: [2] });
    expect(hostBlocks(4, [{ start: 0, end: 2 }], replan().cuts)).toEqual({ kind: 'reshape', reshape: { keep: { from: 0, to: 1 }, after: { start: 2, end: 4 } } });
    expect(replan(undefined, false)).toMatchObject({ start: 0, end: 4, cuts: [] });
    expect(replan({ memory_budget_bytes: 550_000_000 })).toMatchObject({ start: 0, end: 4, cuts: [] });
  });

  it('keeps the served ring order among equally cheap orders after a loss', () => {
    // The ring ran host, m3, m1, m2 and m2 left. Three devices make one ring either way round, and
    // m1 comes first in the session's list: the plan keeps m3 before m1 all the same.
    const sizes: ModelSizes = { name: 'm', layers: 12, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
    const device = { fleet_device: { memory_bytes: 4_000_000_000 } };
    const [m1, m3] = [member(1), member(3)].map((m) => ({ ...m, capabilities: device }));
    const { order } = planSessionRing({
      members: [m1!, m3!], memoryLimits: new Map(),
      serving: { order: [stage(0, 0, 3), stage(3, 3, 6), stage(1, 6, 9), stage(2, 9, 12)], memberIds: ['id3', 'id1', 'id2'] },
      model: sizes, context: 256, concurrency: 1, hostName: 'host', hostDevice: { memoryBytes: 4_000_000_000 }, links: [],
    });
    expect(order.map((s) => s.peer)).toEqual([0, 3, 1]);
    // Each keeps part of what it ran (swapped, m1 would run blocks before m3's).
    expect(order[1]!.start < 6 && order[1]!.end > 3).toBe(true);
    expect(order[2]!.start < 9 && order[2]!.end > 6).toBe(true);
  });

  it('lists the host loading and each member assigned, with the wire it sends', () => {
    const a = assign([stage(0, 0, 2), stage(1, 2, 5), stage(2, 5, 8)], ringLinks([0, 1, 2]));
    expect([...a.stages.values()].map((s) => `${s.peer} ${s.name} ${s.start}-${s.end} ${s.head ? 'head ' : ''}${s.state} ${s.wire?.encoding}`)).toEqual([
      '0 host 0-2 head loading f32', '1 m1 2-5 assigned f32', '2 m2 5-8 assigned f32',
    ]);
    expect([...a.memberPeers]).toEqual([['id1', 1], ['id2', 2]]);
    expect(ringMemberIds([stage(0, 0, 2), stage(2, 2, 5), stage(1, 5, 8)], [member(1), member(2)])).toEqual(['id2', 'id1']);
  });
});

describe('kept stages and loaded ones', () => {
  const r = (start: number, end: number) => ({ start, end });
  it.each<[string, number, Array<{ start: number; end: number }> | undefined, number[], ReturnType<typeof hostBlocks>['kind'], StageStatus['state'], StageStatus['source']]>([
    ['the host runs no blocks', 0, [r(0, 4)], [], 'none', 'ready', 'local'],
    ['the host keeps the blocks it runs', 4, [r(0, 2), r(2, 4)], [2], 'keep', 'kept', 'kept'],
    ['the host opens a range that shrank inside its one segment', 3, [r(0, 4)], [], 'open', 'ready', 'local'],
    ['the host drops the segment past a range that shrank to a cut', 3, [r(0, 3), r(3, 4)], [], 'reshape', 'ready', 'local'],
    ['the host reshapes its range where the plan grew it', 6, [r(0, 4)], [4], 'reshape', 'ready', 'local'],
    ['the host opens a longer range whole where the plan did not grow it', 6, [r(0, 4)], [], 'open', 'ready', 'local'],
    ['the host opens a longer range whole past the segments a stage may run', 6, [r(0, 1), r(1, 2), r(2, 4)], [1, 2, 4], 'open', 'ready', 'local'],
    ['the host opens its first range', 4, undefined, [], 'open', 'ready', 'local'],
  ])('%s', (_name, end, running, cuts, kind, state, source) => {
    expect(hostBlocks(end, running, cuts).kind).toBe(kind);
    const host: StageStatus = { peer: 0, name: 'host', start: 0, end, head: true, state: 'loading' };
    expect(hostStageReady(host, kind === 'keep', { loadMs: 5, segments: 1, openedLayers: 2 })).toMatchObject({ state, source, loadMs: 5, openedLayers: 2 });
  });

  const assigned: StageStatus = { peer: 1, name: 'm1', start: 2, end: 5, head: false, state: 'assigned' };
  it.each<[string, Parameters<typeof stageReported>[1], Partial<StageStatus>]>([
    ['a member that took its assignment loads', { kind: 'assigned', epoch: 1, start: 2, end: 5 }, { state: 'loading' }],
    ['a member whose weights are in is opening', { kind: 'opening', epoch: 1, source: 'cache', transferredBytes: 0 }, { state: 'opening', source: 'cache', transferredBytes: 0 }],
    ['a member that kept its stage is kept', { kind: 'ready', epoch: 1, source: 'kept', transferredBytes: 0, loadMs: 1 }, { state: 'kept', source: 'kept', transferredBytes: 0 }],
    ['a member that received weights is ready', { kind: 'ready', epoch: 1, source: 'host', transferredBytes: 900, loadMs: 40 }, { state: 'ready', source: 'host', transferredBytes: 900, loadMs: 40 }],
    ['a member that could not load failed', { kind: 'failed', epoch: 1, code: 'X', message: 'disk full' }, { state: 'failed' }],
  ])('%s', (_name, report, expected) => {
    expect(stageReported(assigned, report)).toMatchObject(expected);
    expect(assigned.state).toBe('assigned');
  });

  it('is ready once every stage is ready or kept, takes steps once every stage is at least opening, and counts only the bytes that moved', () => {
    const s = (peer: number, state: StageStatus['state'], source?: StageStatus['source'], transferredBytes?: number): [number, StageStatus] =>
      [peer, { peer, name: `m${peer}`, start: 0, end: 1, head: false, state, ...(source ? { source } : {}), ...(transferredBytes !== undefined ? { transferredBytes } : {}) }];
    const ready = new Map([s(0, 'kept', 'kept'), s(1, 'ready', 'host', 100), s(2, 'ready', 'url', 20), s(3, 'kept', 'kept', 7), s(4, 'ready', 'cache', 50)]);
    expect(ringLoad(ready)).toEqual({ failed: undefined, ready: true, accepting: true });
    expect(bytesMoved(ready)).toBe(120);
    expect(ringLoad(new Map([s(0, 'ready', 'local'), s(1, 'loading')]))).toEqual({ failed: undefined, ready: false, accepting: false });
    // A member whose weights are in takes steps while its sessions open; the bytes it received count.
    const opening = new Map([s(0, 'ready', 'local'), s(1, 'opening', 'host', 30), s(2, 'kept', 'kept')]);
    expect(ringLoad(opening)).toEqual({ failed: undefined, ready: false, accepting: true });
    expect(bytesMoved(opening)).toBe(30);
    expect(ringLoad(new Map([s(0, 'ready', 'local'), s(1, 'failed')])).failed?.peer).toBe(1);
  });
});

describe('ring neighbours', () => {
  const order = [stage(0, 0, 2), stage(1, 2, 5), stage(2, 5, 8)];
  it.each<[string, number, number, boolean]>([
    ['host to the first member', 0, 1, true],
    ['either direction', 2, 1, true],
    ['the last member back to the host', 2, 0, true],
    ['a peer outside the ring', 1, 3, false],
  ])('%s', (_name, a, b, expected) => {
    expect(isRingPair(order, a, b)).toBe(expected);
  });

  const ring = { epoch: 4, order: [stage(0, 0, 2), stage(1, 2, 4), stage(2, 4, 6), stage(3, 6, 8)] };
  it.each<[string, number | undefined, { epoch: number; peer: number; fault: 'malformed' | 'numeric' }, boolean]>([
    ['a member reports its previous stage', 2, { epoch: 4, peer: 1, fault: 'malformed' }, true],
    ['a member may not report a stage that does not feed it', 3, { epoch: 4, peer: 1, fault: 'malformed' }, false],
    ['a report about an earlier ring is stale', 2, { epoch: 3, peer: 1, fault: 'malformed' }, false],
    ['nobody reports the host', 1, { epoch: 4, peer: 0, fault: 'malformed' }, false],
    ['a member reports NaN it produced itself', 2, { epoch: 4, peer: 2, fault: 'numeric' }, true],
    ['but not malformed data of its own', 2, { epoch: 4, peer: 2, fault: 'malformed' }, false],
    ['a peer not in the ring reports nothing', undefined, { epoch: 4, peer: 1, fault: 'malformed' }, false],
  ])('%s', (_name, reporter, report, expected) => {
    expect(peerFaultAccepted(ring, reporter, report)).toBe(expected);
  });
});
