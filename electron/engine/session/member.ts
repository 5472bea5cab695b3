// A member's side of a session: claims the code's nameplate and proves the code with SPAKE2
// (member-pake.ts), opens the encrypted control link to the host, says hello (identity, name, direct addresses,
// capabilities), sends heartbeats, and takes part in ring links. When the connection drops it
// reconnects and rejoins with the same identity; a wrong code is final (PAKE_CONFIRMATION_FAILED,
// reconnect-policy.ts).
// The identity is an Ed25519 key (identity.ts) whose hello signs each connection's PAKE
// transcript; once approved, a member rejoins with the resume secret the host gave it, so a code
// that stopped working (too many strangers guessing) does not lock it out.
import { EventEmitter } from 'node:events';
import { isKiwiError, KiwiError } from '../errors.js';
import { HOST_PEER, RelayChannel } from '../rendezvous/protocol.js';
import type { NatMapping } from '../rendezvous/stun-nat.js';
import { memberPortMapper, withMappedAddress, type MappedPort, type PortMapper, type PortMapperOptions } from '../transport/port-mapping.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';
import { fingerprint, generateIdentity, signHello, type MemberIdentity } from './identity.js';
import { ringIceOptions, type IceOption } from './ice-options.js';
import { LinkManager, type RingLinkStatus } from './link-manager.js';
import { linkReport } from './link-reports.js';
import { proveToHost } from './member-pake.js';
import { validateName } from './member-name.js';
import type { Capabilities } from './membership.js';
import { probeRendezvousNat } from './nat-report.js';
import { reconnectVerdict } from './reconnect-policy.js';
import { RendezvousClient } from './rendezvous-client.js';
import { codePassword, parseSessionCode } from './session-code.js';
import { BINARY_CONTROL, decodeControl, encodeControl, fromB64, HostToMember, toB64, type MemberToHost, type RosterEntry } from './session-messages.js';
import { controlContext, REPLACED_REASON } from './session-params.js';
import { passwordScalar } from './spake2.js';

export interface JoinOptions {
  code: string;
  rendezvousUrl: string;
  name: string;
  /**
   * The key this member is known by (identity.ts loadOrCreateIdentity keeps one on disk); without
   * it a fresh one lives as long as this object, so reconnects keep it but a restart does not.
   */
  identity?: MemberIdentity;
  /** When given, must be the identity's memberId (a check that the right key file was loaded). */
  memberId?: string;
  capabilities?: Capabilities;
  heartbeatMs?: number;
  /** Interface for this member's direct listener; undefined: relay only. */
  listenHost?: string;
  /** ICE ring links (ice-options.ts); on by default whenever direct links are (listenHost set); with `false` offers from neighbours are refused. */
  ice?: IceOption;
  /** Addresses to advertise instead of the listener's own URL (a port forward, a NAT mapping). */
  advertise?: string[];
  /** Map the listener's port on a UPnP-IGD / NAT-PMP router and advertise it too (transport/port-mapping.ts); default on, not with `advertise`. */
  portMapping?: boolean | PortMapperOptions;
  /** Reconnect after a dropped connection (default true), at most this often. */
  reconnect?: boolean;
  reconnectDelayMs?: number;
  /** Give up (SESSION_UNREACHABLE) after trying to reconnect this long; default 120 s, the default hard eviction. */
  reconnectForMs?: number;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface MemberEvents {
  /** Admitted by the PAKE and greeted by the host; state 'pending' until the host approves. */
  /** fingerprint: the same `xxxx-xxxx` the host sees; the host approves by it. */
  joined: [info: { state: 'pending' | 'active'; peer: number; rejoin: boolean; fingerprint: string }];
  approved: [];
  rejected: [reason: string];
  disconnected: [reason: string];
  link: [status: RingLinkStatus];
  /** The host's list of who is in the session changed. */
  roster: [members: readonly RosterEntry[]];
  /** A pipeline message from the host (engine/pipeline validates the body). */
  pipeline: [body: Record<string, unknown>];
  /** Binary pipeline data from the host (weights; engine/pipeline parses it). */
  'pipeline-bytes': [bytes: Uint8Array];
  /** A fatal error: the member stopped. */
  fatal: [error: KiwiError];
  warning: [error: KiwiError];
  closed: [reason: string];
}

interface Connection {
  client: RendezvousClient;
  control: SecureLink;
  links: LinkManager;
  peer: number;
}

export class MemberSession extends EventEmitter<MemberEvents> {
  readonly memberId: string;
  readonly identity: MemberIdentity;
  readonly name: string;
  /** This connection's fingerprint (it changes with every connection's PAKE transcript). */
  fingerprint: string | undefined;
  private conn: Connection | undefined;
  /** From the host once approved: rejoin with it instead of the code. */
  private resume: Uint8Array | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private stopped = false;
  private joins = 0;
  private rosterNow: readonly RosterEntry[] = [];
  private readonly nameplate: number;
  private readonly w: bigint;
  private readonly portMapper: PortMapper | undefined;

