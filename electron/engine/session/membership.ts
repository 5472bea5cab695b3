// Session membership as a pure reducer: apply(event, state) returns the next state and the
// changes it made, with time passed in on every event (`at`, ms), so tests drive a fake clock and
// the host's loop only feeds events. Soft eviction takes a silent member out of the ring while it
// may still come back; hard eviction forgets its place (K.I.W.I. defaults: 15 s and 120 s).
// A member keeps its identity (memberId) across reconnects: once approved, it rejoins without
// asking again.

export interface MembershipConfig {
  softEvictMs: number;
  hardEvictMs: number;
  autoApprove: boolean;
}

export const DEFAULT_MEMBERSHIP_CONFIG: MembershipConfig = { softEvictMs: 15_000, hardEvictMs: 120_000, autoApprove: false };

export type MemberState = 'pending' | 'active' | 'soft-evicted' | 'evicted' | 'left' | 'rejected';

/** The device benchmark's summary, as reported by the member (validated where it enters). */
export type Capabilities = Readonly<Record<string, unknown>>;

export interface MemberRecord {
  readonly memberId: string;
  readonly name: string;
  /** The member's peer number on the rendezvous for its current connection. */
  readonly peer: number;
  readonly state: MemberState;
  readonly approved: boolean;
  readonly connected: boolean;
  readonly addresses: readonly string[];
  readonly capabilities: Capabilities | undefined;
  readonly joinedAtMs: number;
  readonly lastSeenMs: number;
}

export interface MembershipState {
  readonly config: MembershipConfig;
  readonly members: ReadonlyMap<string, MemberRecord>;
}

export type MembershipEvent =
  | { type: 'join-requested'; memberId: string; name: string; peer: number; addresses: readonly string[]; at: number }
  | { type: 'approved'; memberId: string; at: number }
  | { type: 'rejected'; memberId: string; at: number }
  | { type: 'capabilities-reported'; memberId: string; capabilities: Capabilities; at: number }
  | { type: 'heartbeat'; memberId: string; at: number }
  | { type: 'disconnected'; memberId: string; at: number }
  | { type: 'left'; memberId: string; at: number }
  | { type: 'tick'; at: number };

export type MembershipChange =
  | { type: 'member-pending'; memberId: string; name: string }
  | { type: 'member-joined'; memberId: string; name: string; rejoined: boolean }
  | { type: 'member-rejected'; memberId: string; name: string }
  | { type: 'member-recovered'; memberId: string; name: string }
  | { type: 'member-left'; memberId: string; name: string; reason: 'left' | 'soft-evicted' | 'hard-evicted' };

export interface Transition {
  state: MembershipState;
  changes: MembershipChange[];
}

export function initialMembership(config: Partial<MembershipConfig> = {}): MembershipState {
  const full = { ...DEFAULT_MEMBERSHIP_CONFIG, ...config };
  if (!(full.softEvictMs > 0 && full.hardEvictMs > full.softEvictMs)) {
    throw new Error(`eviction timeouts must satisfy 0 < soft (${full.softEvictMs}) < hard (${full.hardEvictMs})`);
  }
  return { config: full, members: new Map() };
}

export function apply(event: MembershipEvent, state: MembershipState): Transition {
  const members = new Map(state.members);
  const changes: MembershipChange[] = [];
  const put = (m: MemberRecord): void => void members.set(m.memberId, m);
  const cfg = state.config;

  if (event.type === 'tick') {
    for (const m of state.members.values()) {
      const silentMs = event.at - m.lastSeenMs;
      if (m.state === 'active' && silentMs >= cfg.softEvictMs) {
        changes.push({ type: 'member-left', memberId: m.memberId, name: m.name, reason: 'soft-evicted' });
        put({ ...m, state: 'soft-evicted' });
      }
      const now = members.get(m.memberId) as MemberRecord;
      if ((now.state === 'soft-evicted' || now.state === 'pending') && silentMs >= cfg.hardEvictMs) {
        if (now.state === 'soft-evicted') changes.push({ type: 'member-left', memberId: m.memberId, name: m.name, reason: 'hard-evicted' });
        put({ ...now, state: 'evicted', connected: false });
      }
    }
    return { state: { config: cfg, members }, changes };
  }

  const m = state.members.get(event.memberId);
  switch (event.type) {
    case 'join-requested': {
      const base = { memberId: event.memberId, name: event.name, peer: event.peer, addresses: [...event.addresses], connected: true, lastSeenMs: event.at };
      if (m === undefined) {
        const approved = cfg.autoApprove;
        put({ ...base, state: approved ? 'active' : 'pending', approved, capabilities: undefined, joinedAtMs: event.at });
        changes.push(approved ? { type: 'member-joined', memberId: event.memberId, name: event.name, rejoined: false } : { type: 'member-pending', memberId: event.memberId, name: event.name });
      } else if (m.state === 'rejected') {
        changes.push({ type: 'member-rejected', memberId: m.memberId, name: m.name });
      } else if (m.approved) {
        put({ ...m, ...base, state: 'active' });
        changes.push({ type: 'member-joined', memberId: m.memberId, name: event.name, rejoined: true });
      } else {
        put({ ...m, ...base, state: 'pending' });
      }
      break;
    }
    case 'approved':
      if (m?.state === 'pending') {
        put({ ...m, state: 'active', approved: true, lastSeenMs: event.at });
        changes.push({ type: 'member-joined', memberId: m.memberId, name: m.name, rejoined: false });
      }
      break;
    case 'rejected':
      if (m?.state === 'pending') {
        put({ ...m, state: 'rejected', connected: false });
        changes.push({ type: 'member-rejected', memberId: m.memberId, name: m.name });
      }
      break;
    case 'heartbeat':
    case 'capabilities-reported': {
      if (m === undefined || !(m.state === 'active' || m.state === 'soft-evicted' || m.state === 'pending')) break;
      const capabilities = event.type === 'capabilities-reported' ? event.capabilities : m.capabilities;
      if (m.state === 'soft-evicted') {
        put({ ...m, state: 'active', connected: true, lastSeenMs: event.at, capabilities });
        changes.push({ type: 'member-recovered', memberId: m.memberId, name: m.name });
      } else {
        put({ ...m, connected: true, lastSeenMs: event.at, capabilities });
      }
      break;
    }
    case 'disconnected':
      // A dropped socket alone evicts nobody: the member may reconnect; silence decides.
      if (m !== undefined && m.connected) put({ ...m, connected: false });
      break;
    case 'left':
      if (m !== undefined && (m.state === 'active' || m.state === 'soft-evicted' || m.state === 'pending')) {
        put({ ...m, state: 'left', connected: false });
        if (m.state !== 'pending') changes.push({ type: 'member-left', memberId: m.memberId, name: m.name, reason: 'left' });
      }
      break;
  }
  return { state: { config: cfg, members }, changes };
}

/** Members that take part in the ring now. */
export function activeMembers(state: MembershipState): MemberRecord[] {
  return [...state.members.values()].filter((m) => m.state === 'active');
}
