// Ring links between session participants: the host hands each pair of ring neighbours a fresh
// link key; the initiator first tries a WebRTC data channel (ICE over UDP, which punches through
// most home NATs; its offer, answer and candidates travel as 'ice' control messages through the
// host), then the responder's direct addresses (WebSocket), then a link relayed by the rendezvous.
// Every kind is wrapped in a secure-link (authenticated, encrypted with the link key).
// Each link's RTT and throughput are measured once it is up; the statuses feed the planner, the
// choice of each link's activation encoding, and `status()`.
import { EventEmitter } from 'node:events';
import { isKiwiError } from '../errors.js';
import { RelayChannel } from '../rendezvous/protocol.js';
import type { IcePeer, IceSignal } from '../transport/ice-link.js';
import type { Link } from '../transport/link.js';
import type { LinkRole } from '../transport/secure-channel.js';
import { measureThroughput } from '../transport/link-throughput.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';
import { wsUrls } from '../transport/addresses.js';
import { dialDirect, listenDirect, type DirectListener } from '../transport/ws.js';
import type { RendezvousClient } from './rendezvous-client.js';

export interface LinkAssignment {
  peer: number;
  linkId: Uint8Array;
  secret: Uint8Array;
  role: LinkRole;
  /** The responder's direct addresses (used by the initiator). */
  addresses: readonly string[];
}

export interface RingLinkStatus {
  peer: number;
  state: 'connecting' | 'up' | 'failed' | 'closed';
  kind: 'direct' | 'relayed' | undefined;
  /** What a direct link runs over: udp (ICE data channel) or tcp (WebSocket); relay for relayed ones. */
  transport?: 'udp' | 'tcp' | 'relay';
  rttMs: number | undefined;
  /** Bulk bytes it carries, MB/s (10^6 bytes), measured with the RTT. */
  throughputMBps?: number;
  error?: string;
}

export interface LinkManagerOptions {
  rendezvous: RendezvousClient;
  /** Interface for the direct listener; undefined: no direct links (always relay). */
  listenHost: string | undefined;
  nameplate: number;
  selfPeer: number;
  maxPayloadBytes?: number;
  dialTimeoutMs?: number;
  handshakeTimeoutMs?: number;
  /** ICE links (tried before WebSocket and relay); undefined: off, and offers are refused. */
  ice?: { iceServers: readonly string[]; timeoutMs?: number; bindAddress?: string };
  /** Carries an ICE signal to ring neighbour `peer` (through the host's control channel). */
  sendSignal?: (peer: number, linkId: Uint8Array, signal: IceSignal) => void;
}

interface Entry {
  assignment: LinkAssignment;
  link: SecureLink | undefined;
  status: RingLinkStatus;
  generation: number;
  /** The ICE attempt in progress for this link, if any. */
  ice: IcePeer | undefined;
}

const MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;
const RETRIES = 4;
const RETRY_DELAY_MS = 250;

export class LinkManager extends EventEmitter<{ status: [status: RingLinkStatus] }> {
  private readonly entries = new Map<number, Entry>();
  private listener: DirectListener | undefined;
  private closed = false;
  private generation = 0;
  private readonly maxPayloadBytes: number;
  private icePeer: typeof IcePeer | undefined;

  constructor(private readonly opts: LinkManagerOptions) {
    super();
    this.maxPayloadBytes = opts.maxPayloadBytes ?? MAX_PAYLOAD_BYTES;
    opts.rendezvous.on('incoming-link', (link) => {
      if (link.channel === RelayChannel.DATA) this.accept(link, link.peer);
    });
  }

  /** Starts the direct listener (and loads the ICE library when ICE is on); returns the addresses to advertise. */
  async start(): Promise<string[]> {
    // Loaded here, not on first use, so that signals are handled synchronously; a session with ICE off never loads the native library.
    if (this.opts.ice !== undefined) this.icePeer = (await import('../transport/ice-link.js')).IcePeer;
    if (this.opts.listenHost === undefined) return [];
    this.listener = await listenDirect({
      host: this.opts.listenHost,
      maxPayloadBytes: this.maxPayloadBytes + 64,
      onLink: (link) => this.accept(link, undefined),
    });
    return wsUrls(this.opts.listenHost, this.listener.port).slice(0, 8);
  }

