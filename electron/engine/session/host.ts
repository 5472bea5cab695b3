// The host's side of a session (composition root for it): opens a nameplate on a rendezvous
// (its own embedded one unless given a URL), runs SPAKE2 with each claimant, admits the ones that
// prove the code, keeps the membership state through the pure reducer, and hands ring neighbours
// their link keys. Wrong codes are reported to the rendezvous, which stops the source after too
// many; the host keeps its own count too (maxPakeFailures), since a rendezvous run by somebody else
// could otherwise search the code space through it. Every hello proves the member's identity key
// (identity.ts) over this connection's PAKE transcript, so a memberId cannot be taken over, and
// approved members get a resume secret to rejoin with even after the code stopped working.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { isKiwiError, KiwiError } from '../errors.js';
import { HOST_PEER, RelayChannel } from '../rendezvous/protocol.js';
import { startRendezvous, type Rendezvous } from '../rendezvous/server.js';
import { wsUrls } from '../transport/addresses.js';
import type { IceSignal } from '../transport/ice-signal.js';
import { rendezvousStun } from '../transport/ice-servers.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';
import { fingerprint, verifyHello } from './identity.js';
import { startBeacon } from './lan-beacon.js';
import { LinkManager, type RingLinkStatus } from './link-manager.js';
import { activeMembers, apply, initialMembership, resolveMember, type MemberRecord, type MemberState, type MembershipChange, type MembershipEvent, type MembershipState } from './membership.js';
import { RendezvousClient } from './rendezvous-client.js';
import { codePassword, formatSessionCode, generateSessionCode } from './session-code.js';
import { BINARY_CONTROL, decodeControl, encodeControl, fromB64, MemberToHost, PakeBody, parseBody, toB64, type HostToMember, type RosterEntry } from './session-messages.js';
import { passwordScalar, secretScalar, spake2Start, type Spake2Pending, type Spake2Result } from './spake2.js';

export const PAKE_ID_MEMBER = new TextEncoder().encode('kiwi member');
/** How the host closes a member's older connection when the same identity connects again. */
export const REPLACED_REASON = 'replaced by a new connection';
export const PAKE_ID_HOST = new TextEncoder().encode('kiwi host');
export const pakeAad = (nameplate: number): Uint8Array => new TextEncoder().encode(`kiwi/1 nameplate ${nameplate}`);
/** A rejoin's PAKE: bound to the member it resumes. */
export const rejoinAad = (nameplate: number, memberId: string): Uint8Array => new TextEncoder().encode(`kiwi/1 nameplate ${nameplate} rejoin ${memberId}`);
export const rejoinScalar = (secret: Uint8Array, nameplate: number, memberId: string): bigint => secretScalar(secret, `resume|${nameplate}|${memberId}`);
/** Wrong codes the host answers per session before it stops answering key exchanges with the code. */
export const DEFAULT_MAX_PAKE_FAILURES = 20;
export const controlContext = (nameplate: number, peer: number): string => `control|${nameplate}|${peer}`;

export interface HostOptions {
  /** A shared rendezvous; without it the host runs one in-process. */
  rendezvousUrl?: string;
  /** Where the embedded rendezvous listens. */
  embeddedRendezvous?: { host: string; port: number };
  autoApprove?: boolean;
  softEvictMs?: number;
  hardEvictMs?: number;
  /** Interface for the host's direct listener; undefined: relay only. */
  listenHost?: string;
  /**
   * Announce the embedded rendezvous on the LAN (lan-beacon.ts). On by default when the embedded
   * rendezvous listens beyond loopback; `false` turns it off; tests pass loopback targets.
   */
  lanBeacon?: false | { port?: number; targets?: string[]; intervalMs?: number };
  /** How long a claimant has to finish the PAKE. */
  pakeTimeoutMs?: number;
  /**
   * Key exchanges with the code that the host answered and that did not prove it, after which it
   * answers no more for this session (each answer lets the claimant test one guess of the words).
   */
  maxPakeFailures?: number;
  /**
   * ICE (WebRTC data channel) ring links, tried before WebSocket and relay; on by default (with
   * host candidates only) whenever direct links are (listenHost set); `false` turns them off
   * (`--no-ice`). iceServers: 'stun:host:port',
   * 'turn:user:pass@host:port'.
   */
  ice?: false | { iceServers?: readonly string[]; timeoutMs?: number };
  now?: () => number;
}

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

