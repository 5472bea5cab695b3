// A host's or member's connection to the rendezvous: open or claim a nameplate, exchange JSON
// bodies with peers (the PAKE), and relayed links to peers (binary frames the rendezvous forwards
// but cannot read; secure-link.ts encrypts them). Every server message is validated on arrival.
import { EventEmitter } from 'node:events';
import { isKiwiError, KiwiError, knownCodeOr } from '../errors.js';
import { decodeRelay, encodeRelay, parseMessage, RENDEZVOUS_PROTOCOL_VERSION, ServerMessage, type ClientMessage } from '../rendezvous/protocol.js';
import { BaseLink } from '../transport/link.js';
import { connectWs, type WsConnection } from '../transport/ws.js';

const MAX_TEXT_BYTES = 64 * 1024;
const MAX_RELAY_BYTES = 16 * 1024 * 1024 + 1024;

export interface RendezvousClientEvents {
  /** rejoin: the peer claimed as a returning member (resume secret), not with the code. */
  'peer-joined': [peer: number, rejoin: boolean];
  'peer-left': [peer: number];
  from: [from: number, body: Record<string, unknown>];
  admitted: [];
  'nameplate-closed': [reason: string];
  /** An error the server reported that no request was waiting for. */
  'server-error': [error: KiwiError];
  /** A peer started a relayed link we had not opened (the responder side of a ring link). */
  'incoming-link': [link: RelayLink];
  close: [reason: string];
}

export class RendezvousClient extends EventEmitter<RendezvousClientEvents> {
  private waiting: { expect: 'opened' | 'claimed'; resolve(m: ServerMessage): void; reject(e: Error): void } | undefined;
  private readonly links = new Map<string, RelayLink>();
  private closedReason: string | undefined;
  /** When this side last unlinked each relayed link (peer/channel). */
  private readonly unlinkedAt = new Map<string, number>();
  nameplate: number | undefined;
  peer: number | undefined;

  private constructor(private readonly conn: WsConnection, readonly url: string) {
    super();
    conn.onText((text) => this.onText(text));
    conn.onBinary((bytes) => this.onBinary(bytes));
    conn.onClose((code, reason) => this.onClose(reason || `connection closed (${code})`));
  }