  assign(assignment: LinkAssignment): void {
    const old = this.entries.get(assignment.peer);
    old?.link?.close('replaced');
    const entry: Entry = {
      assignment,
      link: undefined,
      status: { peer: assignment.peer, state: 'connecting', kind: undefined, rttMs: undefined },
      generation: ++this.generation,
      ice: undefined,
    };
    old?.ice?.close();
    this.entries.set(assignment.peer, entry);
    if (assignment.role === 'initiator') void this.connect(entry);
  }

  /** Drops the link to a peer that left the ring. */
  remove(peer: number): void {
    const e = this.entries.get(peer);
    this.entries.delete(peer);
    e?.ice?.close();
    e?.link?.close('peer left the ring');
  }

  /**
   * An ICE signal from ring neighbour `from` for link `linkId`. An offer to a responder starts its
   * side of the attempt (or is refused when ICE is off); the rest go to the attempt in progress.
   * Signals for other links are dropped.
   */
  signal(from: number, linkId: Uint8Array, s: IceSignal): void {
    const entry = this.entries.get(from);
    if (entry === undefined || Buffer.compare(entry.assignment.linkId, linkId) !== 0) return;
    if (entry.assignment.role === 'responder' && s.kind === 'offer') {
      entry.ice?.close();
      entry.ice = undefined;
      if (this.icePeer === undefined || this.opts.sendSignal === undefined) {
        this.opts.sendSignal?.(from, linkId, { kind: 'unavailable' });
        return;
      }
      void this.answerIce(entry, s);
      return;
    }
    entry.ice?.signal(s);
  }

  link(peer: number): SecureLink | undefined {
    return this.entries.get(peer)?.link;
  }

