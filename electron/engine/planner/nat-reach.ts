// Per-pair reachability from per-member NAT measurements (Kafila §IV-B: O(m) probes, then a table
// lookup per pair): what a ring edge between two members is predicted to become, direct UDP (an
// ICE hole punch), direct TCP (a WebSocket dialed to an advertised address) or relayed by the
// rendezvous. Pure: the planner prices edges with it (ring-order.ts) and the host compares it with
// what each edge became (pipeline/edge-report.ts).
import type { DeviceSpec } from './fleet.js';

/** What a ring edge becomes: the link kinds a LinkManager tries, in its order. */
export type Reach = 'direct-udp' | 'direct-tcp' | 'relayed';

/**
 * How a NAT maps UDP (RFC 4787 §4.1, measured by rendezvous/stun-nat.ts): the same public port
 * for every destination, or one per destination (a "symmetric" NAT).
 */
export type NatMapping = 'endpoint-independent' | 'address-dependent';

/**
 * How a NAT filters inbound UDP (RFC 4787 §5), as hole punching reveals it (nat-filtering.ts):
 * `lenient` lets in any port of an address it sent to (endpoint-independent or address-dependent
 * filtering: full or restricted cone; ICE punches from both sides, so it cannot tell those two
 * apart), `port-dependent` only the exact address and port (a port-restricted cone).
 */
export type NatFiltering = 'lenient' | 'port-dependent';

/**
 * A member's NAT as the punch table sees it:
 * - easy: accepts a punch from anyone (a full or restricted cone, or the fleet file's
 *   `permissive`, or nothing known: the planner has always assumed a permissive NAT then);
 * - cone: endpoint-independent mapping, filtering not yet known;
 * - port-restricted: endpoint-independent mapping, port-dependent filtering;
 * - symmetric: address-dependent mapping;
 * - restrictive: the fleet file's `restrictive` (port-restricted or symmetric, not measured which).
 */
export type PunchClass = 'easy' | 'cone' | 'port-restricted' | 'symmetric' | 'restrictive';

export function punchClass(d: Pick<DeviceSpec, 'nat' | 'natMapping' | 'natFiltering'>): PunchClass {
  if (d.natMapping === 'address-dependent') return 'symmetric';
  if (d.natMapping === 'endpoint-independent') {
    if (d.natFiltering === 'lenient') return 'easy';
    return d.natFiltering === 'port-dependent' ? 'port-restricted' : 'cone';
  }
  return d.nat === 'restrictive' ? 'restrictive' : 'easy';
}

/**
 * Whether two members punch a UDP hole (symmetric in its arguments). A symmetric NAT's port toward
 * the peer is not the one the rendezvous saw, so the peer must accept packets from a port it never
 * sent to: only an easy (lenient) NAT does. Where a side's filtering is not known the prediction
 * is the relay (Kafila's errors, too, predicted a relay where a direct path worked).
 */
const PUNCHES: Record<PunchClass, Record<PunchClass, boolean>> = {
  easy: { easy: true, cone: true, 'port-restricted': true, symmetric: true, restrictive: true },
  cone: { easy: true, cone: true, 'port-restricted': true, symmetric: false, restrictive: false },
  'port-restricted': { easy: true, cone: true, 'port-restricted': true, symmetric: false, restrictive: false },
  symmetric: { easy: true, cone: false, 'port-restricted': false, symmetric: false, restrictive: false },
  restrictive: { easy: true, cone: false, 'port-restricted': false, symmetric: false, restrictive: false },
};

export function punches(a: PunchClass, b: PunchClass): boolean {
  return PUNCHES[a][b];
}

/**
 * Behind a NAT, so nobody outside dials in over TCP: as measured (behindNat), else whenever a NAT
 * was measured or declared restrictive.
 */
function behindNat(d: Pick<DeviceSpec, 'nat' | 'natMapping' | 'behindNat'>): boolean {
  return d.behindNat ?? (d.natMapping !== undefined || d.nat === 'restrictive');
}

/**
 * The predicted kind of the edge between a and b: direct UDP when both take ICE links and their
 * NATs punch; else direct TCP when both take direct links and neither is behind a NAT (one dials
 * the other's advertised address); else the relay. Unknown capabilities count as present, as
 * before measurements existed (a fleet file's devices on one LAN).
 */
export function predictReach(a: DeviceSpec, b: DeviceSpec): Reach {
  // A relay-only member (takesDirect false) takes no ICE links either.
  const ice = (d: DeviceSpec): boolean => d.takesIce !== false && d.takesDirect !== false;
  if (ice(a) && ice(b) && punches(punchClass(a), punchClass(b))) return 'direct-udp';
  if (a.takesDirect !== false && b.takesDirect !== false && !behindNat(a) && !behindNat(b)) return 'direct-tcp';
  return 'relayed';
}
