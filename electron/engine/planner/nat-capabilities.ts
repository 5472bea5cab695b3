// What a member's capabilities (as it reported them to the host, session/member.ts reportNat) and
// its advertised addresses tell the planner about its reachability (pure): the NAT class, the
// measured mapping, the filtering the host inferred from punches, its round trip to the
// rendezvous, whether it takes direct links at all. Values that do not parse are left out.
import type { DeviceSpec } from './fleet.js';

type NatFields = Pick<DeviceSpec, 'nat' | 'natMapping' | 'natFiltering' | 'behindNat' | 'takesIce' | 'takesDirect' | 'rendezvousRttMs'>;

/** Rendezvous RTTs above this are not believed (a stalled probe, a hostile value). */
const MAX_RENDEZVOUS_RTT_MS = 60_000;

export function natFromCapabilities(capabilities: Readonly<Record<string, unknown>> | undefined, addresses?: readonly string[]): NatFields {
  const c = capabilities ?? {};
  const out: NatFields = {};
  if (c.nat === 'permissive' || c.nat === 'restrictive') out.nat = c.nat;
  if (c.nat_mapping === 'endpoint-independent' || c.nat_mapping === 'address-dependent') out.natMapping = c.nat_mapping;
  if (c.nat_filtering === 'lenient' || c.nat_filtering === 'port-dependent') out.natFiltering = c.nat_filtering;
  if (c.nat_none === true) out.behindNat = false;
  if (c.ice === false) out.takesIce = false;
  const rtt = c.rendezvous_rtt_ms;
  if (typeof rtt === 'number' && Number.isFinite(rtt) && rtt >= 0 && rtt <= MAX_RENDEZVOUS_RTT_MS) out.rendezvousRttMs = rtt;
  // A member with no listener advertises nothing and takes only relayed links (nor ICE: its
  // LinkManager turns ICE off without a listener).
  if (addresses !== undefined && addresses.length === 0) out.takesDirect = false;
  return out;
}
