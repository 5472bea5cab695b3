// An authenticated, encrypted channel over any Link (memory, direct, relayed). The handshake
// swaps fresh nonces in HELLO frames, derives per-direction keys from the shared secret
// (secure-channel.ts) and proves both sides hold it with a sealed HELLO, so a peer with the wrong
// key fails with LINK_AUTH_FAILED before any data moves. Afterwards it answers PINGs (RTT
// probes) and turns every protocol violation into a close that carries its error code.
//
// HELLO payload: version u8 (1) | encrypted u8 (0/1) | linkId length u8 (0..64) | linkId | nonce (32)
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { isKiwiError, KiwiError } from '../errors.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodeFrame, FrameDecoder, FrameFlags, FrameType, type Frame } from './frame-codec.js';
import type { Link, LinkClose, LinkKind } from './link.js';
import { deriveChannelKeys, SecureChannel, type LinkRole } from './secure-channel.js';

const HELLO_VERSION = 1;
const NONCE_BYTES = 32;
const MAX_LINK_ID_BYTES = 64;
const CONFIRM = new TextEncoder().encode('kiwi link confirm v1');
const MAX_PENDING_PINGS = 16;
/** The most padding a PING may carry: a padded PING times how fast the link carries bulk bytes. */
export const MAX_PING_PADDING_BYTES = 1024 * 1024;
const PING_ID_BYTES = 8;

export interface LinkSecret {
  secret: Uint8Array;
  /** Binds the keys to this link's purpose, e.g. 'control|42|3'; both sides must agree. */
  context: string;
}

