// The rendezvous's logic, free of sockets: it allocates nameplates, passes PAKE messages between
// a host and the peers that claim its nameplate, relays binary frames between admitted peers, and
// enforces every limit. Each connection's state is its own, so a malformed, oversized, replayed or
// flooding client only ever gets errors and, past a threshold, its own connection closed.
import { isKiwiError, KiwiError } from '../errors.js';
import { ClientMessage, decodeRelay, encodeRelay, HOST_PEER, parseMessage, type ServerMessage } from './protocol.js';

export interface RendezvousLimits {
  /** Largest JSON message, bytes. */
  maxTextBytes: number;
  /** Largest relayed frame (header included), bytes. */
  maxRelayBytes: number;
  maxConnectionsPerIp: number;
  /** Open nameplates whose hosts connect from one IP. */
  maxSessionsPerIp: number;
  maxPeersPerNameplate: number;
  /** Failed or abandoned PAKE attempts after which a nameplate takes no more claims. */
  maxFailedAttempts: number;
  /** Token bucket for JSON messages, per connection. */
  messagesPerSecond: number;
  messageBurst: number;
  /** Protocol violations after which a connection is closed. */
  maxViolations: number;
  /** A receiver further behind than this is disconnected rather than buffered without bound. */
  maxBufferedBytes: number;
}

const NOT_VIOLATIONS = new Set(['RENDEZVOUS_NO_PEER', 'RELAY_CONGESTED']);

export const DEFAULT_LIMITS: RendezvousLimits = {
  maxTextBytes: 64 * 1024,
  maxRelayBytes: 16 * 1024 * 1024 + 1024,
  maxConnectionsPerIp: 64,
  maxSessionsPerIp: 8,
  maxPeersPerNameplate: 32,
  maxFailedAttempts: 5,
  messagesPerSecond: 100,
  messageBurst: 200,
  maxViolations: 10,
  maxBufferedBytes: 256 * 1024 * 1024,
};

/** What the core needs of a connection (a WebSocket in production, a fake in tests). */
export interface CoreConnection {
  readonly remoteAddress: string;
  readonly bufferedAmount: number;
  sendText(text: string): void;
  sendBinary(bytes: Uint8Array): void;
  close(code: number, reason: string): void;
}

/** WebSocket close codes (4000-4999 are for applications). */
export const CloseCode = { VIOLATIONS: 4000, REJECTED: 4001, NAMEPLATE_CLOSED: 4002, TOO_MANY_CONNECTIONS: 4003, SLOW_CONSUMER: 4004, DROPPED: 4005 } as const;

interface Client {
  conn: CoreConnection;
  ip: string;
  tokens: number;
  refilledAt: number;
  violations: number;
  nameplate: Nameplate | undefined;
  peer: number;
  admitted: boolean;
  rejected: boolean;
}

interface Nameplate {
  id: number;
  hostIp: string;
  members: Map<number, Client>;
  nextPeer: number;
  failures: number;
  closed: boolean;
}

export interface RendezvousCoreOptions {
  limits?: Partial<RendezvousLimits>;
  now?: () => number;
  random?: (n: number) => number;
  /** Debug hook: every relayed frame as the rendezvous sees it (tests use it to show it is ciphertext). */
  onRelay?: (from: number, to: number, payload: Uint8Array) => void;
}

export class RendezvousCore {
  readonly limits: RendezvousLimits;
  private readonly clients = new Map<CoreConnection, Client>();
  private readonly nameplates = new Map<number, Nameplate>();
  private readonly now: () => number;
  private readonly random: (n: number) => number;