export interface SessionStatus {
  code: string;
  nameplate: number;
  rendezvousUrl: string;
  members: MemberView[];
  /** Ring order: the host (peer 0) first, then the members of the planned ring (before a plan: every active member in join order). */
  ring: number[];
  links: Array<{ a: number; b: number; state: RingLinkStatus['state']; kind: RingLinkStatus['kind']; transport?: RingLinkStatus['transport']; rttMs: number | undefined; throughputMBps?: number }>;
}

export interface HostEvents {
  change: [change: MembershipChange];
  'pake-failed': [peer: number, reason: string];
  /** Too many wrong codes: the host takes no more members with this code (approved ones still rejoin). */
  'pake-locked': [error: KiwiError];
  'nameplate-closed': [reason: string];
  link: [status: { a: number; b: number } & RingLinkStatus];
  /** A member's control connection closed (it may reconnect; silence decides eviction). */
  disconnected: [memberId: string];
  /** A pipeline message from a member (engine/pipeline validates the body). */
  pipeline: [memberId: string, body: Record<string, unknown>];
  /** An error that did not stop the session (a misbehaving member, a broken link). */
  warning: [error: KiwiError];
  closed: [reason: string];
}

interface Attempt {
  peer: number;
  /** Claimed as a returning member: only a 'rejoin' exchange is accepted. */
  rejoin: boolean;
  /** The member a rejoin resumes. */
  memberId: string | undefined;
  pending: Spake2Pending | undefined;
  result: Spake2Result | undefined;
  /** The host answered with a code-derived message: the claimant could test one guess. */
  answered: boolean;
  timer: NodeJS.Timeout;
}

interface Connected {
  peer: number;
  link: SecureLink;
  memberId: string | undefined;
  /** The PAKE transcript of this connection, which the hello signs. */
  transcriptHash: Uint8Array;
  /** Set for a rejoin: the only identity this connection may say hello as. */
  expectedMemberId: string | undefined;
}

export class HostSession extends EventEmitter<HostEvents> {
  private membership: MembershipState;
  private readonly attempts = new Map<number, Attempt>();
  private readonly controls = new Map<number, Connected>();
  private readonly ringLinks = new Map<string, { a: number; b: number } & RingLinkStatus>();
  private ringPairs = new Set<string>();
  /** The planned ring's members in order, once planned; undefined: every active member. */
  private ringOrder: string[] | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private closing = false;
  private pakeFailures = 0;
  private pakeLocked = false;
  /** Per approved member: the secret it rejoins with (kept in memory; a new host run forgets them). */
  private readonly resumeSecrets = new Map<string, Uint8Array>();
  /** Stops the LAN beacon, when one runs. */
  stopBeacon: (() => Promise<void>) | undefined;
  private readonly now: () => number;
  private readonly w: bigint;

  /** Use createHost. */
  constructor(
    readonly code: string,
    readonly nameplate: number,
    readonly rendezvousUrl: string,
    private readonly client: RendezvousClient,
    private readonly links: LinkManager,
    private readonly addresses: string[],
    private readonly embedded: Rendezvous | undefined,
    private readonly opts: HostOptions,
    password: string,
  ) {
    super();
    this.now = opts.now ?? Date.now;
    this.membership = initialMembership({
      autoApprove: opts.autoApprove ?? false,
      ...(opts.softEvictMs !== undefined ? { softEvictMs: opts.softEvictMs } : {}),
      ...(opts.hardEvictMs !== undefined ? { hardEvictMs: opts.hardEvictMs } : {}),
    });
    this.w = passwordScalar(password, String(nameplate));
    client.on('peer-joined', (peer, rejoin) => this.onPeerJoined(peer, rejoin));
    client.on('peer-left', (peer) => this.onPeerLeft(peer));
    client.on('from', (peer, body) => this.onBody(peer, body));
    client.on('nameplate-closed', (reason) => this.emit('nameplate-closed', reason));
    client.on('server-error', (err) => this.emit('warning', err));
    client.on('close', (reason) => void this.close(`rendezvous connection lost: ${reason}`));
    links.on('status', (s) => this.onLinkStatus(HOST_PEER, s));
    const c = this.membership.config;
    this.tickTimer = setInterval(() => this.dispatch({ type: 'tick', at: this.now() }), Math.max(20, Math.min(1000, c.softEvictMs / 5)));
  }

