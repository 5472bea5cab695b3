// How a member measures its NAT: against the two STUN ports of the rendezvous it joined through
// (the rendezvous URL's host and port). Nothing is measured when the rendezvous runs no STUN
// service or its URL names no host. The host measures itself the same way against an external
// rendezvous; with its embedded one there is no NAT between them (hostNatCapabilities).
import { isKiwiError } from '../errors.js';
import { probeNatMapping, type NatMapping } from '../rendezvous/stun-nat.js';

/** The STUN server of a rendezvous URL: its host (without IPv6 brackets) and port (80/443 by default). */
export function stunTarget(rendezvousUrl: string): { host: string; port: number } | undefined {
  let url: URL;
  try {
    url = new URL(rendezvousUrl);
  } catch {
    return undefined;
  }
  const port = Number(url.port || (url.protocol === 'wss:' ? 443 : 80));
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port };
}

/** The member's NAT as the rendezvous's STUN service sees it; undefined when it cannot be measured. */
export async function probeRendezvousNat(rendezvousUrl: string): Promise<NatMapping | undefined> {
  const target = stunTarget(rendezvousUrl);
  if (target === undefined) return undefined;
  try {
    return await probeNatMapping(target);
  } catch (err) {
    if (!isKiwiError(err)) throw err;
    return undefined;
  }
}

/**
 * What a probe adds to the capabilities the planner reads (planner/nat-capabilities.ts): `nat`
 * (the planner's 'permissive' / 'restrictive'), `nat_mapping`, `rendezvous_rtt_ms` (the STUN round
 * trip, which prices a relayed edge) and `nat_none` (the rendezvous saw this machine's own address;
 * with no NAT nothing filters either: `nat_filtering` lenient, as the NAT lab's public host shows,
 * whose punches with a symmetric NAT succeed). Undefined when the mapping is unknown (the
 * rendezvous named no second port).
 */
export function natCapabilities(probe: NatMapping): Record<string, unknown> | undefined {
  if (probe.natClass === undefined) return undefined;
  return {
    nat: probe.natClass, nat_mapping: probe.mapping, rendezvous_rtt_ms: Math.round(probe.rttMs * 1000) / 1000,
    ...(probe.local ? { nat_none: true, nat_filtering: 'lenient' } : {}),
  };
}

/**
 * A host with its embedded rendezvous: nothing between the two, so no NAT (`none`), mapping
 * and filtering trivially open; the planner treats it as it always treated the host (easy, dialable).
 */
export function embeddedRendezvousNat(): Record<string, unknown> {
  return { nat: 'permissive', nat_mapping: 'endpoint-independent', nat_filtering: 'lenient', nat_none: true };
}

/** The host's own NAT as capabilities: none with its embedded rendezvous, else probed against the external one's STUN service. */
export async function hostNatCapabilities(rendezvousUrl: string, embedded: boolean): Promise<Record<string, unknown> | undefined> {
  if (embedded) return embeddedRendezvousNat();
  const probe = await probeRendezvousNat(rendezvousUrl);
  return probe === undefined ? undefined : natCapabilities(probe);
}
