// A member's NAT filtering, inferred from the outcomes of ICE attempts with its ring neighbours
// (pure). Mapping is measured against the rendezvous (rendezvous/stun-nat.ts); filtering cannot be
// without a second server address, but every punch is an experiment: a symmetric peer's packets
// arrive from a port this member never sent to, so a punch with one succeeds only through a
// lenient filter. Punches between two endpoint-independent mappings succeed whatever the filters
// are, and a member behind a symmetric NAT fails or succeeds by its peer's filter: neither tells.
import type { NatFiltering, NatMapping } from './nat-reach.js';

/** One ICE attempt between this member and a peer whose NAT mapping was measured. */
export interface PunchOutcome {
  peerMapping: NatMapping | undefined;
  /** The data channel opened (the link runs over UDP). */
  succeeded: boolean;
}

/**
 * The filtering the outcomes show, or undefined while they show none. A success is proof (the
 * filter let in an unseen port); a failure is evidence only (a lost race, a loaded machine), so
 * one success outweighs any number of failures.
 */
export function inferFiltering(mapping: NatMapping | undefined, outcomes: readonly PunchOutcome[]): NatFiltering | undefined {
  if (mapping !== 'endpoint-independent') return undefined;
  const telling = outcomes.filter((o) => o.peerMapping === 'address-dependent');
  if (telling.some((o) => o.succeeded)) return 'lenient';
  return telling.length > 0 ? 'port-dependent' : undefined;
}
