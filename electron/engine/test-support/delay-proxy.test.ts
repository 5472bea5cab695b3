import { randomBytes } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openSecureLink } from '../transport/secure-link.js';
import { dialDirect, listenDirect, type WsLink } from '../transport/ws.js';
import { startDelayProxy, type DelayProxy } from './delay-proxy.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A TCP server on loopback; `onSocket` handles each connection. */
async function tcpServer(onSocket: (s: Socket) => void): Promise<{ port: number }> {
  const server: Server = createServer({ allowHalfOpen: true }, onSocket);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  const sockets = new Set<Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  cleanups.push(() => {
    for (const s of sockets) s.destroy();
  });
  return { port: (server.address() as AddressInfo).port };
}

const echo = (s: Socket): void => {
  s.on('data', (d) => s.write(d));
  s.on('end', () => s.end());
  s.on('error', () => undefined);
};

async function proxyTo(port: number, delayMs: number, extra: Partial<Parameters<typeof startDelayProxy>[0]> = {}): Promise<DelayProxy> {
  const proxy = await startDelayProxy({ target: { host: '127.0.0.1', port }, delayMs, ...extra });
  cleanups.push(() => proxy.close());
  return proxy;
}

function dial(proxy: DelayProxy): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: proxy.host, port: proxy.port, allowHalfOpen: true }, () => resolve(s));
    s.once('error', reject);
    cleanups.push(() => void s.destroy());
  });
}

/** Everything the socket receives until its FIN. */
function readAll(s: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  s.on('data', (d: Buffer) => chunks.push(d));
  return new Promise((resolve, reject) => {
    s.once('end', () => resolve(Buffer.concat(chunks)));
    s.once('error', reject);
  });
}

describe('delay proxy', () => {
  it('holds each direction for at least the one-way delay (a round trip takes two)', async () => {
    const { port } = await tcpServer(echo);
    const proxy = await proxyTo(port, 40);
    const s = await dial(proxy);
    const got = new Promise<number>((resolve) => s.once('data', () => resolve(performance.now())));
    const t0 = performance.now();
    s.write('ping');
    // Timers may fire up to ~1 ms early relative to performance.now(); a lower bound cannot flake under load.
    expect((await got) - t0).toBeGreaterThanOrEqual(2 * 40 - 2);
  });

  it('keeps the byte stream intact and in order under jitter, through a half-close', async () => {
    const { port } = await tcpServer(echo);
    let seed = 7;
    const random = (): number => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const proxy = await proxyTo(port, 2, { jitterMs: 15, random });
    const s = await dial(proxy);
    const received = readAll(s);
    const sent: Buffer[] = [];
    for (let i = 0; i < 60; i++) {
      const chunk = randomBytes(1 + ((i * 977) % 5000));
      sent.push(chunk);
      s.write(chunk);
      if (i % 10 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    // The FIN follows the held chunks: the echo answers everything, then ends.
    s.end();
    expect((await received).equals(Buffer.concat(sent))).toBe(true);
  });

  it('delivers a reply that the target writes after the client half-closed', async () => {
    const { port } = await tcpServer((sock) => {
      let n = 0;
      sock.on('data', (d: Buffer) => (n += d.length));
      sock.on('end', () => sock.end(`got ${n}`));
    });
    const proxy = await proxyTo(port, 20);
    const s = await dial(proxy);
    const reply = readAll(s);
    s.end(Buffer.alloc(100_000, 1));
    expect((await reply).toString()).toBe('got 100000');
  });

  it('pauses a fast sender instead of holding unbounded bytes, and still delivers them all', async () => {
    let total = 0;
    const done = new Promise<number>((resolve) => {
      void tcpServer((sock) => {
        sock.on('data', (d: Buffer) => (total += d.length));
        sock.on('end', () => {
          resolve(total);
          sock.end();
        });
      }).then(async ({ port }) => {
        const proxy = await proxyTo(port, 5, { maxQueuedBytes: 64 * 1024 });
        const s = await dial(proxy);
        s.on('data', () => undefined);
        s.end(Buffer.alloc(4 * 1024 * 1024, 3));
      });
    });
    expect(await done).toBe(4 * 1024 * 1024);
  });

  it('asks a target function per connection, and closes the client when the target is unreachable', async () => {
    const { port } = await tcpServer(echo);
    let asked = 0;
    const proxy = await startDelayProxy({ target: () => ({ host: '127.0.0.1', port: asked++ === 0 ? port : 1 }), delayMs: 0 });
    cleanups.push(() => proxy.close());
    const ok = await dial(proxy);
    const echoed = new Promise<string>((r) => ok.once('data', (d: Buffer) => r(d.toString())));
    ok.write('hello');
    expect(await echoed).toBe('hello');
    const bad = await dial(proxy);
    // The proxy hangs up (the client is half-open, so it sees the FIN as 'end').
    await new Promise<void>((r) => bad.once('end', () => r()).resume());
    expect(proxy.accepted).toBe(2);
  });

  it('cut() drops live connections and keeps accepting new ones', async () => {
    const { port } = await tcpServer(echo);
    const proxy = await proxyTo(port, 1);
    const s = await dial(proxy);
    await new Promise<void>((r) => {
      s.once('data', () => r());
      s.write('x');
    });
    expect(proxy.connections).toBe(1);
    const closed = new Promise<void>((r) => s.once('end', () => r()));
    s.on('error', () => undefined);
    proxy.cut();
    await closed;
    // The proxy counts a connection gone on its socket's 'close', which may trail the client's FIN by a tick.
    for (let i = 0; i < 100 && proxy.connections > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(proxy.connections).toBe(0);
    const again = await dial(proxy);
    const echoed = new Promise<string>((r) => again.once('data', (d: Buffer) => r(d.toString())));
    again.write('back');
    expect(await echoed).toBe('back');
  });

  it('carries an encrypted ring link (WebSocket + secure-link) the way a member advertises it', async () => {
    const secret = { secret: randomBytes(32), context: 'proxy-test' };
    const accepted = new Promise<WsLink>((resolve) => {
      void listenDirect({ host: '127.0.0.1', maxPayloadBytes: 1 << 20, onLink: (link) => resolve(link) }).then(async (listener) => {
        cleanups.push(() => listener.close());
        const proxy = await proxyTo(listener.port, 10);
        const initiator = await dialDirect(proxy.url, { maxPayloadBytes: 1 << 20, timeoutMs: 2000 });
        cleanups.push(() => initiator.close());
        const sa = await openSecureLink(initiator, { role: 'initiator', secret, timeoutMs: 5000 });
        const rtt = await sa.ping();
        expect(rtt).toBeGreaterThanOrEqual(2 * 10 - 2);
        sa.send(Uint8Array.of(1, 2, 3));
      });
    });
    const sb = await openSecureLink(await accepted, { role: 'responder', secret, timeoutMs: 5000 });
    const msg = await new Promise<Uint8Array>((r) => sb.onMessage(r));
    expect([...msg]).toEqual([1, 2, 3]);
  });

  it('refuses a negative or non-finite delay with a clear error', async () => {
    await expect(startDelayProxy({ target: { host: '127.0.0.1', port: 1 }, delayMs: -1 })).rejects.toSatisfy((e) => isKiwiError(e, 'USAGE'));
    const proxy = await proxyTo(1, 0);
    expect(() => proxy.setDelay(Number.NaN)).toThrow(/finite delay/);
  });
});
