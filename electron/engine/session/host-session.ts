// HostSession: the host's side of a session once its nameplate is open, as wiring around its parts:
// the PAKE gate admits claimants that prove the code (pake-gate.ts), the control connections carry
// each member's messages (host-controls.ts), hellos prove the member's identity key over the
// connection's PAKE transcript (host-hello.ts), the membership state changes only through the pure
// reducer (membership.ts), and ring neighbours get fresh link keys for each new pair (ring-links.ts).
// Approved members get a resume secret to rejoin with even after the code stopped working.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { KiwiError } from '../errors.js';
import { HOST_PEER } from '../rendezvous/protocol.js';
import type { Rendezvous } from '../rendezvous/server.js';
import type { IceSignal } from '../transport/ice-signal.js';
import type { SecureLink } from '../transport/secure-link.js';
import { ControlConnections, type ControlConnection } from './host-controls.js';
import { checkHello } from './host-hello.js';
import type { IceOption } from './ice-options.js';
import type { LinkManager, RingLinkStatus } from './link-manager.js';
import { reportedStatus } from './link-reports.js';
import { memberView, rosterOf, type MemberView } from './member-views.js';
import { activeMembers, apply, initialMembership, resolveMember, type MemberRecord, type MemberState, type MembershipChange, type MembershipEvent, type MembershipState } from './membership.js';
import { embeddedRendezvousNat, hostNatCapabilities } from './nat-report.js';
import { PakeGate } from './pake-gate.js';
import type { RendezvousClient } from './rendezvous-client.js';
import { ringPeers, RingLinkTable, type RingLinkView } from './ring-links.js';
import { fromB64, toB64, type MemberToHost } from './session-messages.js';
import { DEFAULT_MAX_PAKE_FAILURES } from './session-params.js';
import { passwordScalar } from './spake2.js';

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
  /** ICE ring links (ice-options.ts); on by default whenever direct links are (listenHost set). */
  ice?: IceOption;
  now?: () => number;
}

export interface SessionStatus {
  code: string;
  nameplate: number;
  rendezvousUrl: string;
  members: MemberView[];
  /** Ring order: the host (peer 0) first, then the members of the planned ring (before a plan: every active member in join order). */
  ring: number[];
  links: RingLinkView[];
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

export class HostSession extends EventEmitter<HostEvents> {
  private membership: MembershipState;
  private readonly gate: PakeGate;
  private readonly controls: ControlConnections;
  private readonly ringLinks = new RingLinkTable();
  /** The planned ring's members in order, once planned; undefined: every active member. */
  private ringOrder: string[] | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private closing = false;
  /** Per approved member: the secret it rejoins with (kept in memory; a new host run forgets them). */
  private readonly resumeSecrets = new Map<string, Uint8Array>();
  /** Stops the LAN beacon, when one runs. */
  stopBeacon: (() => Promise<void>) | undefined;
  /**
   * The host's own NAT toward its rendezvous, as members report theirs (nat-report.ts): none with
   * the embedded rendezvous, probed against an external one's STUN service; undefined until then
   * or when it cannot be measured. The planner prices the host's edges by it.
   */
  natCapabilities: Readonly<Record<string, unknown>> | undefined;
  /** Settles once natCapabilities is measured (at once with the embedded rendezvous). */
  readonly natMeasured: Promise<void>;
  private readonly now: () => number;

