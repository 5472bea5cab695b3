// The one module that imports `ws`: a WebSocket server and client reduced to what Kiwi uses
// (text and binary messages, a payload limit enforced by ws before buffering, close), plus the
// direct Link over a WebSocket. The rendezvous and the direct links both go through here.
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import type { AddressInfo } from 'node:net';
import { KiwiError } from '../errors.js';
import { BaseLink } from './link.js';

export interface WsConnection {
  readonly remoteAddress: string;
  readonly bufferedAmount: number;
  sendText(text: string): void;
  sendBinary(bytes: Uint8Array): void;
  onText(listener: (text: string) => void): void;
  onBinary(listener: (bytes: Uint8Array) => void): void;
  onClose(listener: (code: number, reason: string) => void): void;
  close(code?: number, reason?: string): void;
  /** Drops the connection without a closing handshake. */
  terminate(): void;
}

export interface WsServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

export interface WsServerOptions {
  host: string;
  port: number;
  /** ws refuses (close code 1009) any message larger than this before buffering it. */
  maxPayloadBytes: number;
  onConnection(conn: WsConnection): void;
}

export async function startWsServer(opts: WsServerOptions): Promise<WsServer> {
  const wss = new WebSocketServer({ host: opts.host, port: opts.port, maxPayload: opts.maxPayloadBytes, perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', (err) => reject(new KiwiError('LISTEN_FAILED', `Cannot listen on ${opts.host}:${opts.port}: ${err.message}. Choose another port.`)));
  });
  wss.on('connection', (socket, req) => opts.onConnection(wrap(socket, req.socket.remoteAddress ?? 'unknown')));
  const port = (wss.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `ws://${host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of wss.clients) client.terminate();
        wss.close(() => resolve());
      }),
  };
}

export interface ConnectOptions {
  maxPayloadBytes: number;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export async function connectWs(url: string, opts: ConnectOptions): Promise<WsConnection> {
  let socket: WebSocket;
  try {
    socket = new WebSocket(url, { maxPayload: opts.maxPayloadBytes, perMessageDeflate: false, handshakeTimeout: opts.timeoutMs ?? 5000 });
  } catch (err) {
    throw new KiwiError('CONNECT_FAILED', `Cannot connect to ${url}: ${(err as Error).message}.`);
  }
  await new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      socket.terminate();
      reject(opts.signal?.reason ?? new Error('aborted'));
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    socket.once('open', () => {
      opts.signal?.removeEventListener('abort', onAbort);
      resolve();
    });
    socket.once('error', (err) => {
      opts.signal?.removeEventListener('abort', onAbort);
      reject(new KiwiError('CONNECT_FAILED', `Cannot connect to ${url}: ${err.message}. Check the address and that the other side is running.`));
    });
  });
  return wrap(socket, url);
}

function wrap(socket: WebSocket, remoteAddress: string): WsConnection {
  // Errors after open (a reset, a too-large message) are always followed by 'close': they are
  // reported there, as the close reason.
  let lastError: string | undefined;
  socket.on('error', (err) => {
    lastError = err.message;
  });
  return {
    remoteAddress,
    get bufferedAmount() {
      return socket.bufferedAmount;
    },
    sendText: (text) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(text);
    },
    sendBinary: (bytes) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(bytes, { binary: true });
    },
    onText: (listener) =>
      socket.on('message', (data: RawData, isBinary: boolean) => {
        if (!isBinary) listener(toBuffer(data).toString('utf8'));
      }),
    onBinary: (listener) =>
      socket.on('message', (data: RawData, isBinary: boolean) => {
        if (isBinary) {
          const b = toBuffer(data);
          listener(new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
        }
      }),
    onClose: (listener) => socket.on('close', (code: number, reason: Buffer) => listener(code, reason.toString('utf8') || (lastError ?? ''))),
    close: (code = 1000, reason = '') => socket.close(code, reason.slice(0, 120)),
    terminate: () => socket.terminate(),
  };
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/** A direct link: one binary WebSocket message per call to send. */
export class WsLink extends BaseLink {
  readonly kind = 'direct' as const;

  constructor(private readonly conn: WsConnection) {
    super();
    conn.onBinary((bytes) => this.deliver(bytes));
    conn.onText(() => this.fail(new KiwiError('LINK_PROTOCOL_VIOLATION', 'The peer sent a text message on a binary link.')));
    conn.onClose((code, reason) => this.finish({ by: 'remote', reason: reason || `websocket closed (${code})` }));
  }

  get bufferedAmount(): number {
    return this.conn.bufferedAmount;
  }

  protected transmit(bytes: Uint8Array): void {
    this.conn.sendBinary(bytes);
  }

  protected shutdown(reason: string): void {
    this.conn.close(1000, reason);
  }
}

export interface DirectListener {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Listens for direct links from other members; each accepted connection becomes a Link. */
export async function listenDirect(opts: { host: string; port?: number; maxPayloadBytes: number; onLink(link: WsLink, remoteAddress: string): void }): Promise<DirectListener> {
  return startWsServer({
    host: opts.host,
    port: opts.port ?? 0,
    maxPayloadBytes: opts.maxPayloadBytes,
    onConnection: (conn) => opts.onLink(new WsLink(conn), conn.remoteAddress),
  });
}

export async function dialDirect(url: string, opts: ConnectOptions): Promise<WsLink> {
  return new WsLink(await connectWs(url, opts));
}