  /**
   * The member that `who` names (id, fingerprint, or a name no other member has); MEMBER_AMBIGUOUS
   * lists the fingerprints when a name is shared, MEMBER_NOT_FOUND who is waiting.
   */
  findMember(who: string, among: readonly MemberState[] = ['pending']): MemberView {
    const m = resolveMember(this.membership, who, among);
    return this.view(m);
  }

  /** Approves or rejects a pending member (when not auto-approving). */
  decide(memberId: string, approve: boolean): void {
    this.dispatch(approve ? { type: 'approved', memberId, at: this.now() } : { type: 'rejected', memberId, at: this.now() });
  }

  /** Sends a pipeline message to a connected member; false when it is not connected now. */
  sendPipeline(memberId: string, body: Record<string, unknown>): boolean {
    for (const conn of this.controls.values()) {
      if (conn.memberId === memberId && !conn.link.closed) {
        this.sendControl(conn, { type: 'pipeline', body });
        return true;
      }
    }
    return false;
  }

  /** Sends binary pipeline data (weights) to a connected member; false when it is not connected now. */
  sendPipelineBytes(memberId: string, bytes: Uint8Array): boolean {
    for (const conn of this.controls.values()) {
      if (conn.memberId === memberId && !conn.link.closed) {
        const msg = new Uint8Array(1 + bytes.length);
        msg[0] = BINARY_CONTROL;
        msg.set(bytes, 1);
        conn.link.send(msg);
        return true;
      }
    }
    return false;
  }

  /** The host's secure ring link to a neighbour, once up. */
  ringLink(peer: number): SecureLink | undefined {
    return this.links.link(peer);
  }

  /**
   * Sets the ring the planner chose: exactly these members after the host, in this order (members
   * not listed stay in the session but out of the ring). Ring neighbours that changed get fresh link
   * keys, and so do kept pairs whose link is down.
   */
  setRingOrder(memberIds: readonly string[]): void {
    this.ringOrder = [...memberIds];
    for (const [key, l] of this.ringLinks) {
      if (l.state !== 'closed' && l.state !== 'failed') continue;
      this.ringPairs.delete(key);
      this.ringLinks.delete(key);
    }
    this.updateRing();
  }

  status(): SessionStatus {
    return {
      code: this.code,
      nameplate: this.nameplate,
      rendezvousUrl: this.rendezvousUrl,
      members: [...this.membership.members.values()].map((m) => this.view(m)),
      ring: this.ring(),
      links: [...this.ringLinks.values()].map((l) => ({
        a: l.a, b: l.b, state: l.state, kind: l.kind, ...(l.transport !== undefined ? { transport: l.transport } : {}), rttMs: l.rttMs,
        ...(l.throughputMBps !== undefined ? { throughputMBps: l.throughputMBps } : {}),
      })),
    };
  }

  private view(m: MemberRecord): MemberView {
    return {
      memberId: m.memberId, name: m.name, fingerprint: m.fingerprint, peer: m.peer, state: m.state, connected: m.connected,
      addresses: m.addresses, lastSeenMs: m.lastSeenMs, capabilities: m.capabilities,
    };
  }