  constructor(private readonly opts: JoinOptions) {
    super();
    const code = parseSessionCode(opts.code);
    this.nameplate = code.nameplate;
    this.w = passwordScalar(codePassword(code), String(code.nameplate));
    this.name = validateName(opts.name);
    this.identity = opts.identity ?? generateIdentity();
    if (opts.memberId !== undefined && opts.memberId !== this.identity.memberId) {
      throw new KiwiError('IDENTITY_INVALID', `Member id ${opts.memberId} is not the id of this identity key (${this.identity.memberId}); a member id cannot be chosen, it comes from the key.`);
    }
    this.memberId = this.identity.memberId;
    this.portMapper = memberPortMapper(opts);
  }

  get peer(): number | undefined {
    return this.conn?.peer;
  }

  /** The secure ring link to a neighbour, once up. */
  ringLink(peer: number): SecureLink | undefined {
    return this.conn?.links.link(peer);
  }

  /** Everyone in the session as the host last described it (empty until it does). */
  roster(): readonly RosterEntry[] {
    return this.rosterNow;
  }

  /** The listener's port as mapped on the router (UPnP-IGD or NAT-PMP), when it is. */
  get portMapping(): MappedPort | undefined {
    return this.portMapper?.mapping;
  }

  /** How this member's NAT maps UDP, once measured (reportNat). */
  natMapping: NatMapping['mapping'] | undefined;

  linkStatuses(): RingLinkStatus[] {
    return this.conn?.links.statuses() ?? [];
  }

  send(msg: MemberToHost): void {
    const c = this.conn;
    if (c === undefined || c.control.closed) throw new KiwiError('SESSION_NOT_CONNECTED', 'Not connected to the host right now.');
    c.control.send(encodeControl(msg));
  }

  /** Connects and joins; resolves once the host greeted this member. */
  async connect(): Promise<void> {
    // The router's gateway is looked for while the join's handshake runs.
    this.portMapper?.start();
    const client = await RendezvousClient.connect(this.opts.rendezvousUrl, { timeoutMs: this.opts.timeoutMs ?? 5000, ...(this.opts.signal ? { signal: this.opts.signal } : {}) });
    try {
      await this.handshake(client);
    } catch (err) {
      client.close();
      throw err;
    }
  }

  async leave(): Promise<void> {
    if (this.stopped) return;
    try {
      this.send({ type: 'leave' });
    } catch (err) {
      if (!isKiwiError(err, 'SESSION_NOT_CONNECTED')) throw err;
    }
    await this.stop('left the session');
  }

