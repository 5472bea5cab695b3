// The rendezvous's logic, free of sockets: it allocates nameplates, passes PAKE messages between
// a host and the peers that claim its nameplate, relays binary frames between admitted peers, and
// enforces every limit. Each connection's state is its own, so a malformed, oversized, replayed or
// flooding client only ever gets errors and, past a threshold, its own connection closed.
// Wrong codes are counted per source address (IPv6: per /64), so strangers guessing cannot lock the
// friends out of a session: a source that failed maxFailedAttempts times gets no more tries, and
// only maxFailedAttemptsTotal failures from everywhere close the nameplate to code guesses. A
// connection that leaves without guessing costs nothing; members the host approved rejoin with a
// resume secret (claim `rejoin`) even through a closed nameplate. Nameplates have 3-4 digits and a
// source may probe unknown ones only slowly, so sessions cannot be found by enumeration.
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
  /** Failed or abandoned PAKE attempts from one source after which a nameplate takes no more claims from it. */
  maxFailedAttempts: number;
  /** Failed attempts from all sources together after which a nameplate takes no more code claims. */
  maxFailedAttemptsTotal: number;
  /** Claims of one source still in the key exchange, per nameplate. */
  maxPendingPerSource: number;
  /** Claims of unknown nameplates one source may make at once, refilled at unknownClaimsPerMinute. */
  unknownClaimBurst: number;
  unknownClaimsPerMinute: number;
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
  maxFailedAttemptsTotal: 20,
  maxPendingPerSource: 8,
  unknownClaimBurst: 20,
  unknownClaimsPerMinute: 6,
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
  /** Who is counted for wrong codes: the IPv4 address, or the /64 of an IPv6 one. */
  source: string;
  tokens: number;
  refilledAt: number;
  violations: number;
  nameplate: Nameplate | undefined;
  peer: number;
  admitted: boolean;
  rejected: boolean;
  /** Sent the host a key exchange message before being admitted: leaving then is a failed guess. */
  guessed: boolean;
  /** Claimed as a returning member (resume secret), not with the code. */
  rejoin: boolean;
}

