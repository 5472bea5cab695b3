// A Link is a message-oriented, ordered, reliable byte pipe between two endpoints: in memory
// (tests), a direct WebSocket, or relayed through the rendezvous. Links know nothing of keys;
// secure-link.ts builds the authenticated, encrypted channel on top of any of them.
import { KiwiError } from '../errors.js';

/** direct: a WebSocket over TCP; direct-udp: a WebRTC data channel (ice-link.ts). */
export type LinkKind = 'memory' | 'direct' | 'direct-udp' | 'relayed';

export interface LinkClose {
  /** 'local' (we closed), 'remote' (the other end or the network closed), 'error'. */
  by: 'local' | 'remote' | 'error';
  reason: string;
  error?: KiwiError;
}

export interface Link {
  readonly kind: LinkKind;
  readonly closed: boolean;
  /** Queues bytes for the peer; throws LINK_CLOSED once the link is closed. */
  send(bytes: Uint8Array): void;
  /** The single consumer of incoming messages; messages that arrived earlier are delivered first. */
  onData(listener: (bytes: Uint8Array) => void): void;
  onClose(listener: (info: LinkClose) => void): void;
  close(reason?: string): void;
}

/** Messages held until a consumer attaches; past this a link is closed rather than grow without bound. */
const MAX_QUEUED_BYTES = 64 * 1024 * 1024;

export abstract class BaseLink implements Link {
  abstract readonly kind: LinkKind;
  private dataListener: ((bytes: Uint8Array) => void) | undefined;
  private closeListeners: Array<(info: LinkClose) => void> = [];
  private queue: Uint8Array[] = [];
  private queuedBytes = 0;
  private closeInfo: LinkClose | undefined;

  get closed(): boolean {
    return this.closeInfo !== undefined;
  }

  send(bytes: Uint8Array): void {
    if (this.closeInfo !== undefined) {
      throw new KiwiError('LINK_CLOSED', `The ${this.kind} link is closed (${this.closeInfo.reason}); reconnect to send again.`);
    }
    this.transmit(bytes);
  }

  onData(listener: (bytes: Uint8Array) => void): void {
    this.dataListener = listener;
    const queued = this.queue;
    this.queue = [];
    this.queuedBytes = 0;
    for (const m of queued) listener(m);
  }

  onClose(listener: (info: LinkClose) => void): void {
    if (this.closeInfo !== undefined) listener(this.closeInfo);
    else this.closeListeners.push(listener);
  }

  close(reason = 'closed'): void {
    if (this.closeInfo !== undefined) return;
    this.finish({ by: 'local', reason });
    this.shutdown(reason);
  }

  protected abstract transmit(bytes: Uint8Array): void;
  protected abstract shutdown(reason: string): void;

  /** Subclasses call this for each message from the peer. */
  protected deliver(bytes: Uint8Array): void {
    if (this.closeInfo !== undefined) return;
    if (this.dataListener !== undefined) {
      this.dataListener(bytes);
      return;
    }
    this.queuedBytes += bytes.length;
    if (this.queuedBytes > MAX_QUEUED_BYTES) {
      this.fail(new KiwiError('LINK_OVERFLOW', `More than ${MAX_QUEUED_BYTES} bytes arrived before anyone read them; the link is closed.`));
      return;
    }
    this.queue.push(bytes);
  }

  /** Subclasses call this when the transport closed underneath. */
  protected finish(info: LinkClose): void {
    if (this.closeInfo !== undefined) return;
    this.closeInfo = info;
    this.queue = [];
    const listeners = this.closeListeners;
    this.closeListeners = [];
    for (const l of listeners) l(info);
  }

  /** Closes the link because of an error detected locally. */
  fail(error: KiwiError): void {
    if (this.closeInfo !== undefined) return;
    this.finish({ by: 'error', reason: error.message, error });
    this.shutdown(error.code);
  }
}

class MemoryLink extends BaseLink {
  readonly kind = 'memory' as const;
  peer: MemoryLink | undefined;

  protected transmit(bytes: Uint8Array): void {
    const peer = this.peer;
    // Copy, as a network would, and deliver asynchronously so neither side re-enters the other.
    const copy = bytes.slice();
    setImmediate(() => peer?.receive(copy));
  }

  protected shutdown(reason: string): void {
    const peer = this.peer;
    setImmediate(() => peer?.remoteClosed(reason));
  }

  receive(bytes: Uint8Array): void {
    this.deliver(bytes);
  }

  remoteClosed(reason: string): void {
    this.finish({ by: 'remote', reason });
  }
}

/** Two connected in-memory links (the in-memory transport of the compliance suite). */
export function createMemoryLinkPair(): [Link, Link] {
  const a = new MemoryLink();
  const b = new MemoryLink();
  a.peer = b;
  b.peer = a;
  return [a, b];
}