  static async connect(url: string, opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<RendezvousClient> {
    const conn = await connectWs(url, { maxPayloadBytes: MAX_RELAY_BYTES, timeoutMs: opts.timeoutMs ?? 5000, ...(opts.signal ? { signal: opts.signal } : {}) });
    return new RendezvousClient(conn, url);
  }

  get closed(): boolean {
    return this.closedReason !== undefined;
  }

  async open(): Promise<{ nameplate: number; peer: number }> {
    const m = await this.request({ t: 'open', v: RENDEZVOUS_PROTOCOL_VERSION }, 'opened');
    if (m.t !== 'opened') throw new Error('unreachable');
    this.nameplate = m.nameplate;
    this.peer = m.peer;
    return { nameplate: m.nameplate, peer: m.peer };
  }

  async claim(nameplate: number, opts: { rejoin?: boolean } = {}): Promise<{ peer: number }> {
    const m = await this.request({ t: 'claim', v: RENDEZVOUS_PROTOCOL_VERSION, nameplate, ...(opts.rejoin === true ? { rejoin: true as const } : {}) }, 'claimed');
    if (m.t !== 'claimed') throw new Error('unreachable');
    this.nameplate = m.nameplate;
    this.peer = m.peer;
    return { peer: m.peer };
  }

  send(to: number, body: Record<string, unknown>): void {
    this.write({ t: 'send', to, body });
  }

  admit(peer: number): void {
    this.write({ t: 'admit', peer });
  }

  reject(peer: number): void {
    this.write({ t: 'reject', peer });
  }

  /** The relayed link to `peer` on `channel` (one per pair and channel; created on first use). */
  relayLink(peer: number, channel: number): RelayLink {
    const key = `${peer}/${channel}`;
    let link = this.links.get(key);
    if (link === undefined || link.closed) {
      link = new RelayLink(this, peer, channel, () => this.links.delete(key));
      this.links.set(key, link);
    }
    return link;
  }

  close(): void {
    this.conn.close(1000, 'bye');
    this.onClose('closed by this side');
  }

  /**
   * @internal used by RelayLink. At most one unlink per link a second: a peer that floods a relayed
   * link this side closed opens (and at once closes) a new incoming link per message, and answering
   * each would run this client into the rendezvous's rate limit.
   */
  sendUnlink(peer: number, channel: number): void {
    if (this.closedReason !== undefined) return;
    const key = `${peer}/${channel}`;
    const now = Date.now();
    if (now - (this.unlinkedAt.get(key) ?? -Infinity) < 1000) return;
    if (this.unlinkedAt.size >= 1024) this.unlinkedAt.clear();
    this.unlinkedAt.set(key, now);
    this.write({ t: 'unlink', to: peer, channel });
  }

  /** @internal used by RelayLink */
  sendRelay(peer: number, channel: number, bytes: Uint8Array): void {
    // Closed: every relay link is being closed (onClose); what their close listeners still send is dropped.
    if (this.closedReason !== undefined) return;
    this.conn.sendBinary(encodeRelay(peer, channel, bytes));
  }

  private request(msg: ClientMessage, expect: 'opened' | 'claimed'): Promise<ServerMessage> {
    if (this.waiting !== undefined) throw new Error('one rendezvous request at a time');
    return new Promise((resolve, reject) => {
      this.waiting = { expect, resolve, reject };
      try {
        this.write(msg);
      } catch (err) {
        this.waiting = undefined;
        reject(err as Error);
      }
    });
  }

  private write(msg: ClientMessage): void {
    if (this.closedReason !== undefined) throw new KiwiError('RENDEZVOUS_CLOSED', `The rendezvous connection is closed (${this.closedReason}).`);
    this.conn.sendText(JSON.stringify(msg));
  }

  private onText(text: string): void {
    let msg: ServerMessage;
    try {
      msg = parseMessage(ServerMessage, text, MAX_TEXT_BYTES);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      // A rendezvous that speaks nonsense cannot be trusted with the session: drop it.
      this.emit('server-error', err);
      this.conn.close(1002, err.code);
      return;
    }
    const waiting = this.waiting;
    if (waiting !== undefined && (msg.t === waiting.expect || msg.t === 'error' || msg.t === 'nameplate-closed')) {
      this.waiting = undefined;
      if (msg.t === 'error') waiting.reject(new KiwiError(knownCodeOr(msg.code, 'RENDEZVOUS_UNEXPECTED'), msg.message));
      else if (msg.t === 'nameplate-closed') waiting.reject(new KiwiError('NAMEPLATE_CLOSED', `The session is closed: ${msg.reason}.`));
      else waiting.resolve(msg);
      return;
    }
    switch (msg.t) {
      case 'peer-joined':
        this.emit('peer-joined', msg.peer, msg.rejoin === true);
        return;
      case 'peer-left':
        for (const [key, link] of this.links) if (key.startsWith(`${msg.peer}/`)) link.remoteGone('peer left the rendezvous');
        this.emit('peer-left', msg.peer);
        return;
      case 'from':
        this.emit('from', msg.from, msg.body);
        return;
      case 'unlinked':
        this.links.get(`${msg.from}/${msg.channel}`)?.remoteGone('the peer closed the relayed link');
        return;
      case 'admitted':
        this.emit('admitted');
        return;
      case 'nameplate-closed':
        this.emit('nameplate-closed', msg.reason);
        return;
      case 'error':
        this.emit('server-error', new KiwiError(knownCodeOr(msg.code, 'RENDEZVOUS_UNEXPECTED'), msg.message));
        return;
      default:
        this.emit('server-error', new KiwiError('RENDEZVOUS_UNEXPECTED', `Unexpected '${msg.t}' from the rendezvous.`));
    }
  }

  private onBinary(bytes: Uint8Array): void {
    let relayed: ReturnType<typeof decodeRelay>;
    try {
      relayed = decodeRelay(bytes);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.emit('server-error', err);
      return;
    }
    const key = `${relayed.peer}/${relayed.channel}`;
    const existing = this.links.get(key);
    const link = existing ?? this.relayLink(relayed.peer, relayed.channel);
    if (existing === undefined) this.emit('incoming-link', link);
    link.receive(relayed.payload);
  }

  private onClose(reason: string): void {
    if (this.closedReason !== undefined) return;
    this.closedReason = reason;
    if (this.waiting !== undefined) {
      this.waiting.reject(new KiwiError('RENDEZVOUS_CLOSED', `The rendezvous closed the connection (${reason}).`));
      this.waiting = undefined;
    }
    for (const link of this.links.values()) link.remoteGone(`rendezvous connection closed: ${reason}`);
    this.links.clear();
    this.emit('close', reason);
  }
}

/** A link to one peer through the rendezvous; the bytes are whatever secure-link.ts sealed. */
export class RelayLink extends BaseLink {
  readonly kind = 'relayed' as const;

  constructor(
    private readonly client: RendezvousClient,
    readonly peer: number,
    readonly channel: number,
    private readonly forget: () => void,
  ) {
    super();
  }

  receive(bytes: Uint8Array): void {
    this.deliver(bytes);
  }

  remoteGone(reason: string): void {
    this.finish({ by: 'remote', reason });
    this.forget();
  }

  protected transmit(bytes: Uint8Array): void {
    this.client.sendRelay(this.peer, this.channel, bytes);
  }

  protected shutdown(): void {
    this.forget();
    this.client.sendUnlink(this.peer, this.channel);
  }
}
