// The one module that imports `node-datachannel` (libdatachannel: ICE, STUN/TURN, DTLS, SCTP): a
// WebRTC data channel reduced to a Link of kind 'direct-udp'. Signaling (the SDP offer/answer and
// ICE candidates) is the caller's: IcePeer hands out IceSignals to carry to the other side and
// takes the other side's in. DTLS is only the transport here; secure-link.ts still authenticates
// and encrypts every frame with the session's keys.
//
// A data channel carries messages up to its SCTP limit (256 KiB by default), Links carry up to the
// frame limit (16 MiB), so each message travels as chunks: flag u8 (0: more follows, 1: last) |
// bytes. The channel is ordered and reliable, so chunks arrive in order.
import { initLogger, PeerConnection, type DataChannel } from 'node-datachannel';
import { KiwiError } from '../errors.js';
import { MAX_CANDIDATE_CHARS, MAX_MID_CHARS, MAX_SDP_CHARS, type IceSignal } from './ice-signal.js';
import { BaseLink } from './link.js';

export type { IceSignal } from './ice-signal.js';

// KIWI_ICE_DEBUG=1: libdatachannel's own log (candidates, checks, DTLS) on stderr, for NAT trouble.
if (process.env.KIWI_ICE_DEBUG === '1') initLogger('Debug', (level, message) => void process.stderr.write(`libdatachannel ${level}: ${message}\n`));

/** Remote candidates one peer may send for one link; more are ignored. */
const MAX_REMOTE_CANDIDATES = 64;
const CHUNK_BYTES = 64 * 1024;
const CHUNK_MORE = 0;
const CHUNK_LAST = 1;

export interface IcePeerOptions {
  role: 'initiator' | 'responder';
  /** STUN/TURN servers: 'stun:host:port', 'turn:user:pass@host:port'. Empty: host candidates only. */
  iceServers?: readonly string[];
  /** Delivers a signal to the other side (through the session's encrypted control channel). */
  sendSignal(signal: IceSignal): void;
  /** Gives up (ICE_FAILED) when the data channel is not open by then. */
  timeoutMs?: number;
  /** Largest message the link accepts; a longer reassembly closes it (LINK_OVERFLOW). */
  maxMessageBytes: number;
  /** Gather candidates on this address only (tests, a chosen interface). */
  bindAddress?: string;
  /** UDP ports to gather on. */
  portRange?: { begin: number; end: number };
}

export interface IceRoute {
  local: { address: string; port: number; type: string };
  remote: { address: string; port: number; type: string };
}