  constructor(private readonly opts: RendezvousCoreOptions = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...opts.limits };
    this.now = opts.now ?? Date.now;
    this.random = opts.random ?? ((n) => Math.floor(Math.random() * n));
  }

  stats(): { connections: number; nameplates: number } {
    return { connections: this.clients.size, nameplates: this.nameplates.size };
  }

  /** Operator action: drops one peer's connection (a misbehaving member; tests simulate a network drop). */
  dropPeer(nameplate: number, peer: number): boolean {
    const client = this.nameplates.get(nameplate)?.members.get(peer);
    client?.conn.close(CloseCode.DROPPED, 'dropped by the operator');
    return client !== undefined;
  }

  connected(conn: CoreConnection): void {
    const ip = conn.remoteAddress;
    let fromIp = 0;
    for (const c of this.clients.values()) if (c.ip === ip) fromIp++;
    if (fromIp >= this.limits.maxConnectionsPerIp) {
      conn.close(CloseCode.TOO_MANY_CONNECTIONS, 'too many connections from this address');
      return;
    }
    this.clients.set(conn, {
      conn, ip, tokens: this.limits.messageBurst, refilledAt: this.now(), violations: 0,
      nameplate: undefined, peer: -1, admitted: false, rejected: false,
    });
  }

  text(conn: CoreConnection, text: string): void {
    const client = this.clients.get(conn);
    if (client === undefined) return;
    try {
      this.takeToken(client);
      this.handle(client, parseMessage(ClientMessage, text, this.limits.maxTextBytes));
    } catch (err) {
      this.refuse(client, err);
    }
  }

  binary(conn: CoreConnection, bytes: Uint8Array): void {
    const client = this.clients.get(conn);
    if (client === undefined) return;
    try {
      this.relay(client, bytes);
    } catch (err) {
      this.refuse(client, err);
    }
  }

  disconnected(conn: CoreConnection): void {
    const client = this.clients.get(conn);
    if (client === undefined) return;
    this.clients.delete(conn);
    const np = client.nameplate;
    if (np === undefined) return;
    np.members.delete(client.peer);
    if (client.peer === HOST_PEER) {
      this.nameplates.delete(np.id);
      for (const m of np.members.values()) {
        send(m, { t: 'nameplate-closed', reason: 'the host left the session' });
        m.conn.close(CloseCode.NAMEPLATE_CLOSED, 'host left');
      }
      return;
    }
    // A claimant that leaves before being admitted counts as a failed guess at the code.
    if (!client.admitted && !client.rejected) this.countFailure(np);
    for (const m of np.members.values()) if (m.peer === HOST_PEER || m.admitted) send(m, { t: 'peer-left', peer: client.peer });
  }

  private handle(client: Client, msg: ClientMessage): void {
    switch (msg.t) {
      case 'open':
        return this.open(client);
      case 'claim':
        return this.claim(client, msg.nameplate);
      case 'send': {
        const np = this.bound(client);
        const target = np.members.get(msg.to);
        if (target === undefined || target === client) throw new KiwiError('RENDEZVOUS_NO_PEER', `Peer ${msg.to} is not in this session.`);
        this.checkMayTalk(client, target);
        send(target, { t: 'from', from: client.peer, body: msg.body });
        return;
      }
      case 'unlink': {
        const np = this.bound(client);
        const target = np.members.get(msg.to);
        if (target === undefined || target === client) throw new KiwiError('RENDEZVOUS_NO_PEER', `Peer ${msg.to} is not in this session.`);
        this.checkMayTalk(client, target);
        send(target, { t: 'unlinked', from: client.peer, channel: msg.channel });
        return;
      }
      case 'admit':
      case 'reject': {
        const np = this.bound(client);
        if (client.peer !== HOST_PEER) throw new KiwiError('RENDEZVOUS_NOT_HOST', 'Only the host admits or rejects peers.');
        const target = np.members.get(msg.peer);
        if (target === undefined || target === client) throw new KiwiError('RENDEZVOUS_NO_PEER', `Peer ${msg.peer} is not in this session.`);
        if (target.admitted) throw new KiwiError('RENDEZVOUS_ALREADY_ADMITTED', `Peer ${msg.peer} was already admitted.`);
        if (msg.t === 'admit') {
          target.admitted = true;
          send(target, { t: 'admitted' });
        } else {
          target.rejected = true;
          np.members.delete(target.peer);
          send(target, { t: 'error', code: 'PAKE_CONFIRMATION_FAILED', message: 'The host refused the session code.' });
          target.conn.close(CloseCode.REJECTED, 'wrong code');
          this.countFailure(np);
        }
        return;
      }
    }
  }

  private open(client: Client): void {
    if (client.nameplate !== undefined) throw new KiwiError('RENDEZVOUS_ALREADY_BOUND', 'This connection already belongs to a session.');
    let sessions = 0;
    for (const np of this.nameplates.values()) if (np.hostIp === client.ip) sessions++;
    if (sessions >= this.limits.maxSessionsPerIp) {
      throw new KiwiError('RENDEZVOUS_TOO_MANY_SESSIONS', `This address already hosts ${sessions} sessions; close one first.`);
    }
    const id = this.allocateNameplate();
    const np: Nameplate = { id, hostIp: client.ip, members: new Map([[HOST_PEER, client]]), nextPeer: 1, failures: 0, closed: false };
    this.nameplates.set(id, np);
    client.nameplate = np;
    client.peer = HOST_PEER;
    client.admitted = true;
    send(client, { t: 'opened', nameplate: id, peer: HOST_PEER });
  }

  private claim(client: Client, id: number): void {
    if (client.nameplate !== undefined) throw new KiwiError('RENDEZVOUS_ALREADY_BOUND', 'This connection already belongs to a session.');
    const np = this.nameplates.get(id);
    if (np === undefined) throw new KiwiError('NAMEPLATE_UNKNOWN', `No session has the number ${id}. Check the code with the host.`);
    if (np.closed) throw new KiwiError('NAMEPLATE_CLOSED', `Session ${id} takes no more members (too many wrong codes). Ask the host for a new code.`);
    if (np.members.size >= this.limits.maxPeersPerNameplate || np.nextPeer > 0xffff) {
      throw new KiwiError('NAMEPLATE_FULL', `Session ${id} is full.`);
    }
    // Attempts in flight count against the failure budget, so parallel guesses cannot exceed it.
    let pending = 0;
    for (const m of np.members.values()) if (!m.admitted) pending++;
    if (pending + np.failures >= this.limits.maxFailedAttempts) {
      throw new KiwiError('NAMEPLATE_BUSY', `Session ${id} has too many attempts in progress; try again in a moment.`);
    }
    const peer = np.nextPeer++;
    client.nameplate = np;
    client.peer = peer;
    np.members.set(peer, client);
    send(client, { t: 'claimed', nameplate: id, peer });
    const host = np.members.get(HOST_PEER);
    if (host !== undefined) send(host, { t: 'peer-joined', peer });
  }

  private relay(client: Client, bytes: Uint8Array): void {
    if (bytes.length > this.limits.maxRelayBytes) {
      throw new KiwiError('RELAY_TOO_LARGE', `A relayed frame of ${bytes.length} bytes exceeds ${this.limits.maxRelayBytes}.`);
    }
    const np = this.bound(client);
    const { peer, channel, payload } = decodeRelay(bytes);
    const target = np.members.get(peer);
    if (target === undefined || target === client) throw new KiwiError('RENDEZVOUS_NO_PEER', `Peer ${peer} is not in this session.`);
    // Relaying is for peers that proved the code (the host counts as admitted): a claimant still
    // in the key exchange can only send the host small JSON messages.
    if (!client.admitted || !target.admitted) throw new KiwiError('RENDEZVOUS_NOT_ADMITTED', 'Only admitted members may relay frames; finish joining first.');
    if (target.conn.bufferedAmount > this.limits.maxBufferedBytes) {
      target.conn.close(CloseCode.SLOW_CONSUMER, 'too far behind');
      throw new KiwiError('RELAY_CONGESTED', `Peer ${peer} could not keep up and was disconnected.`);
    }
    this.opts.onRelay?.(client.peer, peer, payload);
    target.conn.sendBinary(encodeRelay(client.peer, channel, payload));
  }

  /** Unadmitted claimants may only talk to the host; members only to the host and admitted members. */
  private checkMayTalk(from: Client, to: Client): void {
    if (from.peer === HOST_PEER) return;
    if (to.peer === HOST_PEER) return;
    if (!from.admitted || !to.admitted) throw new KiwiError('RENDEZVOUS_NOT_ADMITTED', 'Only admitted members may talk to each other; finish joining first.');
  }

  private bound(client: Client): Nameplate {
    if (client.nameplate === undefined) throw new KiwiError('RENDEZVOUS_NOT_BOUND', 'Open or claim a session first.');
    return client.nameplate;
  }

  private countFailure(np: Nameplate): void {
    np.failures++;
    if (np.failures < this.limits.maxFailedAttempts || np.closed) return;
    np.closed = true;
    for (const m of [...np.members.values()]) {
      if (m.peer === HOST_PEER) {
        send(m, { t: 'nameplate-closed', reason: `${np.failures} failed attempts with a wrong code` });
      } else if (!m.admitted) {
        m.rejected = true;
        np.members.delete(m.peer);
        send(m, { t: 'nameplate-closed', reason: 'too many failed attempts' });
        m.conn.close(CloseCode.NAMEPLATE_CLOSED, 'nameplate closed');
      }
    }
  }

  private allocateNameplate(): number {
    // Short numbers first: a random free one below 100, then below 1000, then any.
    for (const bound of [99, 999, 9999]) {
      for (let i = 0; i < 64; i++) {
        const id = 1 + this.random(bound);
        if (!this.nameplates.has(id)) return id;
      }
    }
    for (let id = 1; id <= 9999; id++) if (!this.nameplates.has(id)) return id;
    throw new KiwiError('RENDEZVOUS_FULL', 'This rendezvous has no free session numbers; try again later.');
  }

  private takeToken(client: Client): void {
    const now = this.now();
    const l = this.limits;
    client.tokens = Math.min(l.messageBurst, client.tokens + ((now - client.refilledAt) / 1000) * l.messagesPerSecond);
    client.refilledAt = now;
    if (client.tokens < 1) throw new KiwiError('RENDEZVOUS_RATE_LIMITED', `More than ${l.messagesPerSecond} messages per second; slow down.`);
    client.tokens -= 1;
  }

  private refuse(client: Client, err: unknown): void {
    if (!isKiwiError(err)) throw err;
    // A peer that just left, or one too slow to keep up, is a race, not the sender's violation:
    // a host that sends to a member killed a moment ago must not be disconnected for it.
    if (!NOT_VIOLATIONS.has(err.code)) client.violations++;
    send(client, { t: 'error', code: err.code, message: err.message.slice(0, 500) });
    if (client.violations >= this.limits.maxViolations) client.conn.close(CloseCode.VIOLATIONS, 'too many protocol violations');
  }
}

function send(client: Client, msg: ServerMessage): void {
  client.conn.sendText(JSON.stringify(msg));
}
