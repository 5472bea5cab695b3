import { describe, expect, it } from 'vitest';
import type { DeviceSpec } from './fleet.js';
import { predictReach, punchClass, punches, type PunchClass, type Reach } from './nat-reach.js';
import { orderRing } from './ring-order.js';

type Nat = Pick<DeviceSpec, 'nat' | 'natMapping' | 'natFiltering' | 'behindNat' | 'takesIce' | 'takesDirect'>;
const dev = (nat: Nat, rendezvousRttMs?: number, name = 'd'): DeviceSpec => ({ name, memoryBytes: 1, ...nat, ...(rendezvousRttMs !== undefined ? { rendezvousRttMs } : {}) });

const FULL_CONE: Nat = { natMapping: 'endpoint-independent', natFiltering: 'lenient' };
const CONE: Nat = { natMapping: 'endpoint-independent' };
const PORT_RESTRICTED: Nat = { natMapping: 'endpoint-independent', natFiltering: 'port-dependent' };
const SYMMETRIC: Nat = { natMapping: 'address-dependent' };

describe('NAT punch classes', () => {
  it.each<[string, Nat, PunchClass]>([
    ['nothing known (as the planner always assumed)', {}, 'easy'],
    ["the fleet file's permissive", { nat: 'permissive' }, 'easy'],
    ["the fleet file's restrictive", { nat: 'restrictive' }, 'restrictive'],
    ['a measured cone with lenient filtering', FULL_CONE, 'easy'],
    ['a measured cone whose filtering is not known yet', CONE, 'cone'],
    ['a measured port-restricted cone', PORT_RESTRICTED, 'port-restricted'],
    ['a measured symmetric NAT, whatever the fleet class says', { ...SYMMETRIC, nat: 'permissive' }, 'symmetric'],
  ])('classes %s', (_what, nat, expected) => {
    expect(punchClass(nat)).toBe(expected);
  });

  it('is a symmetric table: a punch between a and b is a punch between b and a', () => {
    const all: PunchClass[] = ['easy', 'cone', 'port-restricted', 'symmetric', 'restrictive'];
    for (const a of all) for (const b of all) expect(punches(a, b)).toBe(punches(b, a));
  });
});

describe('pair reachability (one table lookup per pair)', () => {
  it.each<[string, Nat, Nat, Reach]>([
    ['two cones punch whatever their filters', CONE, PORT_RESTRICTED, 'direct-udp'],
    ['two port-restricted cones punch', PORT_RESTRICTED, PORT_RESTRICTED, 'direct-udp'],
    ['a lenient cone takes a symmetric peer', FULL_CONE, SYMMETRIC, 'direct-udp'],
    ['a port-restricted cone does not take a symmetric peer', PORT_RESTRICTED, SYMMETRIC, 'relayed'],
    ['a cone of unknown filtering with a symmetric peer predicts the relay', CONE, SYMMETRIC, 'relayed'],
    ['two symmetric NATs relay', SYMMETRIC, SYMMETRIC, 'relayed'],
    ['two restrictive fleet members relay', { nat: 'restrictive' }, { nat: 'restrictive' }, 'relayed'],
    ['a permissive and a restrictive fleet member punch', { nat: 'permissive' }, { nat: 'restrictive' }, 'direct-udp'],
    ['without ICE on one side, two members on no NAT dial TCP', { takesIce: false }, {}, 'direct-tcp'],
    ['without ICE, a member behind a NAT cannot be dialed', { ...CONE, takesIce: false }, {}, 'relayed'],
    ['without ICE, a measured cone with no NAT in front (the rendezvous saw its own address) is dialed', { ...CONE, behindNat: false }, { takesIce: false }, 'direct-tcp'],
    ['a relay-only member relays (it takes no ICE links either)', { takesDirect: false }, {}, 'relayed'],
  ])('%s', (_what, a, b, expected) => {
    expect(predictReach(dev(a), dev(b))).toBe(expected);
    expect(predictReach(dev(b), dev(a))).toBe(expected);
  });
});

