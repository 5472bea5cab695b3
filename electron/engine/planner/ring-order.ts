// Ring order from reachability (Kafila §IV-B, §V-B): which neighbours talk directly, which through
// the rendezvous relay, and the order whose edges cost least. The anchor (device 0) stays first.
import type { DeviceSpec, PairRtt } from './fleet.js';
import { predictReach, punchClass } from './nat-reach.js';

export type EdgeKind = 'direct' | 'relayed';

export interface RingEdge {
  from: number;
  to: number;
  kind: EdgeKind;
  /** The edge's round-trip time in ms; null when nothing measured prices it (a LAN is assumed). */
  latencyMs: number | null;
}

export interface Ring {
  /** Device indices in ring order, the anchor first. */
  order: number[];
  /** edges[i] goes from order[i] to order[(i + 1) % m]; none for a single device. */
  edges: RingEdge[];
}

/** Orders are searched exhaustively up to this many devices ((m − 1)! orders); above, heuristically. */
export const EXHAUSTIVE_RING_DEVICES = 8;

export type RttLookup = (a: number, b: number) => number | undefined;

export function rttLookup(devices: readonly DeviceSpec[], rtts: readonly PairRtt[]): RttLookup {
  const index = new Map(devices.map((d, i) => [d.name, i]));
  const table = new Map<number, number>();
  const m = devices.length;
  for (const { a, b, rttMs } of rtts) {
    const ia = index.get(a);
    const ib = index.get(b);
    if (ia === undefined || ib === undefined) throw new Error(`bug: rtt for unknown device ${a}/${b}`);
    table.set(ia * m + ib, rttMs);
    table.set(ib * m + ia, rttMs);
  }
  return (x, y) => table.get(x * m + y);
}

/**
 * Prices the edge a → b. A measured pair RTT means the pair reached each other directly, so it is
 * direct at that cost. Otherwise the members' NATs predict it (nat-reach.ts): a predicted relay
 * costs every token both members' round trips to the rendezvous, rA + rB; a predicted direct edge
 * (UDP or TCP) is priced at the lower bound |rA − rB| from their rendezvous RTTs. With the fleet
 * file's classes alone, exactly two restrictive NATs relay.
 */
export function ringEdge(devices: readonly DeviceSpec[], rtt: RttLookup, a: number, b: number): RingEdge {
  const measured = rtt(a, b);
  if (measured !== undefined) return { from: a, to: b, kind: 'direct', latencyMs: measured };
  const da = devices[a] as DeviceSpec;
  const db = devices[b] as DeviceSpec;
  const ra = da.rendezvousRttMs;
  const rb = db.rendezvousRttMs;
  const bothKnown = ra !== undefined && rb !== undefined;
  if (predictReach(da, db) === 'relayed') {
    return { from: a, to: b, kind: 'relayed', latencyMs: bothKnown ? ra + rb : null };
  }
  return { from: a, to: b, kind: 'direct', latencyMs: bothKnown ? Math.abs(ra - rb) : null };
}

/** What an order costs, compared lexicographically: total latency, then relayed edges, then similarity. */
export interface RingKey {
  latencyMs: number;
  relayed: number;
  /** Σ |rA − rB| over edges: places members at similar distances side by side when all relay. */
  dissimilarityMs: number;
}

export function ringEdges(devices: readonly DeviceSpec[], rtt: RttLookup, order: readonly number[]): RingEdge[] {
  if (order.length < 2) return [];
  return order.map((from, i) => ringEdge(devices, rtt, from, order[(i + 1) % order.length] as number));
}

export function ringKey(devices: readonly DeviceSpec[], edges: readonly RingEdge[]): RingKey {
  let latencyMs = 0;
  let relayed = 0;
  let dissimilarityMs = 0;
  for (const e of edges) {
    latencyMs += e.latencyMs ?? 0;
    if (e.kind === 'relayed') relayed++;
    const ra = devices[e.from]?.rendezvousRttMs;
    const rb = devices[e.to]?.rendezvousRttMs;
    if (ra !== undefined && rb !== undefined) dissimilarityMs += Math.abs(ra - rb);
  }
  return { latencyMs, relayed, dissimilarityMs };
}

