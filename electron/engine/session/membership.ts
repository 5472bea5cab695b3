// Session membership as a pure reducer: apply(event, state) returns the next state and the
// changes it made, with time passed in on every event (`at`, ms), so tests drive a fake clock and
// the host's loop only feeds events. Soft eviction takes a silent member out of the ring while it
// may still come back; hard eviction forgets its place (K.I.W.I. defaults: 15 s and 120 s).
// A member keeps its identity (memberId) across reconnects: once approved, it rejoins without
// asking again. Names are not unique and anybody with the code can pick one, so a decision names
// its member by id or fingerprint; a bare name only when it is unambiguous (resolveMember).
import { KiwiError } from '../errors.js';
import { normalizeFingerprint } from './identity.js';
import { sanitizeName } from './member-name.js';

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
  /** identity.ts fingerprint of its key and its latest connection's PAKE transcript (`xxxx-xxxx`). */
  readonly fingerprint: string;
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
  | { type: 'join-requested'; memberId: string; name: string; fingerprint: string; peer: number; addresses: readonly string[]; at: number }
  | { type: 'approved'; memberId: string; at: number }
  | { type: 'rejected'; memberId: string; at: number }
  | { type: 'capabilities-reported'; memberId: string; capabilities: Capabilities; at: number }
  | { type: 'heartbeat'; memberId: string; at: number }
  | { type: 'disconnected'; memberId: string; at: number }
  | { type: 'left'; memberId: string; at: number }
  | { type: 'tick'; at: number };

export type MembershipChange =
  | { type: 'member-pending'; memberId: string; name: string; fingerprint: string }
  | { type: 'member-joined'; memberId: string; name: string; fingerprint: string; rejoined: boolean }
  | { type: 'member-rejected'; memberId: string; name: string; fingerprint: string }
  | { type: 'member-recovered'; memberId: string; name: string; fingerprint: string }
  | { type: 'member-left'; memberId: string; name: string; fingerprint: string; reason: 'left' | 'soft-evicted' | 'hard-evicted' };

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
        changes.push({ type: 'member-left', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint, reason: 'soft-evicted' });
        put({ ...m, state: 'soft-evicted' });
      }
      const now = members.get(m.memberId) as MemberRecord;
      if ((now.state === 'soft-evicted' || now.state === 'pending') && silentMs >= cfg.hardEvictMs) {
        if (now.state === 'soft-evicted') changes.push({ type: 'member-left', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint, reason: 'hard-evicted' });
        put({ ...now, state: 'evicted', connected: false });
      }
    }
    return { state: { config: cfg, members }, changes };
  }

  const m = state.members.get(event.memberId);
  switch (event.type) {
    case 'join-requested': {
      const base = { memberId: event.memberId, name: event.name, fingerprint: event.fingerprint, peer: event.peer, addresses: [...event.addresses], connected: true, lastSeenMs: event.at };
      if (m === undefined) {
        const approved = cfg.autoApprove;
        put({ ...base, state: approved ? 'active' : 'pending', approved, capabilities: undefined, joinedAtMs: event.at });
        changes.push(approved ? { type: 'member-joined', memberId: event.memberId, name: event.name, fingerprint: event.fingerprint, rejoined: false } : { type: 'member-pending', memberId: event.memberId, name: event.name, fingerprint: event.fingerprint });
      } else if (m.state === 'rejected') {
        changes.push({ type: 'member-rejected', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint });
      } else if (m.approved) {
        put({ ...m, ...base, state: 'active' });
        changes.push({ type: 'member-joined', memberId: m.memberId, name: event.name, fingerprint: event.fingerprint, rejoined: true });
      } else {
        put({ ...m, ...base, state: 'pending' });
      }
      break;
    }
    case 'approved':
      if (m?.state === 'pending') {
        put({ ...m, state: 'active', approved: true, lastSeenMs: event.at });
        changes.push({ type: 'member-joined', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint, rejoined: false });
      }
      break;
    case 'rejected':
      if (m?.state === 'pending') {
        put({ ...m, state: 'rejected', connected: false });
        changes.push({ type: 'member-rejected', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint });
      }
      break;
    case 'heartbeat':
    case 'capabilities-reported': {
      if (m === undefined || !(m.state === 'active' || m.state === 'soft-evicted' || m.state === 'pending')) break;
      const capabilities = event.type === 'capabilities-reported' ? event.capabilities : m.capabilities;
      if (m.state === 'soft-evicted') {
        put({ ...m, state: 'active', connected: true, lastSeenMs: event.at, capabilities });
        changes.push({ type: 'member-recovered', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint });
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
        if (m.state !== 'pending') changes.push({ type: 'member-left', memberId: m.memberId, name: m.name, fingerprint: m.fingerprint, reason: 'left' });
      }
      break;
  }
  return { state: { config: cfg, members }, changes };
}

/** Members that take part in the ring now. */
export function activeMembers(state: MembershipState): MemberRecord[] {
  return [...state.members.values()].filter((m) => m.state === 'active');
}

const STILL_HERE: readonly MemberState[] = ['pending', 'active', 'soft-evicted'];

/**
 * The member a host's decision names: its id, its fingerprint (any case, hyphen optional) or its
 * name. A name decides only when no other member present has it; otherwise MEMBER_AMBIGUOUS lists
 * the fingerprints to choose from, since an impostor may take any name.
 */
export function resolveMember(state: MembershipState, who: string, among: readonly MemberState[] = ['pending']): MemberRecord {
  const text = who.trim();
  const candidates = [...state.members.values()].filter((m) => among.includes(m.state));
  const byId = candidates.find((m) => m.memberId === text);
  if (byId !== undefined) return byId;
  const fp = normalizeFingerprint(text);
  const byFp = fp === undefined ? [] : candidates.filter((m) => m.fingerprint === fp);
  if (byFp.length === 1) return byFp[0] as MemberRecord;
  const name = sanitizeName(text);
  const named = candidates.filter((m) => m.name === name);
  const sameName = [...state.members.values()].filter((m) => m.name === name && (STILL_HERE.includes(m.state) || among.includes(m.state)));
  const describe = (ms: readonly MemberRecord[]): string => ms.map((m) => `${m.name} ${m.fingerprint} (${m.state}, id ${m.memberId})`).join('; ');
  if (named.length === 1 && sameName.length === 1) return named[0] as MemberRecord;
  if (named.length >= 1 || byFp.length > 1) {
    const listed = byFp.length > 1 ? byFp : sameName;
    throw new KiwiError('MEMBER_AMBIGUOUS', `More than one member is called '${name}': ${describe(listed)}. Compare the fingerprint with the one on your friend's screen and type 'approve FINGERPRINT'.`);
  }
  const waiting = candidates.length > 0 ? ` Waiting: ${describe(candidates)}.` : ' Nobody is waiting.';
  throw new KiwiError('MEMBER_NOT_FOUND', `No ${among.join(' or ')} member is called or has the fingerprint or id '${name}'.${waiting}`);
}