export interface SecureLinkOptions {
  role: LinkRole;
  /** The initiator's secret; a responder may instead resolve it from the initiator's link id. */
  secret?: LinkSecret;
  /** Sent by the initiator so a listener that serves many links can find the secret. */
  linkId?: Uint8Array;
  resolveSecret?: (linkId: Uint8Array) => LinkSecret | undefined;
  /** false only for benchmarks of the raw path; both sides must agree. */
  encrypt?: boolean;
  maxPayloadBytes?: number;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export class SecureLink {
  private readonly decoder: FrameDecoder;
  private messageListener: ((bytes: Uint8Array) => void) | undefined;
  private readonly early: Uint8Array[] = [];
  private readonly pings = new Map<string, { started: number; resolve(rttMs: number): void; reject(err: Error): void; timer: NodeJS.Timeout }>();
  private closeInfo: LinkClose | undefined;
  private readonly closeListeners: Array<(info: LinkClose) => void> = [];

  /** Use openSecureLink. */
  constructor(
    private readonly link: Link,
    private readonly channel: SecureChannel | undefined,
    decoder: FrameDecoder,
    private readonly maxPayloadBytes: number,
    pending: Frame[] = [],
  ) {
    this.decoder = decoder;
    link.onClose((info) => this.finished(info));
    link.onData((bytes) => this.receive(bytes));
    this.receiveFrames(pending);
  }

  get kind(): LinkKind {
    return this.link.kind;
  }

  get encrypted(): boolean {
    return this.channel !== undefined;
  }

  get closed(): boolean {
    return this.closeInfo !== undefined;
  }

  send(payload: Uint8Array): void {
    this.link.send(this.frame(FrameType.DATA, payload));
  }

  onMessage(listener: (payload: Uint8Array) => void): void {
    this.messageListener = listener;
    for (const m of this.early.splice(0)) listener(m);
  }

  onClose(listener: (info: LinkClose) => void): void {
    if (this.closeInfo !== undefined) listener(this.closeInfo);
    else this.closeListeners.push(listener);
  }

  /**
   * One round trip of a PING, in milliseconds. With `paddingBytes` the PING carries that many more
   * bytes (its PONG only the id), so the time beyond the bare round trip is the padding's transfer.
   */
  ping(timeoutMs = 5000, paddingBytes = 0): Promise<number> {
    if (!(Number.isInteger(paddingBytes) && paddingBytes >= 0 && paddingBytes <= MAX_PING_PADDING_BYTES)) {
      return Promise.reject(new KiwiError('USAGE', `PING padding must be 0 to ${MAX_PING_PADDING_BYTES} bytes.`));
    }
    if (this.pings.size >= MAX_PENDING_PINGS) return Promise.reject(new KiwiError('LINK_BUSY', 'Too many RTT probes are outstanding on this link.'));
    const id = randomBytes(8);
    const key = id.toString('hex');
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pings.delete(key);
        reject(new KiwiError('LINK_TIMEOUT', `No answer to an RTT probe within ${timeoutMs} ms; the link may be down.`));
      }, timeoutMs);
      this.pings.set(key, { started: performance.now(), resolve, reject, timer });
      try {
        this.link.send(this.frame(FrameType.PING, paddingBytes > 0 ? Buffer.concat([id, Buffer.alloc(paddingBytes)]) : id));
      } catch (err) {
        clearTimeout(timer);
        this.pings.delete(key);
        reject(err as Error);
      }
    });
  }

  close(reason = 'closed'): void {
    if (this.closeInfo !== undefined || this.link.closed) {
      this.link.close(reason);
      return;
    }
    try {
      this.link.send(this.frame(FrameType.CLOSE, new TextEncoder().encode(reason.slice(0, 200))));
    } finally {
      this.link.close(reason);
    }
  }

  /** Ends the link because of what the peer sent: an ERROR frame tells it why, then the link closes. */
  fail(error: KiwiError): void {
    if (this.closeInfo === undefined && !this.link.closed) this.abort(error);
  }

  private frame(type: FrameType, payload: Uint8Array): Uint8Array {
    return this.channel !== undefined ? this.channel.seal(type, payload) : encodeFrame({ type, flags: 0, payload }, this.maxPayloadBytes);
  }

  private receive(bytes: Uint8Array): void {
    if (this.closeInfo !== undefined) return;
    let frames: Frame[];
    try {
      frames = this.decoder.push(bytes);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.abort(err);
      return;
    }
    this.receiveFrames(frames);
  }

  private receiveFrames(frames: Frame[]): void {
    try {
      for (const frame of frames) {
        if (this.closeInfo !== undefined) return;
        this.handle(frame);
      }
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.abort(err);
    }
  }

  private handle(frame: Frame): void {
    if (frame.type === FrameType.ERROR && (frame.flags & FrameFlags.SEALED) === 0) {
      // Error notices travel in the clear (abort() may run when the keys are in doubt). Accepting
      // one unauthenticated only lets an on-path attacker close the link, which it can anyway.
      const text = new TextDecoder().decode(frame.payload.subarray(0, 500));
      this.finished({ by: 'error', reason: `peer reported: ${text}`, error: new KiwiError('LINK_PEER_ERROR', `The peer closed the link: ${text}`) });
      this.link.close('peer error');
      return;
    }
    let payload: Uint8Array;
    if (this.channel !== undefined) payload = this.channel.open(frame);
    else if ((frame.flags & FrameFlags.SEALED) !== 0) throw new KiwiError('LINK_PROTOCOL_VIOLATION', 'The peer sent a sealed frame on an unencrypted link.');
    else payload = frame.payload;
    switch (frame.type) {
      case FrameType.DATA:
        if (this.messageListener !== undefined) this.messageListener(payload);
        else this.early.push(payload);
        return;
      case FrameType.PING:
        if (payload.length < PING_ID_BYTES || payload.length > PING_ID_BYTES + MAX_PING_PADDING_BYTES) {
          throw new KiwiError('LINK_PROTOCOL_VIOLATION', `A PING must carry an 8-byte id and at most ${MAX_PING_PADDING_BYTES} bytes of padding.`);
        }
        this.link.send(this.frame(FrameType.PONG, payload.subarray(0, PING_ID_BYTES)));
        return;
      case FrameType.PONG: {
        const key = Buffer.from(payload).toString('hex');
        const pending = this.pings.get(key);
        if (pending === undefined) throw new KiwiError('LINK_PROTOCOL_VIOLATION', 'The peer answered a PING that was never sent.');
        this.pings.delete(key);
        clearTimeout(pending.timer);
        pending.resolve(performance.now() - pending.started);
        return;
      }
      case FrameType.CLOSE:
        this.link.close(`peer closed: ${new TextDecoder().decode(payload)}`);
        return;
      default:
        throw new KiwiError('LINK_PROTOCOL_VIOLATION', `Frame type ${frame.type} is not allowed after the handshake.`);
    }
  }

  private abort(error: KiwiError): void {
    try {
      // Tell the peer why (in the clear: the code and message carry no secrets).
      this.link.send(encodeFrame({ type: FrameType.ERROR, flags: 0, payload: new TextEncoder().encode(`${error.code}: ${error.message}`.slice(0, 500)) }));
    } catch (sendErr) {
      if (!isKiwiError(sendErr, 'LINK_CLOSED')) throw sendErr;
    }
    this.finished({ by: 'error', reason: error.message, error });
    this.link.close(error.code);
  }

  private finished(info: LinkClose): void {
    if (this.closeInfo !== undefined) return;
    this.closeInfo = info;
    const err = info.error ?? new KiwiError('LINK_CLOSED', `The ${this.link.kind} link closed (${info.reason}).`);
    for (const p of this.pings.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pings.clear();
    for (const l of this.closeListeners.splice(0)) l(info);
  }
}

