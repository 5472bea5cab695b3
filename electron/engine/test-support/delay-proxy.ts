// A userspace stand-in for `tc netem delay` (this kernel has no sch_netem): a TCP proxy that
// listens on an address and forwards every connection to a target, holding each chunk for a fixed
// one-way delay (plus optional uniform jitter) in both directions. Order is kept: a chunk never
// leaves before the one ahead of it, so jitter only stretches gaps, as netem does with a FIFO
// qdisc. A half-close (FIN) travels after the last chunk; an error or reset on one side destroys
// the other at once. Members advertise the proxy's URL (JoinOptions.advertise) so that a direct
// ring link goes through it; fault tests use setDelay() and cut() on a live link.
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { KiwiError } from '../errors.js';

export interface ProxyTarget {
  host: string;
  port: number;
}

export interface DelayProxyOptions {
  /** Where the proxy listens; default 127.0.0.1 on any free port. */
  host?: string;
  port?: number;
  /** Where connections go; a function is asked for each new connection (the target may start later). */
  target: ProxyTarget | (() => ProxyTarget | Promise<ProxyTarget>);
  /** One-way delay in ms, applied to each direction. */
  delayMs: number;
  /** Up to this many ms more per chunk, uniformly drawn (order is still kept). */
  jitterMs?: number;
  /** Bytes held per direction before the sender is paused (backpressure); default 16 MiB. */
  maxQueuedBytes?: number;
  /** The jitter's random source, [0, 1); default Math.random. */
  random?: () => number;
}

export interface DelayProxy {
  readonly host: string;
  readonly port: number;
  /** ws://host:port, what a member advertises. */
  readonly url: string;
  /** Connections open now. */
  readonly connections: number;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Changes the delay of chunks that arrive from now on. */
  setDelay(delayMs: number, jitterMs?: number): void;
  /** Destroys every open connection (a cut cable); the proxy keeps listening. */
  cut(): void;
  close(): Promise<void>;
}

const DEFAULT_MAX_QUEUED = 16 * 1024 * 1024;
/** How long before a chunk's due time the proxy stops sleeping on a timer and polls. */
const SPIN_MS = 2;

function checkDelay(delayMs: number, jitterMs: number): void {
  if (!Number.isFinite(delayMs) || delayMs < 0 || !Number.isFinite(jitterMs) || jitterMs < 0) {
    throw new KiwiError('USAGE', `A delay proxy needs a finite delay and jitter >= 0 ms, got ${delayMs} and ${jitterMs}.`);
  }
}

export async function startDelayProxy(opts: DelayProxyOptions): Promise<DelayProxy> {
  let delayMs = opts.delayMs;
  let jitterMs = opts.jitterMs ?? 0;
  checkDelay(delayMs, jitterMs);
  const random = opts.random ?? Math.random;
  const maxQueued = opts.maxQueuedBytes ?? DEFAULT_MAX_QUEUED;
  const sockets = new Set<Socket>();
  let accepted = 0;
  let open = 0;
  const holdMs = (): number => delayMs + (jitterMs > 0 ? random() * jitterMs : 0);

  // Half-open sockets: a FIN from one side must not end the other direction, whose chunks may still be held.
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    accepted++;
    open++;
    sockets.add(client);
    client.pause();
    let upstream: Socket | undefined;
    const destroyBoth = (): void => {
      client.destroy();
      upstream?.destroy();
    };
    client.on('error', destroyBoth);
    client.once('close', () => {
      sockets.delete(client);
      open--;
      // A close before its FIN arrived (reset, cut) ends the other side at once; after a FIN, the
      // delayed rest (and the FIN) still flows to the target.
      if (!client.readableEnded) upstream?.destroy();
    });
    void Promise.resolve()
      .then(() => (typeof opts.target === 'function' ? opts.target() : opts.target))
      .then(
        (target) => {
          if (client.destroyed) return;
          const up = connect({ host: target.host, port: target.port, allowHalfOpen: true });
          upstream = up;
          sockets.add(up);
          up.on('error', destroyBoth);
          up.once('close', () => {
            sockets.delete(up);
            if (!up.readableEnded) client.destroy();
          });
          up.once('connect', () => {
            // No Nagle on either side: the proxy adds its delay and nothing else (netem adds none).
            client.setNoDelay(true);
            up.setNoDelay(true);
            relay(client, up, holdMs, maxQueued);
            relay(up, client, holdMs, maxQueued);
            client.resume();
          });
        },
        () => client.destroy(),
      );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.address;
  return {
    host,
    port: address.port,
    url: `ws://${host.includes(':') ? `[${host}]` : host}:${address.port}`,
    get connections() {
      return open;
    },
    get accepted() {
      return accepted;
    },
    setDelay(ms: number, jitter = 0) {
      checkDelay(ms, jitter);
      delayMs = ms;
      jitterMs = jitter;
    },
    cut() {
      for (const s of sockets) s.destroy();
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Forwards `from` to `to`, each chunk (and the final FIN) no earlier than its hold time and never before the one ahead. */
function relay(from: Socket, to: Socket, holdMs: () => number, maxQueued: number): void {
  const queue: Array<{ dueAt: number; chunk: Buffer | null }> = [];
  let queuedBytes = 0;
  let lastDue = 0;
  /** Cancels the pending wake-up, when one is pending. */
  let timer: (() => void) | undefined;
  const flush = (): void => {
    timer = undefined;
    const now = performance.now();
    while (queue.length > 0 && queue[0]!.dueAt <= now) {
      const { chunk } = queue.shift()!;
      if (to.destroyed) return;
      if (chunk === null) {
        to.end();
        return;
      }
      queuedBytes -= chunk.length;
      to.write(chunk);
    }
    if (from.isPaused() && queuedBytes < maxQueued / 2 && !from.destroyed) from.resume();
    if (queue.length > 0) arm(queue[0]!.dueAt - now);
  };
  // A timer fires on the loop's millisecond clock, a millisecond or more late, and one that fires a
  // fraction early re-arms for at least 1 ms more: the last SPIN_MS are waited out on setImmediate,
  // so a chunk leaves within a fraction of a millisecond of its due time (netem's precision).
  const arm = (wait: number): void => {
    if (wait > SPIN_MS + 0.5) {
      const t = setTimeout(flush, wait - SPIN_MS);
      timer = () => clearTimeout(t);
    } else {
      const i = setImmediate(flush);
      timer = () => clearImmediate(i);
    }
  };
  const push = (chunk: Buffer | null): void => {
    // max() keeps the order when jitter draws a shorter hold than the chunk ahead got.
    lastDue = Math.max(performance.now() + holdMs(), lastDue);
    queue.push({ dueAt: lastDue, chunk });
    if (timer !== undefined) return;
    // Due now (a 0 ms delay): forwarded at once, not after a timer's 1 ms minimum.
    const wait = queue[0]!.dueAt - performance.now();
    if (wait <= 0) flush();
    else arm(wait);
  };
  from.on('data', (chunk: Buffer) => {
    queuedBytes += chunk.length;
    push(chunk);
    if (queuedBytes >= maxQueued) from.pause();
  });
  from.once('end', () => push(null));
  to.once('close', () => {
    timer?.();
    queue.length = 0;
  });
}