/** One side of an ICE connection attempt; `link` resolves once the data channel is open. */
export class IcePeer {
  readonly link: Promise<IceLink>;
  private readonly pc: PeerConnection;
  private remoteSet = false;
  private readonly early: Array<{ candidate: string; mid: string }> = [];
  private readonly heldCandidates: IceSignal[] = [];
  private remoteCandidates = 0;
  private settled = false;
  private rejectLink!: (err: KiwiError) => void;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: IcePeerOptions) {
    this.pc = new PeerConnection(`kiwi-${opts.role}`, {
      iceServers: [...(opts.iceServers ?? [])],
      ...(opts.bindAddress !== undefined ? { bindAddress: opts.bindAddress } : {}),
      ...(opts.portRange !== undefined ? { portRangeBegin: opts.portRange.begin, portRangeEnd: opts.portRange.end } : {}),
    });
    const pc = this.pc;
    this.link = new Promise<IceLink>((resolve, reject) => {
      this.rejectLink = reject;
      const opened = (dc: DataChannel): void => {
        if (this.settled) {
          dc.close();
          return;
        }
        this.settled = true;
        clearTimeout(this.timer);
        resolve(new IceLink(pc, dc, opts.maxMessageBytes));
      };
      pc.onLocalDescription((sdp, type) => {
        // Candidates travel only as trickled signals (held by the initiator, below), never inside the offer.
        if (type === 'offer') this.send({ kind: type, sdp: sdp.split(/\r?\n/).filter((l) => !/^a=(candidate|end-of-candidates)/.test(l)).join('\r\n') });
        else if (type === 'answer') this.send({ kind: type, sdp });
      });
      pc.onLocalCandidate((candidate, mid) => {
        // The initiator holds its candidates until the answer is in: otherwise the responder's
        // checks (direct, fast) can reach it before the answer (through the host, slower), and
        // DTLS would run before it knows the responder's certificate fingerprint.
        if (opts.role === 'initiator' && !this.remoteSet) this.heldCandidates.push({ kind: 'candidate', candidate, mid });
        else this.send({ kind: 'candidate', candidate, mid });
      });
      pc.onStateChange((state) => {
        if (state === 'failed' || state === 'closed') this.fail(new KiwiError('ICE_FAILED', `The ICE connection ${state} before its data channel opened (no UDP path between the two members).`));
      });
      if (opts.role === 'initiator') {
        const dc = pc.createDataChannel('kiwi');
        dc.onOpen(() => opened(dc));
      } else {
        pc.onDataChannel((dc) => {
          if (dc.isOpen()) opened(dc);
          else dc.onOpen(() => opened(dc));
        });
      }
    });
    this.link.catch(() => undefined);
    const timeoutMs = opts.timeoutMs ?? 8000;
    this.timer = setTimeout(() => this.fail(new KiwiError('ICE_FAILED', `No UDP path opened within ${timeoutMs} ms.`)), timeoutMs);
  }

  /** Takes in a signal from the other side; malformed or unexpected ones fail the attempt. */
  signal(s: IceSignal): void {
    if (this.settled && s.kind !== 'candidate') return;
    try {
      switch (s.kind) {
        case 'unavailable':
          this.fail(new KiwiError('ICE_UNAVAILABLE', 'The other member does not take ICE links.'));
          return;
        case 'offer':
        case 'answer': {
          if (s.sdp.length > MAX_SDP_CHARS) throw new KiwiError('ICE_FAILED', 'The peer\'s session description is too long.');
          const expected = this.opts.role === 'initiator' ? 'answer' : 'offer';
          if (s.kind !== expected || this.remoteSet) throw new KiwiError('ICE_FAILED', `An ${this.opts.role} does not take a second description or an ${s.kind}.`);
          this.pc.setRemoteDescription(s.sdp, s.kind);
          this.remoteSet = true;
          for (const c of this.early.splice(0)) this.pc.addRemoteCandidate(c.candidate, c.mid);
          for (const c of this.heldCandidates.splice(0)) this.send(c);
          return;
        }
        case 'candidate':
          if (s.candidate.length > MAX_CANDIDATE_CHARS || s.mid.length > MAX_MID_CHARS) throw new KiwiError('ICE_FAILED', 'The peer\'s ICE candidate is too long.');
          if (++this.remoteCandidates > MAX_REMOTE_CANDIDATES || this.settled) return;
          if (this.remoteSet) this.pc.addRemoteCandidate(s.candidate, s.mid);
          else this.early.push({ candidate: s.candidate, mid: s.mid });
          return;
      }
    } catch (err) {
      // libdatachannel throws plain Errors on descriptions and candidates it cannot parse.
      this.fail(err instanceof KiwiError ? err : new KiwiError('ICE_FAILED', `The peer sent an unusable ICE signal: ${(err as Error).message}.`));
    }
  }

  /** Abandons the attempt (a link that already opened is the caller's to close). */
  close(): void {
    this.fail(new KiwiError('ICE_FAILED', 'The ICE attempt was abandoned.'));
  }

  private send(s: IceSignal): void {
    if (!this.settled) this.opts.sendSignal(s);
  }

  private fail(err: KiwiError): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.pc.close();
    this.rejectLink(err);
  }
}

/** A direct UDP link: a reliable, ordered data channel; messages travel as chunks. */
export class IceLink extends BaseLink {
  readonly kind = 'direct-udp' as const;
  private parts: Buffer[] = [];
  private partBytes = 0;
  private readonly chunkBytes: number;
  private readonly settledWaiters: Array<() => void> = [];