  /** Use createHost. */
  constructor(
    readonly code: string,
    readonly nameplate: number,
    readonly rendezvousUrl: string,
    private readonly client: RendezvousClient,
    private readonly links: LinkManager,
    private readonly addresses: string[],
    private readonly embedded: Rendezvous | undefined,
    opts: HostOptions,
    password: string,
  ) {
    super();
    this.now = opts.now ?? Date.now;
    this.membership = initialMembership({
      autoApprove: opts.autoApprove ?? false,
      ...(opts.softEvictMs !== undefined ? { softEvictMs: opts.softEvictMs } : {}),
      ...(opts.hardEvictMs !== undefined ? { hardEvictMs: opts.hardEvictMs } : {}),
    });
    this.controls = new ControlConnections(client, nameplate, {
      message: (conn, msg) => this.onControl(conn, msg),
      warning: (err) => this.emit('warning', err),
      disconnected: (memberId) => {
        this.dispatch({ type: 'disconnected', memberId, at: this.now() });
        this.sendRoster();
        this.emit('disconnected', memberId);
      },
    });
    this.gate = new PakeGate({
      nameplate, w: passwordScalar(password, String(nameplate)),
      timeoutMs: opts.pakeTimeoutMs ?? 30_000, maxFailures: opts.maxPakeFailures ?? DEFAULT_MAX_PAKE_FAILURES,
    }, {
      reply: (peer, body) => client.send(peer, body),
      admit: (peer, result, memberId) => {
        client.admit(peer);
        void this.controls.open(peer, result, memberId);
      },
      reject: (peer) => {
        if (!client.closed) client.reject(peer);
      },
      failed: (peer, reason) => this.emit('pake-failed', peer, reason),
      locked: (err) => this.emit('pake-locked', err),
      resumeSecret: (memberId) => this.resumeSecrets.get(memberId),
    });
    client.on('peer-joined', (peer, rejoin) => this.gate.claimed(peer, rejoin));
    client.on('peer-left', (peer) => {
      this.gate.left(peer);
      this.controls.get(peer)?.link.close('peer left the rendezvous');
    });
    client.on('from', (peer, body) => {
      if (!this.gate.receive(peer, body)) this.emit('warning', new KiwiError('PAKE_UNEXPECTED', `Peer ${peer} sent a key exchange message outside a key exchange.`));
    });
    client.on('nameplate-closed', (reason) => this.emit('nameplate-closed', reason));
    client.on('server-error', (err) => this.emit('warning', err));
    client.on('close', (reason) => void this.close(`rendezvous connection lost: ${reason}`));
    links.on('status', (s) => this.onLinkStatus(HOST_PEER, s));
    if (embedded !== undefined) this.natCapabilities = embeddedRendezvousNat();
    this.natMeasured = embedded !== undefined ? Promise.resolve() : hostNatCapabilities(rendezvousUrl, false).then((caps) => {
      this.natCapabilities = caps;
    });
    const c = this.membership.config;
    this.tickTimer = setInterval(() => this.dispatch({ type: 'tick', at: this.now() }), Math.max(20, Math.min(1000, c.softEvictMs / 5)));
  }

  /**
   * The member that `who` names (id, fingerprint, or a name no other member has); MEMBER_AMBIGUOUS
   * lists the fingerprints when a name is shared, MEMBER_NOT_FOUND who is waiting.
   */
  findMember(who: string, among: readonly MemberState[] = ['pending']): MemberView {
    return memberView(resolveMember(this.membership, who, among));
  }

  /** Approves or rejects a pending member (when not auto-approving). */
  decide(memberId: string, approve: boolean): void {
    this.dispatch(approve ? { type: 'approved', memberId, at: this.now() } : { type: 'rejected', memberId, at: this.now() });
  }

  /** Sends a pipeline message to a connected member; false when it is not connected now. */
  sendPipeline(memberId: string, body: Record<string, unknown>): boolean {
    const conn = this.controls.ofMember(memberId);
    if (conn !== undefined) this.controls.send(conn, { type: 'pipeline', body });
    return conn !== undefined;
  }

  /** Sends binary pipeline data (weights) to a connected member; false when it is not connected now. */
  sendPipelineBytes(memberId: string, bytes: Uint8Array): boolean {
    const conn = this.controls.ofMember(memberId);
    if (conn !== undefined) this.controls.sendBytes(conn, bytes);
    return conn !== undefined;
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
    this.ringLinks.forgetDown();
    this.updateRing();
  }

  status(): SessionStatus {
    return {
      code: this.code,
      nameplate: this.nameplate,
      rendezvousUrl: this.rendezvousUrl,
      members: [...this.membership.members.values()].map(memberView),
      ring: this.ring(),
      links: this.ringLinks.views(),
    };
  }