  statuses(): RingLinkStatus[] {
    return [...this.entries.values()].map((e) => ({ ...e.status }));
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const e of this.entries.values()) {
      e.ice?.close();
      e.link?.close('session closed');
    }
    this.entries.clear();
    await this.listener?.close();
  }

  private context(a: number, b: number): string {
    return `ring|${this.opts.nameplate}|${Math.min(a, b)}|${Math.max(a, b)}`;
  }

  private async connect(entry: Entry): Promise<void> {
    const a = entry.assignment;
    const secret = { secret: a.secret, context: this.context(this.opts.selfPeer, a.peer) };
    let lastError = 'no route';
    for (let attempt = 0; attempt < RETRIES && !this.closed; attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, RETRY_DELAY_MS * attempt));
      if (!this.current(entry)) return;
      // ICE (UDP) first, on the first attempt; then every advertised address, then the relay. A
      // relay-only node (no listenHost) dials nothing directly either: everything goes through the rendezvous.
      const direct = this.opts.listenHost === undefined ? [] : a.addresses;
      const routes: Array<() => Promise<Link>> = [
        ...(attempt === 0 && this.icePeer !== undefined && this.opts.sendSignal !== undefined ? [() => this.dialIce(entry)] : []),
        ...direct.map((url) => () => dialDirect(url, { maxPayloadBytes: this.maxPayloadBytes + 64, timeoutMs: this.opts.dialTimeoutMs ?? 2000 })),
        async () => this.opts.rendezvous.relayLink(a.peer, RelayChannel.DATA),
      ];
      for (const route of routes) {
        let link: Link | undefined;
        try {
          link = await route();
          const secure = await openSecureLink(link, {
            role: 'initiator', secret, linkId: a.linkId, maxPayloadBytes: this.maxPayloadBytes, timeoutMs: this.opts.handshakeTimeoutMs ?? 5000,
          });
          if (!this.current(entry)) {
            secure.close('superseded');
            return;
          }
          await this.up(entry, secure);
          return;
        } catch (err) {
          if (!isKiwiError(err)) throw err;
          link?.close(err.code);
          lastError = `${err.code}: ${err.message}`;
        }
      }
    }
    if (this.current(entry)) this.setStatus(entry, { ...entry.status, state: 'failed', error: lastError });
  }

  /** An ICE attempt for `entry`'s link, signalling through the session; recorded as the entry's attempt. */
  private startIce(entry: Entry, role: 'initiator' | 'responder'): IcePeer {
    const a = entry.assignment;
    const ice = this.opts.ice!;
    const peer = new this.icePeer!({
      role,
      iceServers: ice.iceServers,
      maxMessageBytes: this.maxPayloadBytes + 64,
      ...(ice.timeoutMs !== undefined ? { timeoutMs: ice.timeoutMs } : {}),
      ...(ice.bindAddress !== undefined ? { bindAddress: ice.bindAddress } : {}),
      sendSignal: (s) => this.opts.sendSignal!(a.peer, a.linkId, s),
    });
    entry.ice = peer;
    return peer;
  }

  private async dialIce(entry: Entry): Promise<Link> {
    const peer = this.startIce(entry, 'initiator');
    try {
      return await peer.link;
    } finally {
      if (entry.ice === peer) entry.ice = undefined;
    }
  }

  private async answerIce(entry: Entry, offer: IceSignal): Promise<void> {
    // Synchronous up to `entry.ice = peer`: candidates that follow the offer must find the attempt.
    const peer = this.startIce(entry, 'responder');
    peer.signal(offer);
    let link: Link;
    try {
      link = await peer.link;
    } catch (err) {
      // The initiator reports the failure and falls back.
      if (!isKiwiError(err)) throw err;
      return;
    } finally {
      if (entry.ice === peer) entry.ice = undefined;
    }
    if (!this.current(entry)) {
      link.close('superseded');
      return;
    }
    // Only the assigned neighbour can have answered through the host for this link id.
    this.accept(link, entry.assignment.peer);
  }

  private accept(link: Link, relayPeer: number | undefined): void {
    let found: Entry | undefined;
    void openSecureLink(link, {
      role: 'responder',
      maxPayloadBytes: this.maxPayloadBytes,
      timeoutMs: this.opts.handshakeTimeoutMs ?? 5000,
      resolveSecret: (linkId) => {
        for (const e of this.entries.values()) {
          if (e.assignment.role !== 'responder' || Buffer.compare(e.assignment.linkId, linkId) !== 0) continue;
          // A relayed link names its source peer; it must be the assigned one.
          if (relayPeer !== undefined && relayPeer !== e.assignment.peer) return undefined;
          found = e;
          return { secret: e.assignment.secret, context: this.context(this.opts.selfPeer, e.assignment.peer) };
        }
        return undefined;
      },
    }).then(
      async (secure) => {
        if (found === undefined || !this.current(found)) {
          secure.close('unknown link');
          return;
        }
        found.link?.close('replaced by a new connection');
        await this.up(found, secure);
      },
      (err: unknown) => {
        // A failed inbound handshake (unknown link, wrong key) is the initiator's error to report.
        if (!isKiwiError(err)) throw err;
      },
    );
  }

  private async up(entry: Entry, secure: SecureLink): Promise<void> {
    entry.link = secure;
    const kind = secure.kind === 'relayed' ? 'relayed' : 'direct';
    const transport = secure.kind === 'relayed' ? 'relay' : secure.kind === 'direct-udp' ? 'udp' : 'tcp';
    this.setStatus(entry, { peer: entry.assignment.peer, state: 'up', kind, transport, rttMs: undefined });
    secure.onClose((info) => {
      if (entry.link !== secure || !this.current(entry)) return;
      entry.link = undefined;
      this.setStatus(entry, { ...entry.status, state: 'closed', error: info.reason });
    });
    const samples: number[] = [];
    for (let i = 0; i < 3; i++) {
      try {
        samples.push(await secure.ping(3000));
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        return;
      }
    }
    samples.sort((x, y) => x - y);
    const rttMs = samples[1]!;
    // Published with the RTT, so whoever waits for a measured link gets both.
    let throughputMBps: number | undefined;
    try {
      throughputMBps = (await measureThroughput(secure, rttMs)).throughputMBps;
    } catch (err) {
      if (!isKiwiError(err)) throw err;
    }
    if (entry.link === secure) this.setStatus(entry, { ...entry.status, rttMs, ...(throughputMBps !== undefined ? { throughputMBps } : {}) });
  }

  private current(entry: Entry): boolean {
    return !this.closed && this.entries.get(entry.assignment.peer)?.generation === entry.generation;
  }

  private setStatus(entry: Entry, status: RingLinkStatus): void {
    entry.status = status;
    this.emit('status', { ...status });
  }
}