  async stop(reason: string): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.heartbeat);
    const c = this.conn;
    this.conn = undefined;
    if (c !== undefined) {
      // Give the control link a moment to flush a final message before the socket goes.
      await new Promise((r) => setTimeout(r, 20));
      c.control.close(reason);
      await c.links.close();
      c.client.close();
    }
    await this.portMapper?.close();
    this.emit('closed', reason);
  }

  private async handshake(client: RendezvousClient): Promise<void> {
    const timeoutMs = this.opts.timeoutMs ?? 15_000;
    const resume = this.resume;
    const { peer, result } = await proveToHost(client, this.nameplate, this.memberId, resume !== undefined ? { resume, memberId: this.memberId } : { w: this.w }, timeoutMs);
    const control = await openSecureLink(client.relayLink(HOST_PEER, RelayChannel.CONTROL), {
      role: 'initiator', secret: { secret: result.sessionKey, context: controlContext(this.nameplate, peer) }, timeoutMs,
    });
    // Relay-only (no listenHost) takes no direct links of any kind.
    const ice = ringIceOptions(this.opts.rendezvousUrl, this.opts.ice, this.opts.listenHost);
    const links = new LinkManager({
      rendezvous: client, listenHost: this.opts.listenHost, nameplate: this.nameplate, selfPeer: peer,
      ...(ice !== undefined ? { ice } : {}),
      sendSignal: (to, linkId, signal) => {
        if (!control.closed) control.send(encodeControl({ type: 'ice', peer: to, linkId: toB64(linkId), signal }));
      },
    });
    const listening = await links.start();
    const addresses = this.opts.advertise ?? await withMappedAddress(this.portMapper, listening, this.opts.listenHost);
    links.on('status', (s) => {
      this.emit('link', s);
      const report = linkReport(s);
      if (report !== undefined && !control.closed) control.send(encodeControl(report));
    });
    const welcome = new Promise<'pending' | 'active'>((resolve, reject) => {
      const timer = setTimeout(() => reject(new KiwiError('SESSION_TIMEOUT', 'The host did not greet this member in time.')), timeoutMs);
      control.onMessage((bytes) => {
        if (bytes[0] === BINARY_CONTROL) {
          this.emit('pipeline-bytes', bytes.slice(1));
          return;
        }
        let msg: HostToMember;
        try {
          msg = decodeControl(HostToMember, bytes);
        } catch (err) {
          if (!isKiwiError(err)) throw err;
          this.emit('warning', err);
          return;
        }
        if (msg.type === 'welcome') {
          clearTimeout(timer);
          if (msg.resume !== undefined) this.resume = fromB64(msg.resume);
          resolve(msg.state);
          return;
        }
        if (msg.type === 'rejected') {
          clearTimeout(timer);
          const err = new KiwiError('SESSION_REJECTED', `The host did not admit this member: ${msg.reason}.`);
          reject(err);
          if (this.conn !== undefined) this.fatal(err);
          return;
        }
        this.onHostMessage(msg, links);
      });
      control.onClose((info) => {
        clearTimeout(timer);
        reject(info.error ?? new KiwiError('SESSION_DISCONNECTED', `The control link closed: ${info.reason}.`));
      });
    });
    const signature = signHello(this.identity, this.nameplate, peer, result.transcriptHash);
    const fp = fingerprint(this.identity.publicKey, result.transcriptHash);
    this.fingerprint = fp;
    control.send(encodeControl({
      type: 'hello', memberId: this.memberId, name: this.name, publicKey: toB64(this.identity.publicKey), signature: toB64(signature), addresses,
      // `ice: false` (--no-ice with a listener) tells the planner its links will be TCP (planner/nat-capabilities.ts).
      ...(this.opts.capabilities || this.opts.ice === false ? { capabilities: { ...this.opts.capabilities, ...(this.opts.ice === false ? { ice: false } : {}) } } : {}),
    }));
    const state = await welcome;
    this.conn = { client, control, links, peer };
    // Only the current connection's end counts: an older one's may come later.
    control.onClose((info) => {
      if (this.conn?.control === control) this.onDisconnect(info.reason);
    });
    client.on('close', (reason) => {
      if (this.conn?.client === client) this.onDisconnect(reason);
    });
    client.on('nameplate-closed', (reason) => {
      // Only the host leaving ends a session for an admitted member; reconnecting cannot help.
      if (/host left/.test(reason)) this.fatal(new KiwiError('SESSION_ENDED', 'The host ended the session.'));
    });
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => {
      if (!control.closed) control.send(encodeControl({ type: 'heartbeat' }));
    }, this.opts.heartbeatMs ?? 5000);
    this.emit('joined', { state, peer, rejoin: this.joins++ > 0, fingerprint: fp });
    if (this.opts.ice !== false && this.opts.listenHost !== undefined) void this.reportNat(control);
  }

  /**
   * Measures how this member's NAT maps UDP against the rendezvous's two STUN ports and adds it to
   * the capabilities the host sees: `nat` (the planner's 'permissive' / 'restrictive'),
   * `nat_mapping`, `rendezvous_rtt_ms` (the STUN round trip, which prices a relayed edge) and
   * `nat_none` (the rendezvous saw this machine's own address), and `port_mapping` ('upnp' / 'nat-pmp' / null:
   * whether the listener's port is mapped on the router, settled before the hello). Nothing is reported when the rendezvous runs no STUN service.
   */
  private async reportNat(control: SecureLink): Promise<void> {
    const probe = await probeRendezvousNat(this.opts.rendezvousUrl);
    if (probe === undefined) return;
    this.natMapping = probe.mapping;
    if (probe.natClass === undefined || control.closed) return;
    control.send(encodeControl({ type: 'capabilities', capabilities: { ...(this.opts.capabilities ?? {}), nat: probe.natClass, nat_mapping: probe.mapping, rendezvous_rtt_ms: Math.round(probe.rttMs * 1000) / 1000, ...(probe.local ? { nat_none: true } : {}), port_mapping: this.portMapping?.protocol ?? null } }));
  }

  private onHostMessage(msg: HostToMember, links: LinkManager): void {
    switch (msg.type) {
      case 'approved':
        if (msg.resume !== undefined) this.resume = fromB64(msg.resume);
        this.emit('approved');
        return;
      case 'link':
        links.assign({ peer: msg.peer, linkId: fromB64(msg.linkId), secret: fromB64(msg.secret), role: msg.role, addresses: msg.addresses });
        return;
      case 'ice':
        links.signal(msg.peer, fromB64(msg.linkId), msg.signal);
        return;
      case 'evicted':
        this.emit('warning', new KiwiError('SESSION_EVICTED', `The host evicted this member: ${msg.reason}.`));
        return;
      case 'pipeline':
        this.emit('pipeline', msg.body);
        return;
      case 'roster':
        this.rosterNow = msg.members;
        this.emit('roster', msg.members);
        return;
      case 'welcome':
      case 'rejected':
        this.emit('warning', new KiwiError('CONTROL_UNEXPECTED', `The host sent '${msg.type}' twice.`));
        return;
    }
  }

  private onDisconnect(reason: string): void {
    const c = this.conn;
    if (c === undefined || this.stopped) return;
    this.conn = undefined;
    clearInterval(this.heartbeat);
    c.control.close('reconnecting');
    void c.links.close();
    c.client.close();
    this.emit('disconnected', reason);
    // Another process joined with this identity and the host took it instead: reconnecting would
    // only push that one out in turn, forever.
    if (reason.includes(REPLACED_REASON)) {
      this.fatal(new KiwiError('SESSION_REPLACED', 'Another Kiwi joined the session with this member\'s identity and took its place; this one stops.'));
      return;
    }
    if (this.opts.reconnect === false) {
      void this.stop(`disconnected: ${reason}`);
      return;
    }
    void this.reconnectLoop();
  }

  private async reconnectLoop(): Promise<void> {
    const delayMs = this.opts.reconnectDelayMs ?? 1000;
    const giveUpAt = Date.now() + (this.opts.reconnectForMs ?? 120_000);
    while (!this.stopped) {
      if (Date.now() > giveUpAt) {
        this.fatal(new KiwiError('SESSION_UNREACHABLE', `Could not reach the session for ${Math.round((this.opts.reconnectForMs ?? 120_000) / 1000)} s; the host or the rendezvous is gone. Join again with a new code.`));
        return;
      }
      await new Promise((r) => setTimeout(r, delayMs));
      if (this.stopped) return;
      try {
        await this.connect();
        return;
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        switch (reconnectVerdict(err.code, this.resume !== undefined)) {
          case 'session-ended':
            this.fatal(new KiwiError('SESSION_ENDED', 'The host ended the session.'));
            return;
          case 'forget-resume':
            // A resume the host no longer knows (it forgot the member): the code is the way back in.
            this.resume = undefined;
            this.emit('warning', err);
            continue;
          case 'fatal':
            this.fatal(err);
            return;
          case 'retry':
            this.emit('warning', err);
        }
      }
    }
  }

  private fatal(err: KiwiError): void {
    this.emit('fatal', err);
    void this.stop(err.message);
  }
}

/** Joins a session: resolves with the member once the host greeted it. */
export async function joinSession(opts: JoinOptions): Promise<MemberSession> {
  const member = new MemberSession(opts);
  await member.connect();
  return member;
}