describe('ring order from measured NAT classes and rendezvous RTTs', () => {
  it('prices a predicted relay at the sum of both rendezvous RTTs', () => {
    const ring = orderRing([dev(SYMMETRIC, 10, 'a'), dev(SYMMETRIC, 25, 'b')], []);
    expect(ring.edges.map((e) => [e.kind, e.latencyMs])).toEqual([['relayed', 35], ['relayed', 35]]);
  });

  it('seats symmetric members between lenient cones, never two side by side', () => {
    // Three lenient cones (the host one of them), two symmetric NATs: the all-direct rings put
    // a lenient cone on both sides of each symmetric member.
    const ds = [dev(FULL_CONE, 5, 'host'), dev(SYMMETRIC, 20, 's1'), dev(SYMMETRIC, 30, 's2'), dev(FULL_CONE, 22, 'c1'), dev(FULL_CONE, 28, 'c2')];
    const ring = orderRing(ds, []);
    expect(ring.edges.filter((e) => e.kind === 'relayed')).toEqual([]);
    for (const e of ring.edges) expect([e.from, e.to].filter((i) => i === 1 || i === 2).length).toBeLessThan(2);
  });

  it('relays one edge when the cone beside a symmetric member has not shown its filter yet', () => {
    const ds = [dev(CONE, 5, 'host'), dev(SYMMETRIC, 20, 's1'), dev(SYMMETRIC, 30, 's2'), dev(FULL_CONE, 22, 'c1'), dev(FULL_CONE, 28, 'c2')];
    const ring = orderRing(ds, []);
    expect(ring.edges.filter((e) => e.kind === 'relayed').map((e) => e.latencyMs)).toEqual([25]);
  });

  it('relays where it must through the members closest to the rendezvous', () => {
    // Three symmetric NATs and one lenient cone: two edges must relay; the order puts the relays
    // between the members with the smallest rendezvous RTTs (each relay costs rA + rB).
    const ds = [dev(FULL_CONE, 5, 'host'), dev(SYMMETRIC, 10, 'near1'), dev(SYMMETRIC, 11, 'near2'), dev(SYMMETRIC, 200, 'far')];
    const ring = orderRing(ds, []);
    const relayed = ring.edges.filter((e) => e.kind === 'relayed').map((e) => [e.from, e.to].sort().join('-'));
    expect(relayed).toHaveLength(2);
    expect(relayed).toContain('1-2');
  });
});

describe('the four NAT kinds of the netns suite (transport/ice-nat.netns.process.test.ts)', () => {
  // What each kind measures as: all cones map endpoint-independently; punches show the filter.
  const KINDS = ['full-cone', 'address-restricted', 'port-restricted', 'symmetric'] as const;
  const measured: Record<(typeof KINDS)[number], Nat> = { 'full-cone': CONE, 'address-restricted': CONE, 'port-restricted': CONE, symmetric: SYMMETRIC };
  const learned: Record<(typeof KINDS)[number], Nat> = { 'full-cone': FULL_CONE, 'address-restricted': FULL_CONE, 'port-restricted': PORT_RESTRICTED, symmetric: SYMMETRIC };
  // What the routers allow (the suite's expectation): only a symmetric NAT against a symmetric or port-restricted one relays.
  const allows = (a: string, b: string): Reach =>
    (a === 'symmetric' && (b === 'symmetric' || b === 'port-restricted')) || (b === 'symmetric' && a === 'port-restricted') ? 'relayed' : 'direct-udp';
  const pairs = KINDS.flatMap((a, i) => KINDS.slice(i).map((b) => [a, b] as const));

  it('before any punch, errs only by predicting a relay where a direct path works (2 of 10 pairs)', () => {
    const wrong = pairs.filter(([a, b]) => predictReach(dev(measured[a]), dev(measured[b])) !== allows(a, b));
    expect(wrong).toEqual([['full-cone', 'symmetric'], ['address-restricted', 'symmetric']]);
    for (const [a, b] of wrong) expect(predictReach(dev(measured[a]), dev(measured[b]))).toBe('relayed');
  });

  it('once punches showed each cone its filter, predicts every pair', () => {
    for (const [a, b] of pairs) expect([a, b, predictReach(dev(learned[a]), dev(learned[b]))]).toEqual([a, b, allows(a, b)]);
  });
});