  constructor(private readonly pc: PeerConnection, private readonly dc: DataChannel, private readonly maxMessageBytes: number) {
    super();
    this.chunkBytes = Math.max(1024, Math.min(CHUNK_BYTES, dc.maxMessageSize() || CHUNK_BYTES)) - 1;
    dc.onMessage((msg) => this.receive(msg));
    dc.onClosed(() => this.remoteGone('data channel closed'));
    dc.onError((err) => this.remoteGone(`data channel error: ${err}`));
    pc.onStateChange((state) => {
      if (state === 'disconnected' || state === 'failed' || state === 'closed') this.remoteGone(`ICE connection ${state}`);
    });
    pc.onIceStateChange((state) => {
      if (state === 'completed') for (const settled of this.settledWaiters.splice(0)) settled();
    });
  }

  /**
   * The pair ICE settles on. libjuice selects the best pair that has answered so far (the channel
   * opens on the first one) and nominates it once no better pair answered for a while (about 2 s),
   * so `route()` at open can still be a lower-ranked pair. Resolves once ICE has nominated a pair
   * ('completed'), or with the pair selected at `timeoutMs` or when the link closes first.
   */
  settledRoute(timeoutMs = 5000): Promise<IceRoute | undefined> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        clearTimeout(timer);
        resolve(this.closed ? undefined : this.route());
      };
      if (this.closed || this.pc.iceState() === 'completed') return done();
      timer = setTimeout(done, timeoutMs);
      this.settledWaiters.push(done);
      this.onClose(done);
    });
  }

  /** The candidate pair the link runs over (host/srflx/relay, addresses), when libdatachannel knows it. */
  route(): IceRoute | undefined {
    const p = this.pc.getSelectedCandidatePair();
    if (p === null) return undefined;
    const side = (c: { address: string; port: number; type: string }): IceRoute['local'] => ({ address: c.address, port: c.port, type: c.type });
    return { local: side(p.local), remote: side(p.remote) };
  }

  get bufferedAmount(): number {
    return this.closed ? 0 : this.dc.bufferedAmount();
  }

  protected transmit(bytes: Uint8Array): void {
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let offset = 0;
    do {
      const end = Math.min(buf.length, offset + this.chunkBytes);
      const chunk = Buffer.allocUnsafe(1 + end - offset);
      chunk[0] = end === buf.length ? CHUNK_LAST : CHUNK_MORE;
      buf.copy(chunk, 1, offset, end);
      try {
        this.dc.sendMessageBinary(chunk);
      } catch (err) {
        this.fail(new KiwiError('LINK_CLOSED', `The data channel refused a message: ${(err as Error).message}.`));
        return;
      }
      offset = end;
    } while (offset < buf.length);
  }

  protected shutdown(): void {
    this.parts = [];
    try {
      this.dc.close();
    } finally {
      this.pc.close();
    }
  }

  private receive(msg: string | Buffer | ArrayBuffer): void {
    if (this.closed) return;
    if (typeof msg === 'string') {
      this.fail(new KiwiError('LINK_PROTOCOL_VIOLATION', 'The peer sent a text message on a binary link.'));
      return;
    }
    const chunk = Buffer.isBuffer(msg) ? msg : Buffer.from(msg);
    const flag = chunk[0];
    if (chunk.length < 1 || (flag !== CHUNK_MORE && flag !== CHUNK_LAST)) {
      this.fail(new KiwiError('LINK_PROTOCOL_VIOLATION', 'The peer sent a malformed chunk on a data channel.'));
      return;
    }
    this.partBytes += chunk.length - 1;
    if (this.partBytes > this.maxMessageBytes) {
      this.fail(new KiwiError('LINK_OVERFLOW', `A message over ${this.maxMessageBytes} bytes arrived on a data channel; the link is closed.`));
      return;
    }
    this.parts.push(chunk.subarray(1));
    if (flag === CHUNK_MORE) return;
    const whole = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts, this.partBytes);
    this.parts = [];
    this.partBytes = 0;
    this.deliver(new Uint8Array(whole.buffer, whole.byteOffset, whole.byteLength));
  }

  private remoteGone(reason: string): void {
    if (this.closed) return;
    this.finish({ by: 'remote', reason });
    this.pc.close();
  }
}