/** Latencies closer than this are equal: sums of floats differ in their last bits by order. */
const EPSILON_MS = 1e-9;

export function compareRingKeys(x: RingKey, y: RingKey): number {
  if (Math.abs(x.latencyMs - y.latencyMs) > EPSILON_MS) return x.latencyMs - y.latencyMs;
  if (x.relayed !== y.relayed) return x.relayed - y.relayed;
  if (Math.abs(x.dissimilarityMs - y.dissimilarityMs) > EPSILON_MS) return x.dissimilarityMs - y.dissimilarityMs;
  return 0;
}

/** The cheapest ring over all devices, device 0 (the anchor) first. */
export function orderRing(devices: readonly DeviceSpec[], rtts: readonly PairRtt[]): Ring {
  const rtt = rttLookup(devices, rtts);
  const m = devices.length;
  const identity = devices.map((_, i) => i);
  if (m <= 2) return { order: identity, edges: ringEdges(devices, rtt, identity) };
  const order = m <= EXHAUSTIVE_RING_DEVICES ? exhaustiveOrder(devices, rtt) : heuristicOrder(devices, rtt);
  return { order, edges: ringEdges(devices, rtt, order) };
}

function exhaustiveOrder(devices: readonly DeviceSpec[], rtt: RttLookup): number[] {
  const rest = devices.map((_, i) => i).slice(1);
  let best: number[] = [0, ...rest];
  let bestKey = ringKey(devices, ringEdges(devices, rtt, best));
  // Heap's algorithm over the non-anchor devices; ties keep the first order found.
  const c = rest.map(() => 0);
  let i = 0;
  while (i < rest.length) {
    if ((c[i] as number) < i) {
      const j = i % 2 === 0 ? 0 : (c[i] as number);
      [rest[j], rest[i]] = [rest[i] as number, rest[j] as number];
      const order = [0, ...rest];
      const key = ringKey(devices, ringEdges(devices, rtt, order));
      if (compareRingKeys(key, bestKey) < 0) {
        best = order;
        bestKey = key;
      }
      c[i] = (c[i] as number) + 1;
      i = 0;
    } else {
      c[i] = 0;
      i++;
    }
  }
  return best;
}

/**
 * For large sessions: Kafila's counting construction (alternate permissive and restrictive
 * members, so no two restrictive ones meet while permissive ones are at least as many), members
 * sorted by rendezvous RTT so neighbours are close, then 2-opt moves while the key improves.
 */
function heuristicOrder(devices: readonly DeviceSpec[], rtt: RttLookup): number[] {
  const byRtt = (a: number, b: number): number =>
    (devices[a]?.rendezvousRttMs ?? 0) - (devices[b]?.rendezvousRttMs ?? 0) || a - b;
  const restrictive: number[] = [];
  const permissive: number[] = [];
  // Only an easy NAT punches with every other kind (nat-reach.ts); the rest are restrictive here.
  devices.forEach((d, i) => (punchClass(d) === 'easy' ? permissive : restrictive).push(i));
  restrictive.sort(byRtt);
  permissive.sort(byRtt);
  // Each restrictive member followed by a permissive one while they last: around the cycle this
  // leaves exactly max(0, R − P) restrictive pairs side by side, the fewest possible.
  const cycle: number[] = [];
  for (const r of restrictive) {
    cycle.push(r);
    const p = permissive.shift();
    if (p !== undefined) cycle.push(p);
  }
  cycle.push(...permissive);
  const at = cycle.indexOf(0);
  const order = [...cycle.slice(at), ...cycle.slice(0, at)];

  let key = ringKey(devices, ringEdges(devices, rtt, order));
  const m = order.length;
  for (let improved = true, rounds = 0; improved && rounds < 100; rounds++) {
    improved = false;
    for (let i = 1; i < m - 1; i++) {
      for (let j = i + 1; j < m; j++) {
        const candidate = [...order.slice(0, i), ...order.slice(i, j + 1).reverse(), ...order.slice(j + 1)];
        const candidateKey = ringKey(devices, ringEdges(devices, rtt, candidate));
        if (compareRingKeys(candidateKey, key) < 0) {
          order.splice(0, m, ...candidate);
          key = candidateKey;
          improved = true;
        }
      }
    }
  }
  return order;
}
