import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { DeviceSpec, NatClass, PairRtt } from './fleet.js';
import { compareRingKeys, orderRing, ringEdge, ringEdges, ringKey, rttLookup } from './ring-order.js';
import { permutations } from './test-support/brute-force.js';

function devices(nats: Array<NatClass | undefined>, rtts: Array<number | undefined> = []): DeviceSpec[] {
  return nats.map((nat, i) => {
    const d: DeviceSpec = { name: `d${i}`, memoryBytes: 1 };
    if (nat !== undefined) d.nat = nat;
    const r = rtts[i];
    if (r !== undefined) d.rendezvousRttMs = r;
    return d;
  });
}

const natArb = fc.constantFrom<NatClass | undefined>('permissive', 'restrictive', undefined);

describe('ring edges', () => {
  it('prices a measured pair as direct at its RTT, whatever the NAT classes predict', () => {
    const ds = devices(['restrictive', 'restrictive'], [10, 20]);
    const rtt = rttLookup(ds, [{ a: 'd0', b: 'd1', rttMs: 3 }]);
    expect(ringEdge(ds, rtt, 0, 1)).toEqual({ from: 0, to: 1, kind: 'direct', latencyMs: 3 });
  });

  it('relays between two restrictive NATs at the sum of their rendezvous RTTs', () => {
    const ds = devices(['restrictive', 'restrictive'], [10, 25]);
    expect(ringEdge(ds, rttLookup(ds, []), 1, 0)).toEqual({ from: 1, to: 0, kind: 'relayed', latencyMs: 35 });
  });

  it('predicts any other pair direct, priced at the lower bound |rA − rB|', () => {
    const ds = devices(['permissive', 'restrictive'], [10, 25]);
    expect(ringEdge(ds, rttLookup(ds, []), 0, 1)).toEqual({ from: 0, to: 1, kind: 'direct', latencyMs: 15 });
  });

  it('leaves the latency unknown when the RTTs were not measured', () => {
    const ds = devices(['restrictive', 'restrictive']);
    expect(ringEdge(ds, rttLookup(ds, []), 0, 1)).toEqual({ from: 0, to: 1, kind: 'relayed', latencyMs: null });
  });
});

describe('ring order', () => {
  it('keeps the anchor first and visits every device once', () => {
    const ring = orderRing(devices(['restrictive', 'permissive', 'restrictive', 'permissive', undefined]), []);
    expect(ring.order[0]).toBe(0);
    expect([...ring.order].sort()).toEqual([0, 1, 2, 3, 4]);
    expect(ring.edges).toHaveLength(5);
  });

  it('has no edges for a single device and two for a pair (there and back)', () => {
    expect(orderRing(devices(['permissive']), []).edges).toEqual([]);
    expect(orderRing(devices(['permissive', 'restrictive']), []).edges.map((e) => [e.from, e.to])).toEqual([
      [0, 1],
      [1, 0],
    ]);
  });

  it('alternates NAT classes so the ring is all direct exactly when permissive members are at least as many', () => {
    fc.assert(
      fc.property(fc.array(natArb, { minLength: 2, maxLength: 12 }), (nats) => {
        const restrictive = nats.filter((n) => n === 'restrictive').length;
        const permissive = nats.length - restrictive;
        const ring = orderRing(devices(nats), []);
        const relayed = ring.edges.filter((e) => e.kind === 'relayed').length;
        // Without RTTs the relayed count decides; the fewest possible is max(0, R − P).
        expect(relayed).toBe(Math.max(0, restrictive - permissive));
        expect(relayed === 0).toBe(permissive >= restrictive);
      }),
      { numRuns: 300 },
    );
  });

  it('finds the cheapest order of every small fleet, like a search over all orders', () => {
    const member = fc.record({ nat: natArb, rtt: fc.option(fc.integer({ min: 0, max: 200 }), { nil: undefined }) });
    fc.assert(
      fc.property(fc.array(member, { minLength: 3, maxLength: 6 }), fc.array(fc.tuple(fc.nat(5), fc.nat(5), fc.integer({ min: 0, max: 100 })), { maxLength: 6 }), (members, pairs) => {
        const ds = devices(
          members.map((m) => m.nat),
          members.map((m) => m.rtt),
        );
        const seen = new Set<string>();
        const rtts: PairRtt[] = [];
        for (const [a, b, rttMs] of pairs) {
          if (a >= ds.length || b >= ds.length || a === b || seen.has(`${Math.min(a, b)},${Math.max(a, b)}`)) continue;
          seen.add(`${Math.min(a, b)},${Math.max(a, b)}`);
          rtts.push({ a: `d${a}`, b: `d${b}`, rttMs });
        }
        const ring = orderRing(ds, rtts);
        const lookup = rttLookup(ds, rtts);
        const key = ringKey(ds, ring.edges);
        for (const rest of permutations(ds.map((_, i) => i).slice(1))) {
          const other = ringKey(ds, ringEdges(ds, lookup, [0, ...rest]));
          expect(compareRingKeys(key, other)).toBeLessThanOrEqual(0);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('puts members with similar rendezvous distances side by side when every edge relays', () => {
    // All restrictive: every order relays every edge at the same total; the tie-break groups the
    // two distant members together.
    const ds = devices(['restrictive', 'restrictive', 'restrictive', 'restrictive'], [10, 150, 12, 160]);
    const ring = orderRing(ds, []);
    const names = ring.order;
    const far = [names.indexOf(1), names.indexOf(3)];
    expect(Math.abs((far[0] as number) - (far[1] as number))).toBe(1);
  });

  it('orders a large session heuristically with no more relays than needed', () => {
    const nats: NatClass[] = Array.from({ length: 20 }, (_, i) => (i % 3 === 0 ? 'permissive' : 'restrictive'));
    const ring = orderRing(devices(nats), []);
    expect(ring.order).toHaveLength(20);
    expect(ring.edges.filter((e) => e.kind === 'relayed')).toHaveLength(20 - 2 * 7);
  });
});