  async close(reason = 'host closed the session'): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.tickTimer);
    this.gate.close();
    this.controls.closeAll(reason);
    await this.stopBeacon?.();
    await this.links.close();
    this.client.close();
    await this.embedded?.close();
    this.emit('closed', reason);
  }

  /** The host's own ring links send their ICE signals to the member at the other end. */
  sendIceSignal(peer: number, linkId: Uint8Array, signal: IceSignal): void {
    const conn = this.controls.get(peer);
    if (conn !== undefined) this.controls.send(conn, { type: 'ice', peer: HOST_PEER, linkId: toB64(linkId), signal });
  }

  private onControl(conn: ControlConnection, msg: MemberToHost): void {
    const at = this.now();
    if (msg.type === 'hello') return this.onHello(conn, msg, at);
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
      case 'link-down':
        return this.onLinkStatus(conn.peer, reportedStatus(msg));
      case 'ice':
        return this.onIce(conn.peer, msg.peer, msg.linkId, msg.signal);
      case 'pipeline':
        this.emit('pipeline', memberId, msg.body);
        return;
    }
  }

  private onHello(conn: ControlConnection, msg: Extract<MemberToHost, { type: 'hello' }>, at: number): void {
    if (conn.memberId !== undefined) throw new KiwiError('CONTROL_UNEXPECTED', 'A member said hello twice.');
    const fp = checkHello(msg, { nameplate: this.nameplate, peer: conn.peer, transcriptHash: conn.transcriptHash, expectedMemberId: conn.expectedMemberId });
    // One live connection per identity: a reconnecting member replaces its old one.
    this.controls.claim(conn, msg.memberId);
    this.dispatch({ type: 'join-requested', memberId: msg.memberId, name: msg.name, fingerprint: fp, peer: conn.peer, addresses: msg.addresses, at });
    if (msg.capabilities !== undefined) this.dispatch({ type: 'capabilities-reported', memberId: msg.memberId, capabilities: msg.capabilities, at });
    const m = this.membership.members.get(msg.memberId);
    if (m?.state === 'rejected') {
      this.controls.send(conn, { type: 'rejected', reason: 'the host did not admit this member' });
      conn.link.close('rejected');
      return;
    }
    const active = m?.state === 'active';
    this.controls.send(conn, { type: 'welcome', state: active ? 'active' : 'pending', ...(active ? { resume: toB64(this.resumeSecret(msg.memberId)) } : {}) });
    this.updateRing();
    this.sendRoster();
  }

  private dispatch(event: MembershipEvent): void {
    const { state, changes } = apply(event, this.membership);
    this.membership = state;
    for (const change of changes) {
      const m = this.membership.members.get(change.memberId);
      const conn = m !== undefined ? this.controls.get(m.peer) : undefined;
      if (conn !== undefined && conn.memberId === change.memberId) {
        if (change.type === 'member-joined' && !change.rejoined && event.type === 'approved') this.controls.send(conn, { type: 'approved', resume: toB64(this.resumeSecret(change.memberId)) });
        if (change.type === 'member-left' && change.reason === 'hard-evicted') {
          // Silent but still connected (a stalled network): tell it, so it rejoins rather than
          // heartbeating into a session that has forgotten it.
          this.controls.send(conn, { type: 'evicted', reason: 'no heartbeat for too long' });
          conn.link.close('evicted');
        }
        if (change.type === 'member-rejected') {
          this.controls.send(conn, { type: 'rejected', reason: 'the host did not admit this member' });
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
    const members = rosterOf(this.membership.members.values(), this.ring());
    for (const conn of this.controls.greeted()) this.controls.send(conn, { type: 'roster', members });
  }

  private ring(): number[] {
    return ringPeers(activeMembers(this.membership), this.ringOrder);
  }

  /** Gives every new pair of ring neighbours a fresh link key; the earlier peer of the pair dials. */
  private updateRing(): void {
    if (this.closing) return;
    const { added, removed } = this.ringLinks.update(this.ring());
    for (const [a, b] of added) {
      const linkId = randomBytes(16);
      const secret = randomBytes(32);
      this.assignLink(a, b, linkId, secret, 'initiator');
      this.assignLink(b, a, linkId, secret, 'responder');
    }
    for (const [a, b] of removed) if (a === HOST_PEER) this.links.remove(b);
  }

  private assignLink(self: number, other: number, linkId: Uint8Array, secret: Uint8Array, role: 'initiator' | 'responder'): void {
    const addresses = other === HOST_PEER ? this.addresses : [...(this.memberByPeer(other)?.addresses ?? [])];
    if (self === HOST_PEER) {
      this.links.assign({ peer: other, linkId, secret, role, addresses });
      return;
    }
    const conn = this.controls.get(self);
    if (conn !== undefined) this.controls.send(conn, { type: 'link', peer: other, linkId: toB64(linkId), secret: toB64(secret), role, addresses });
  }

  private memberByPeer(peer: number): MemberRecord | undefined {
    for (const m of this.membership.members.values()) if (m.peer === peer && m.state === 'active') return m;
    return undefined;
  }

  /** An ICE signal from member `from` for its ring neighbour `to`: the host's own, or forwarded between ring neighbours only. */
  private onIce(from: number, to: number, linkId: string, signal: IceSignal): void {
    if (!this.ringLinks.isPair(from, to)) return;
    if (to === HOST_PEER) {
      this.links.signal(from, fromB64(linkId), signal);
      return;
    }
    const conn = this.controls.get(to);
    if (conn !== undefined && conn.memberId !== undefined) this.controls.send(conn, { type: 'ice', peer: from, linkId, signal });
  }

  private onLinkStatus(reporter: number, s: RingLinkStatus): void {
    const news = this.ringLinks.report(reporter, s);
    if (news !== undefined) this.emit('link', news);
  }
}