/** Runs the handshake over `link` and resolves once both sides proved they hold the secret. */
export async function openSecureLink(link: Link, opts: SecureLinkOptions): Promise<SecureLink> {
  const maxPayloadBytes = opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const encrypt = opts.encrypt ?? true;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const linkId = opts.linkId ?? new Uint8Array(0);
  if (linkId.length > MAX_LINK_ID_BYTES) throw new Error('link id too long');
  if (opts.role === 'initiator' && encrypt && opts.secret === undefined) throw new Error('the initiator needs the secret');
  const decoder = new FrameDecoder(maxPayloadBytes);
  const nonce = randomBytes(NONCE_BYTES);

  return new Promise<SecureLink>((resolve, reject) => {
    let channel: SecureChannel | undefined;
    let stage: 'hello' | 'confirm' | 'done' = 'hello';
    const fail = (err: Error): void => {
      if (stage === 'done') return;
      stage = 'done';
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      link.close(isKiwiError(err) ? err.code : 'handshake failed');
      reject(err);
    };
    const timer = setTimeout(() => fail(new KiwiError('LINK_TIMEOUT', `The link handshake did not finish within ${timeoutMs} ms.`)), timeoutMs);
    const onAbort = (): void => fail((opts.signal?.reason as Error | undefined) ?? new Error('aborted'));
    opts.signal?.addEventListener('abort', onAbort, { once: true });

    const sendHello = (id: Uint8Array): void => {
      const payload = new Uint8Array(3 + id.length + NONCE_BYTES);
      payload[0] = HELLO_VERSION;
      payload[1] = encrypt ? 1 : 0;
      payload[2] = id.length;
      payload.set(id, 3);
      payload.set(nonce, 3 + id.length);
      link.send(encodeFrame({ type: FrameType.HELLO, flags: 0, payload }));
    };

    const onHello = (frame: Frame): void => {
      if (frame.type !== FrameType.HELLO || frame.flags !== 0) throw new KiwiError('LINK_HANDSHAKE_FAILED', 'The peer did not start with a HELLO.');
      const hello = parseHello(frame.payload);
      if (hello.encrypted !== encrypt) {
        throw new KiwiError('LINK_HANDSHAKE_FAILED', `One side wants an ${encrypt ? 'encrypted' : 'unencrypted'} link and the other does not.`);
      }
      let secret = opts.secret;
      if (opts.role === 'responder') {
        if (secret === undefined && opts.resolveSecret !== undefined) secret = opts.resolveSecret(hello.linkId);
        if (encrypt && secret === undefined) throw new KiwiError('LINK_UNKNOWN', 'The peer asked for a link this member does not know about.');
        sendHello(new Uint8Array(0));
      }
      if (!encrypt) {
        stage = 'done';
        return;
      }
      const s = secret as LinkSecret;
      const [ni, nr] = opts.role === 'initiator' ? [nonce, hello.nonce] : [hello.nonce, nonce];
      channel = new SecureChannel(deriveChannelKeys(s.secret, opts.role, ni, nr, s.context), maxPayloadBytes);
      link.send(channel.seal(FrameType.HELLO, CONFIRM));
      stage = 'confirm';
    };

    const onConfirm = (frame: Frame): void => {
      const c = channel as SecureChannel;
      let plain: Uint8Array;
      try {
        plain = c.open(frame);
      } catch (err) {
        if (isKiwiError(err, 'CHANNEL_AUTH_FAILED') || isKiwiError(err, 'CHANNEL_NOT_SEALED')) {
          throw new KiwiError('LINK_AUTH_FAILED', 'The peer does not hold this session\'s key; the link was refused.');
        }
        throw err;
      }
      if (frame.type !== FrameType.HELLO || Buffer.compare(plain, CONFIRM) !== 0) {
        throw new KiwiError('LINK_HANDSHAKE_FAILED', 'The peer\'s key confirmation is malformed.');
      }
      stage = 'done';
    };

    let leftover: Frame[] = [];
    const complete = (ch: SecureChannel | undefined): void => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      resolve(new SecureLink(link, ch, decoder, maxPayloadBytes, leftover));
    };

    link.onClose((info) => fail(info.error ?? new KiwiError('LINK_CLOSED', `The link closed during the handshake (${info.reason}).`)));
    link.onData((bytes) => {
      try {
        const frames = decoder.push(bytes);
        for (let i = 0; i < frames.length; i++) {
          const frame = frames[i] as Frame;
          if (stage === 'hello') onHello(frame);
          else onConfirm(frame);
          if ((stage as string) === 'done') {
            // Frames that came in the same chunk as the handshake's last one belong to the link.
            leftover = frames.slice(i + 1);
            complete(channel);
            return;
          }
        }
      } catch (err) {
        fail(err as Error);
      }
    });
    if (opts.role === 'initiator') {
      try {
        sendHello(linkId);
      } catch (err) {
        fail(err as Error);
      }
    }
  });
}

function parseHello(p: Uint8Array): { encrypted: boolean; linkId: Uint8Array; nonce: Uint8Array } {
  if (p.length < 3 || p[0] !== HELLO_VERSION) throw new KiwiError('LINK_HANDSHAKE_FAILED', 'The peer speaks another link handshake version.');
  const idLength = p[2] as number;
  if (p[1] !== 0 && p[1] !== 1) throw new KiwiError('LINK_HANDSHAKE_FAILED', 'The HELLO has a bad encryption flag.');
  if (idLength > MAX_LINK_ID_BYTES || p.length !== 3 + idLength + NONCE_BYTES) throw new KiwiError('LINK_HANDSHAKE_FAILED', 'The HELLO has the wrong length.');
  return { encrypted: p[1] === 1, linkId: p.slice(3, 3 + idLength), nonce: p.slice(3 + idLength) };
}