  async close(reason = 'host closed the session'): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.tickTimer);
    for (const a of this.attempts.values()) clearTimeout(a.timer);
    for (const c of this.controls.values()) c.link.close(reason);
    await this.stopBeacon?.();
    await this.links.close();
    this.client.close();
    await this.embedded?.close();
    this.emit('closed', reason);
  }

  private onPeerJoined(peer: number, rejoin: boolean): void {
    const timer = setTimeout(() => this.failAttempt(peer, 'the key exchange did not finish in time'), this.opts.pakeTimeoutMs ?? 30_000);
    this.attempts.set(peer, { peer, rejoin, memberId: undefined, pending: undefined, result: undefined, answered: false, timer });
  }

  private onPeerLeft(peer: number): void {
    const attempt = this.attempts.get(peer);
    if (attempt !== undefined) {
      clearTimeout(attempt.timer);
      this.attempts.delete(peer);
      // One that never sent a key exchange message guessed nothing (the rendezvous does not count it either).
      if (attempt.pending !== undefined) this.emit('pake-failed', peer, 'left before finishing the key exchange (probably a wrong code)');
      if (attempt.answered) this.countPakeFailure();
    }
    this.controls.get(peer)?.link.close('peer left the rendezvous');
  }

  private onBody(peer: number, raw: Record<string, unknown>): void {
    const attempt = this.attempts.get(peer);
    if (attempt === undefined) {
      this.emit('warning', new KiwiError('PAKE_UNEXPECTED', `Peer ${peer} sent a key exchange message outside a key exchange.`));
      return;
    }
    try {
      const body = parseBody(PakeBody, raw);
      if (body.kind === 'pake' && attempt.pending === undefined && !attempt.rejoin) {
        if (this.pakeLocked) throw new KiwiError('PAKE_LOCKED', 'The host takes no more members with this code (too many wrong codes); ask the host for a new one.');
        attempt.pending = spake2Start({ role: 'B', w: this.w, idA: PAKE_ID_MEMBER, idB: PAKE_ID_HOST, aad: pakeAad(this.nameplate) });
        attempt.result = attempt.pending.finish(fromB64(body.msg));
        attempt.answered = true;
        this.client.send(peer, { kind: 'pake-reply', msg: toB64(attempt.pending.message), confirm: toB64(attempt.result.confirmation) });
      } else if (body.kind === 'rejoin' && attempt.pending === undefined && attempt.rejoin) {
        const secret = this.resumeSecrets.get(body.memberId);
        if (secret === undefined) throw new KiwiError('PAKE_CONFIRMATION_FAILED', `Member ${body.memberId} has no place to resume; it must join with the code.`);
        attempt.memberId = body.memberId;
        attempt.pending = spake2Start({ role: 'B', w: rejoinScalar(secret, this.nameplate, body.memberId), idA: PAKE_ID_MEMBER, idB: PAKE_ID_HOST, aad: rejoinAad(this.nameplate, body.memberId) });
        attempt.result = attempt.pending.finish(fromB64(body.msg));
        this.client.send(peer, { kind: 'pake-reply', msg: toB64(attempt.pending.message), confirm: toB64(attempt.result.confirmation) });
      } else if (body.kind === 'confirm' && attempt.result !== undefined) {
        attempt.result.verifyPeerConfirmation(fromB64(body.confirm));
        clearTimeout(attempt.timer);
        this.attempts.delete(peer);
        this.client.admit(peer);
        void this.openControl(peer, attempt.result, attempt.memberId);
      } else {
        throw new KiwiError('PAKE_UNEXPECTED', `Peer ${peer} sent '${body.kind}' out of order.`);
      }
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.failAttempt(peer, err.message);
    }
  }

  private failAttempt(peer: number, reason: string): void {
    const attempt = this.attempts.get(peer);
    if (attempt === undefined) return;
    clearTimeout(attempt.timer);
    this.attempts.delete(peer);
    if (!this.client.closed) this.client.reject(peer);
    this.emit('pake-failed', peer, reason);
    if (attempt.answered) this.countPakeFailure();
  }

  /** One more guess at the code was answered and failed; past the limit, the code stops working. */
  private countPakeFailure(): void {
    this.pakeFailures++;
    const max = this.opts.maxPakeFailures ?? DEFAULT_MAX_PAKE_FAILURES;
    if (this.pakeLocked || this.pakeFailures < max) return;
    this.pakeLocked = true;
    // Claimants already waiting get no answer either.
    for (const a of [...this.attempts.values()]) if (!a.rejoin && a.pending === undefined) this.failAttempt(a.peer, 'the host takes no more key exchanges with this code');
    this.emit('pake-locked', new KiwiError('PAKE_LOCKED',
      `${this.pakeFailures} attempts with a wrong code: this session takes no more new members with its code (members already approved still rejoin). If friends still need to join, start a new session for a new code.`));
  }

  private async openControl(peer: number, pake: Spake2Result, expectedMemberId: string | undefined): Promise<void> {
    let link: SecureLink;
    try {
      link = await openSecureLink(this.client.relayLink(peer, RelayChannel.CONTROL), {
        role: 'responder', secret: { secret: pake.sessionKey, context: controlContext(this.nameplate, peer) }, timeoutMs: 10_000,
      });
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.emit('warning', err);
      return;
    }
    const conn: Connected = { peer, link, memberId: undefined, transcriptHash: pake.transcriptHash, expectedMemberId };
    this.controls.set(peer, conn);
    link.onMessage((bytes) => {
      try {
        this.onControl(conn, decodeControl(MemberToHost, bytes));
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        this.emit('warning', err);
        link.close(err.code);
      }
    });
    link.onClose(() => {
      if (this.controls.get(peer) === conn) this.controls.delete(peer);
      // A member that already reconnected on another connection is not disconnected.
      const id = conn.memberId;
      if (id !== undefined && ![...this.controls.values()].some((c) => c.memberId === id)) {
        this.dispatch({ type: 'disconnected', memberId: id, at: this.now() });
        this.sendRoster();
        this.emit('disconnected', id);
      }
    });
  }

  private onControl(conn: Connected, msg: MemberToHost): void {
    const at = this.now();
    if (msg.type === 'hello') {
      if (conn.memberId !== undefined) throw new KiwiError('CONTROL_UNEXPECTED', 'A member said hello twice.');
      const publicKey = fromB64(msg.publicKey);
      // The key must own the memberId and have signed this connection's transcript: without the
      // member's secret key nobody can say hello as it (nor push it out below).
      verifyHello({ memberId: msg.memberId, publicKey, signature: fromB64(msg.signature), nameplate: this.nameplate, peer: conn.peer, transcriptHash: conn.transcriptHash });
      if (conn.expectedMemberId !== undefined && conn.expectedMemberId !== msg.memberId) {
        throw new KiwiError('IDENTITY_INVALID', `A rejoin resumed member ${conn.expectedMemberId} but said hello as ${msg.memberId}.`);
      }
      // One live connection per identity: a reconnecting member replaces its old one.
      for (const other of this.controls.values()) if (other !== conn && other.memberId === msg.memberId) other.link.close(REPLACED_REASON);
      conn.memberId = msg.memberId;
      const fp = fingerprint(publicKey, conn.transcriptHash);
      this.dispatch({ type: 'join-requested', memberId: msg.memberId, name: msg.name, fingerprint: fp, peer: conn.peer, addresses: msg.addresses, at });
      if (msg.capabilities !== undefined) this.dispatch({ type: 'capabilities-reported', memberId: msg.memberId, capabilities: msg.capabilities, at });
      const m = this.membership.members.get(msg.memberId);
      if (m?.state === 'rejected') {
        this.sendControl(conn, { type: 'rejected', reason: 'the host did not admit this member' });
        conn.link.close('rejected');
        return;
      }
      const active = m?.state === 'active';
      this.sendControl(conn, { type: 'welcome', state: active ? 'active' : 'pending', ...(active ? { resume: toB64(this.resumeSecret(msg.memberId)) } : {}) });
      this.updateRing();
      this.sendRoster();
      return;
    }
    if (conn.memberId === undefined) throw new KiwiError('CONTROL_UNEXPECTED', 'A member must say hello first.');
    const memberId = conn.memberId;
    switch (msg.type) {
      case 'heartbeat':
        return this.dispatch({ type: 'heartbeat', memberId, at });
      case 'capabilities':
        return this.dispatch({ type: 'capabilities-reported', memberId, capabilities: msg.capabilities, at });
      case 'leave':
        this.dispatch({ type: 'left', memberId, at });
        conn.link.close('left');
        return;
      case 'link-status':
        this.onLinkStatus(conn.peer, {
          peer: msg.peer, state: 'up', kind: msg.kind, rttMs: msg.rttMs,
          ...(msg.transport !== undefined ? { transport: msg.transport } : {}), ...(msg.throughputMBps !== undefined ? { throughputMBps: msg.throughputMBps } : {}),
        });
        return;
      case 'ice':
        this.onIce(conn.peer, msg.peer, msg.linkId, msg.signal);
        return;
      case 'link-down':
        this.onLinkStatus(conn.peer, { peer: msg.peer, state: msg.state, kind: undefined, rttMs: undefined, error: msg.reason });
        return;
      case 'pipeline':
        this.emit('pipeline', memberId, msg.body);
        return;
    }
  }

  private dispatch(event: MembershipEvent): void {
    const { state, changes } = apply(event, this.membership);
    this.membership = state;
    for (const change of changes) {
      const m = this.membership.members.get(change.memberId);
      const conn = m !== undefined ? this.controls.get(m.peer) : undefined;
      if (conn !== undefined && conn.memberId === change.memberId) {
        if (change.type === 'member-joined' && !change.rejoined && event.type === 'approved') this.sendControl(conn, { type: 'approved', resume: toB64(this.resumeSecret(change.memberId)) });
        if (change.type === 'member-left' && change.reason === 'hard-evicted') {
          // Silent but still connected (a stalled network): tell it, so it rejoins rather than
          // heartbeating into a session that has forgotten it.
          this.sendControl(conn, { type: 'evicted', reason: 'no heartbeat for too long' });
          conn.link.close('evicted');
        }
        if (change.type === 'member-rejected') {
          this.sendControl(conn, { type: 'rejected', reason: 'the host did not admit this member' });
          conn.link.close('rejected');
        }
      }
      // A member that left or was refused comes back only with the code (and, if refused, not at all).
      if (change.type === 'member-rejected' || (change.type === 'member-left' && change.reason === 'left')) this.resumeSecrets.delete(change.memberId);
      this.emit('change', change);
    }
    if (changes.length > 0) {
      this.updateRing();
      this.sendRoster();
    }
  }

  private resumeSecret(memberId: string): Uint8Array {
    let secret = this.resumeSecrets.get(memberId);
    if (secret === undefined) {
      secret = new Uint8Array(randomBytes(32));
      this.resumeSecrets.set(memberId, secret);
    }
    return secret;
  }

  /** Tells every connected member who is in the session. */
  private sendRoster(): void {
    const ring = new Set(this.ring());
    const members: RosterEntry[] = [...this.membership.members.values()]
      .filter((m) => m.state !== 'rejected')
      .slice(-1024)
      .map((m) => ({ peer: m.peer, name: m.name, state: m.state, connected: m.connected, inRing: ring.has(m.peer) && m.state === 'active' }));
    for (const conn of this.controls.values()) if (conn.memberId !== undefined) this.sendControl(conn, { type: 'roster', members });
  }

  private sendControl(conn: Connected, msg: HostToMember): void {
    if (!conn.link.closed) conn.link.send(encodeControl(msg));
  }

  private ring(): number[] {
    const order = this.ringOrder;
    const rank = (id: string): number => order?.indexOf(id) ?? 0;
    const members = activeMembers(this.membership)
      .filter((m) => order === undefined || order.includes(m.memberId))
      .sort((a, b) => rank(a.memberId) - rank(b.memberId) || a.joinedAtMs - b.joinedAtMs || a.memberId.localeCompare(b.memberId));
    return [HOST_PEER, ...members.map((m) => m.peer)];
  }

  /** Gives every new pair of ring neighbours a fresh link key; the earlier peer of the pair dials. */
  private updateRing(): void {
    if (this.closing) return;
    const ring = this.ring();
    const pairs = new Set<string>();
    if (ring.length >= 2) {
      for (let i = 0; i < ring.length; i++) {
        const a = ring[i] as number;
        const b = ring[(i + 1) % ring.length] as number;
        if (a !== b) pairs.add(`${Math.min(a, b)}-${Math.max(a, b)}`);
      }
    }
    for (const key of pairs) {
      if (this.ringPairs.has(key)) continue;
      const [a, b] = key.split('-').map(Number) as [number, number];
      const linkId = randomBytes(16);
      const secret = randomBytes(32);
      this.ringLinks.set(key, { a, b, peer: b, state: 'connecting', kind: undefined, rttMs: undefined });
      this.assignLink(a, b, linkId, secret, 'initiator');
      this.assignLink(b, a, linkId, secret, 'responder');
    }
    for (const key of this.ringPairs) {
      if (pairs.has(key)) continue;
      this.ringLinks.delete(key);
      const [a, b] = key.split('-').map(Number) as [number, number];
      if (a === HOST_PEER) this.links.remove(b);
    }
    this.ringPairs = pairs;
  }

  private assignLink(self: number, other: number, linkId: Uint8Array, secret: Uint8Array, role: 'initiator' | 'responder'): void {
    const addresses = other === HOST_PEER ? this.addresses : [...(this.memberByPeer(other)?.addresses ?? [])];
    if (self === HOST_PEER) {
      this.links.assign({ peer: other, linkId, secret, role, addresses });
      return;
    }
    const conn = this.controls.get(self);
    if (conn !== undefined) this.sendControl(conn, { type: 'link', peer: other, linkId: toB64(linkId), secret: toB64(secret), role, addresses });
  }

  private memberByPeer(peer: number): MemberRecord | undefined {
    for (const m of this.membership.members.values()) if (m.peer === peer && m.state === 'active') return m;
    return undefined;
  }

  /** The host's own ring links send their ICE signals to the member at the other end. */
  sendIceSignal(peer: number, linkId: Uint8Array, signal: IceSignal): void {
    const conn = this.controls.get(peer);
    if (conn !== undefined) this.sendControl(conn, { type: 'ice', peer: HOST_PEER, linkId: toB64(linkId), signal });
  }

  /** An ICE signal from member `from` for its ring neighbour `to`: the host's own, or forwarded between ring neighbours only. */
  private onIce(from: number, to: number, linkId: string, signal: IceSignal): void {
    if (!this.ringPairs.has(`${Math.min(from, to)}-${Math.max(from, to)}`)) return;
    if (to === HOST_PEER) {
      this.links.signal(from, fromB64(linkId), signal);
      return;
    }
    const conn = this.controls.get(to);
    if (conn !== undefined && conn.memberId !== undefined) this.sendControl(conn, { type: 'ice', peer: from, linkId, signal });
  }

  private onLinkStatus(reporter: number, s: RingLinkStatus): void {
    const key = `${Math.min(reporter, s.peer)}-${Math.max(reporter, s.peer)}`;
    const entry = this.ringLinks.get(key);
    if (entry === undefined) return;
    const throughputMBps = s.throughputMBps ?? entry.throughputMBps;
    const transport = s.transport ?? (s.state === 'up' ? entry.transport : undefined);
    const next = {
      ...entry, state: s.state, kind: s.kind ?? entry.kind, rttMs: s.rttMs ?? entry.rttMs,
      ...(transport !== undefined ? { transport } : {}), ...(throughputMBps !== undefined ? { throughputMBps } : {}),
    };
    this.ringLinks.set(key, next);
    // Both ends report a link; announce it when its state changes or its first RTT arrives.
    if (next.state !== entry.state || next.kind !== entry.kind || (entry.rttMs === undefined && next.rttMs !== undefined)) this.emit('link', next);
  }
}

