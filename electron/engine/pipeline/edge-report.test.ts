import { describe, expect, it } from 'vitest';
import type { ModelSizes } from '../planner/fleet.js';
import type { SessionStatus } from '../session/host-session.js';
import { edgeReport, edgeReportWire, linkReach, memberNat, withPunchFiltering } from './edge-report.js';
import { planRing, type SessionDevice } from './session-fleet.js';

const MODEL: ModelSizes = { name: 'm', layers: 8, blockBytes: 1e6, headBytes: 1e6, headResidentBytes: 1e6, kvBytesPerTokenPerLayer: 16 };
const CONE = { nat: 'permissive', nat_mapping: 'endpoint-independent', rendezvous_rtt_ms: 5 };
const SYMMETRIC = { nat: 'restrictive', nat_mapping: 'address-dependent', rendezvous_rtt_ms: 7 };

type Member = SessionStatus['members'][number];
const member = (peer: number, capabilities: Record<string, unknown> | undefined, addresses: string[] = [`ws://10.0.0.${peer}:9000`]): Member => ({
  memberId: `id${peer}`, name: `m${peer}`, fingerprint: 'xxxx-xxxx', peer, state: 'active', connected: true, addresses, lastSeenMs: 0, capabilities,
});

/** The plan the host makes of these members (the real planner, as session-host.ts calls it). */
function planOf(members: Member[]) {
  const devices: SessionDevice[] = [
    { peer: 0, name: 'host', capabilities: undefined },
    ...members.map((m) => ({ peer: m.peer, name: m.name, capabilities: m.capabilities, addresses: m.addresses })),
  ];
  return planRing({ model: MODEL, context: 16, concurrency: 1, devices, fallback: { memoryBytes: 1e9 }, links: [] });
}

describe('edge report', () => {
  it.each<[SessionStatus['links'][number], string | undefined]>([
    [{ a: 0, b: 1, state: 'up', kind: 'direct', transport: 'udp', rttMs: 1 }, 'direct-udp'],
    [{ a: 0, b: 1, state: 'up', kind: 'direct', transport: 'tcp', rttMs: 1 }, 'direct-tcp'],
    [{ a: 0, b: 1, state: 'up', kind: 'relayed', transport: 'relay', rttMs: 1 }, 'relayed'],
    [{ a: 0, b: 1, state: 'up', kind: 'relayed', rttMs: 1 }, 'relayed'],
    [{ a: 0, b: 1, state: 'connecting', kind: undefined, rttMs: undefined }, undefined],
  ])('reads what a link became: %o', (link, expected) => {
    expect(linkReach(link)).toBe(expected);
  });

  it('sets each ring edge beside the plan\'s prediction and marks where they differ', () => {
    // m1 a cone, m2 relay-only: host–m1 predicted UDP, the two edges to m2 the relay.
    const members = [member(1, CONE), member(2, undefined, [])];
    const { plan, stages } = planOf(members);
    const ring = stages.map((s) => s.peer);
    expect(ring[0]).toBe(0);
    const links: SessionStatus['links'] = [
      { a: 0, b: 1, state: 'up', kind: 'direct', transport: 'tcp', rttMs: 0.8 },
      { a: 1, b: 2, state: 'up', kind: 'relayed', transport: 'relay', rttMs: 3 },
      { a: 0, b: 2, state: 'connecting', kind: undefined, rttMs: undefined },
    ];
    const report = edgeReport({ plan, session: { members, ring, links } });
    const byPair = new Map(report.map((e) => [[e.a, e.b].sort().join('-'), e]));
    expect(report).toHaveLength(3);
    expect(byPair.get('0-1')).toEqual({ a: expect.any(Number), b: expect.any(Number), predicted: 'direct-udp', actual: 'direct-tcp', rttMs: 0.8, matched: false });
    expect(byPair.get('1-2')).toMatchObject({ predicted: 'relayed', actual: 'relayed', rttMs: 3, matched: true });
    expect(byPair.get('0-2')).toMatchObject({ predicted: 'relayed', actual: undefined, matched: undefined });
  });

  it('reports one edge for a ring of two, and none before a plan names the pair', () => {
    const members = [member(1, CONE)];
    const links: SessionStatus['links'] = [{ a: 0, b: 1, state: 'up', kind: 'direct', transport: 'udp', rttMs: 0.5 }];
    expect(edgeReport({ plan: planOf(members).plan, session: { members, ring: [0, 1], links } })).toEqual([
      { a: 0, b: 1, predicted: 'direct-udp', actual: 'direct-udp', rttMs: 0.5, matched: true },
    ]);
    expect(edgeReport({ plan: undefined, session: { members, ring: [0, 1], links } })[0]).toMatchObject({ predicted: undefined, matched: undefined });
  });
});

describe('filtering from the ring\'s punches', () => {
  const members = [member(1, CONE), member(2, SYMMETRIC), member(3, CONE)];

  it('infers each cone\'s filtering from its ICE attempt with the symmetric member', () => {
    const links: SessionStatus['links'] = [
      { a: 1, b: 2, state: 'up', kind: 'direct', transport: 'udp', rttMs: 1 },
      { a: 2, b: 3, state: 'up', kind: 'relayed', transport: 'relay', rttMs: 9 },
      { a: 0, b: 1, state: 'up', kind: 'direct', transport: 'udp', rttMs: 1 },
    ];
    expect(memberNat({ members, ring: [0, 1, 2, 3], links })).toEqual([
      { peer: 1, mapping: 'endpoint-independent', filtering: 'lenient' },
      { peer: 2, mapping: 'address-dependent', filtering: undefined },
      { peer: 3, mapping: 'endpoint-independent', filtering: 'port-dependent' },
    ]);
  });

  it('hands the planner the inferred filtering, so the next ring seats the symmetric member where punches work', () => {
    const links: SessionStatus['links'] = [
      { a: 1, b: 2, state: 'up', kind: 'direct', transport: 'udp', rttMs: 1 },
      { a: 2, b: 3, state: 'up', kind: 'relayed', transport: 'relay', rttMs: 9 },
    ];
    const session = { members, ring: [0, 1, 2, 3], links };
    expect(withPunchFiltering(members[2]!.capabilities, 3, session)).toEqual({ ...CONE, nat_filtering: 'port-dependent' });
    expect(withPunchFiltering(members[1]!.capabilities, 2, session)).toBe(members[1]!.capabilities);
    const relayed = (ms: Member[]): number => planOf(ms).plan.edges.filter((e) => e.predicted === 'relayed').length;
    // Unknown filtering: one of m2's neighbours is a cone that may not take it (predicted relay).
    expect(relayed(members)).toBe(1);
    // m1 took it: the new ring puts m2 between the host and m1, every edge direct.
    const replanned = planOf(members.map((m) => ({ ...m, capabilities: withPunchFiltering(m.capabilities, m.peer, session) })));
    expect(replanned.plan.edges.filter((e) => e.predicted === 'relayed')).toEqual([]);
    expect(replanned.plan.edges.some((e) => [e.from, e.to].sort().join() === 'm2,m3')).toBe(false);
  });
});

describe('edge report on the wire', () => {
  it('carries unknowns as null', () => {
    const members = [member(1, CONE)];
    const wire = edgeReportWire({ plan: undefined, session: { members, ring: [0, 1], links: [] } });
    expect(wire).toEqual({
      edges: [{ a: 0, b: 1, predicted: null, actual: null, rtt_ms: null, matched: null }],
      nat: [{ peer: 1, mapping: 'endpoint-independent', filtering: null }],
    });
  });
});
