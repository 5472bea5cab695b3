// What the host shows of its members: the view in its status (and the control API), and the
// roster every connected member gets. Pure functions of the membership state.
import type { MemberRecord } from './membership.js';
import type { RosterEntry } from './session-messages.js';

/** The roster holds at most this many members (the message's limit): the latest ones. */
const MAX_ROSTER = 1024;

export interface MemberView {
  memberId: string;
  name: string;
  /** `xxxx-xxxx`, also on the member's screen: what the host approves by. */
  fingerprint: string;
  peer: number;
  state: MemberRecord['state'];
  connected: boolean;
  addresses: readonly string[];
  lastSeenMs: number;
  capabilities: MemberRecord['capabilities'];
}

export function memberView(m: MemberRecord): MemberView {
  return {
    memberId: m.memberId, name: m.name, fingerprint: m.fingerprint, peer: m.peer, state: m.state, connected: m.connected,
    addresses: m.addresses, lastSeenMs: m.lastSeenMs, capabilities: m.capabilities,
  };
}

/** Who is in the session, for its members: nobody the host refused; inRing: an active member of the ring's peers. */
export function rosterOf(members: Iterable<MemberRecord>, ringPeers: readonly number[]): RosterEntry[] {
  const ring = new Set(ringPeers);
  return [...members]
    .filter((m) => m.state !== 'rejected')
    .slice(-MAX_ROSTER)
    .map((m) => ({ peer: m.peer, name: m.name, state: m.state, connected: m.connected, inRing: ring.has(m.peer) && m.state === 'active' }));
}