interface Nameplate {
  id: number;
  hostIp: string;
  members: Map<number, Client>;
  nextPeer: number;
  failures: number;
  failuresBySource: Map<string, number>;
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
  /** Per source: tokens for claims of unknown nameplates. */
  private readonly probes = new Map<string, { tokens: number; refilledAt: number }>();
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
      conn, ip, source: sourceOf(ip), tokens: this.limits.messageBurst, refilledAt: this.now(), violations: 0,
      nameplate: undefined, peer: -1, admitted: false, rejected: false, guessed: false, rejoin: false,
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
    // A claimant that leaves after guessing and before being admitted counts as a failed guess;
    // one that never sent the host anything guessed nothing.
    if (!client.admitted && !client.rejected && client.guessed) this.countFailure(np, client);
    for (const m of np.members.values()) if (m.peer === HOST_PEER || m.admitted) send(m, { t: 'peer-left', peer: client.peer });
  }

  private handle(client: Client, msg: ClientMessage): void {
    switch (msg.t) {
      case 'open':
        return this.open(client);
      case 'claim':
        return this.claim(client, msg.nameplate, msg.rejoin === true);
      case 'send': {
        const np = this.bound(client);
        const target = np.members.get(msg.to);
        if (target === undefined || target === client) throw new KiwiError('RENDEZVOUS_NO_PEER', `Peer ${msg.to} is not in this session.`);
        this.checkMayTalk(client, target);
        if (!client.admitted) client.guessed = true;
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
          this.countFailure(np, target);
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
    const np: Nameplate = { id, hostIp: client.ip, members: new Map([[HOST_PEER, client]]), nextPeer: 1, failures: 0, failuresBySource: new Map(), closed: false };
    this.nameplates.set(id, np);
    client.nameplate = np;
    client.peer = HOST_PEER;
    client.admitted = true;
    send(client, { t: 'opened', nameplate: id, peer: HOST_PEER });
  }

  private claim(client: Client, id: number, rejoin: boolean): void {
    if (client.nameplate !== undefined) throw new KiwiError('RENDEZVOUS_ALREADY_BOUND', 'This connection already belongs to a session.');
    const np = this.nameplates.get(id);
    if (np === undefined) {
      this.takeProbe(client);
      throw new KiwiError('NAMEPLATE_UNKNOWN', `No session has the number ${id}. Check the code with the host.`);
    }
    const l = this.limits;
    const fromSource = np.failuresBySource.get(client.source) ?? 0;
    if (!rejoin && fromSource >= l.maxFailedAttempts) {
      throw new KiwiError('NAMEPLATE_CLOSED', `Session ${id} takes no more members from this address (too many wrong codes). Ask the host for a new code.`);
    }
    if (!rejoin && np.closed) throw new KiwiError('NAMEPLATE_CLOSED', `Session ${id} takes no more members (too many wrong codes). Ask the host for a new code.`);
    if (np.members.size >= l.maxPeersPerNameplate || np.nextPeer > 0xffff) {
      throw new KiwiError('NAMEPLATE_FULL', `Session ${id} is full.`);
    }
    // Attempts in flight count against the failure budgets, so parallel guesses cannot exceed them.
    let pending = 0;
    let pendingFromSource = 0;
    for (const m of np.members.values()) {
      if (m.admitted || m.rejoin) continue;
      pending++;
      if (m.source === client.source) pendingFromSource++;
    }
    if (pendingFromSource >= l.maxPendingPerSource || (!rejoin && (pendingFromSource + fromSource >= l.maxFailedAttempts || pending + np.failures >= l.maxFailedAttemptsTotal))) {
      throw new KiwiError('NAMEPLATE_BUSY', `Session ${id} has too many attempts in progress; try again in a moment.`);
    }
    const peer = np.nextPeer++;
    client.nameplate = np;
    client.peer = peer;
    client.rejoin = rejoin;
    np.members.set(peer, client);
    send(client, { t: 'claimed', nameplate: id, peer });
    const host = np.members.get(HOST_PEER);
    if (host !== undefined) send(host, { t: 'peer-joined', peer, ...(rejoin ? { rejoin: true as const } : {}) });
  }

  /** Claims of nameplates that do not exist are the enumeration of sessions: a few, then slowly. */
  private takeProbe(client: Client): void {
    const l = this.limits;
    const now = this.now();
    const b = this.probes.get(client.source) ?? { tokens: l.unknownClaimBurst, refilledAt: now };
    b.tokens = Math.min(l.unknownClaimBurst, b.tokens + ((now - b.refilledAt) / 60_000) * l.unknownClaimsPerMinute);
    b.refilledAt = now;
    if (b.tokens < 1) {
      this.probes.set(client.source, b);
      throw new KiwiError('RENDEZVOUS_RATE_LIMITED', 'Too many claims of sessions that do not exist from this address; check the code and try again in a minute.');
    }
    b.tokens -= 1;
    this.probes.set(client.source, b);
    // Buckets that have refilled carry nothing worth keeping; the map stays bounded against many sources.
    if (this.probes.size > 10_000) {
      for (const [k, v] of this.probes) {
        const full = v.tokens + ((now - v.refilledAt) / 60_000) * l.unknownClaimsPerMinute >= l.unknownClaimBurst;
        if (full || this.probes.size > 10_000) this.probes.delete(k);
        if (this.probes.size <= 5_000) break;
      }
    }
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

  private countFailure(np: Nameplate, client: Client): void {
    np.failures++;
    np.failuresBySource.set(client.source, (np.failuresBySource.get(client.source) ?? 0) + 1);
    if (np.failures < this.limits.maxFailedAttemptsTotal || np.closed) return;
    np.closed = true;
    for (const m of [...np.members.values()]) {
      if (m.peer === HOST_PEER) {
        send(m, { t: 'nameplate-closed', reason: `${np.failures} failed attempts with a wrong code` });
      } else if (!m.admitted && !m.rejoin) {
        m.rejected = true;
        np.members.delete(m.peer);
        send(m, { t: 'nameplate-closed', reason: 'too many failed attempts' });
        m.conn.close(CloseCode.NAMEPLATE_CLOSED, 'nameplate closed');
      }
    }
  }

  private allocateNameplate(): number {
    // Three digits while they last (short to read aloud, too many to enumerate quickly), then four.
    for (const [low, count] of [[100, 900], [1000, 9000]] as const) {
      for (let i = 0; i < 64; i++) {
        const id = low + this.random(count);
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

/** IPv4 addresses as they are (also IPv4-mapped IPv6); IPv6 by its /64, which one machine usually has whole. */
export function sourceOf(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped !== null) return mapped[1] as string;
  if (!ip.includes(':')) return ip;
  const [head = '', tail = ''] = ip.toLowerCase().split('::');
  const h = head === '' ? [] : head.split(':');
  const t = tail === '' ? [] : tail.split(':');
  const groups = ip.includes('::') ? [...h, ...Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t] : h;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}

function send(client: Client, msg: ServerMessage): void {
  client.conn.sendText(JSON.stringify(msg));
}