export async function createHost(opts: HostOptions = {}): Promise<HostSession> {
  let embedded: Rendezvous | undefined;
  let url = opts.rendezvousUrl;
  if (url === undefined) {
    const bindHost = opts.embeddedRendezvous?.host ?? '127.0.0.1';
    embedded = await startRendezvous({ host: bindHost, port: opts.embeddedRendezvous?.port ?? 0 });
    // A wildcard bind is shown as this machine's first LAN address, which members can dial.
    url = wsUrls(bindHost, embedded.port)[0] ?? embedded.url;
  }
  let client: RendezvousClient | undefined;
  try {
    client = await RendezvousClient.connect(url);
    const { nameplate } = await client.open();
    const code = generateSessionCode(nameplate);
    let self: HostSession | undefined;
    // Relay-only (no listenHost) takes no direct links of any kind.
    const rvStun = rendezvousStun(url);
    const ice = opts.ice === false || opts.listenHost === undefined ? undefined : { iceServers: [...(rvStun !== undefined ? [rvStun] : []), ...(opts.ice?.iceServers ?? [])], ...(opts.ice?.timeoutMs !== undefined ? { timeoutMs: opts.ice.timeoutMs } : {}) };
    const links = new LinkManager({
      rendezvous: client, listenHost: opts.listenHost, nameplate, selfPeer: HOST_PEER,
      ...(ice !== undefined ? { ice } : {}),
      sendSignal: (peer, linkId, signal) => self?.sendIceSignal(peer, linkId, signal),
    });
    const addresses = await links.start();
    const host = new HostSession(formatSessionCode(code), nameplate, url, client, links, addresses, embedded, opts, codePassword(code));
    self = host;
    const bindHost = opts.embeddedRendezvous?.host ?? '127.0.0.1';
    const beyondLoopback = !bindHost.startsWith('127.') && bindHost !== '::1' && bindHost !== 'localhost';
    if (embedded !== undefined && opts.lanBeacon !== false && (opts.lanBeacon !== undefined || beyondLoopback)) {
      const b = opts.lanBeacon ?? {};
      const beacon = await startBeacon({
        beacon: { kiwi: 1, nameplate, rendezvous: wsUrls(bindHost, embedded.port).slice(0, 8) },
        ...(b.port !== undefined ? { port: b.port } : {}),
        ...(b.targets !== undefined ? { targets: b.targets } : {}),
        ...(b.intervalMs !== undefined ? { intervalMs: b.intervalMs } : {}),
      });
      host.stopBeacon = () => beacon.close();
    }
    return host;
  } catch (err) {
    client?.close();
    await embedded?.close();
    throw err;
  }
}
