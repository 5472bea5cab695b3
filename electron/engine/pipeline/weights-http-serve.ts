// The request side of the host's range server (weights-http.ts): who may read which bytes (a
// table of grants by token digest) and the handler that answers `GET /model.gguf` with one
// `Range: bytes=a-b` inside the presented token's spans. It runs on the server's worker thread
// (weights-http-worker.ts), or in the caller's thread when no worker can start; both hold the
// same table through the same calls.
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Span } from './member-weights.js';

export const WEIGHTS_HTTP_PATH = '/model.gguf';
const MAX_ACTIVE = 16;
/** Bytes per read of the file (and per write to the socket). */
export const READ_BYTES = 4 << 20;
/** Reads of one response on their way to the socket at once: the next read overlaps the last write. */
export const READS_AHEAD = 2;

/** The digest a token is looked up by, so no lookup compares the secret itself. */
export const tokenKey = (token: string): string => createHash('sha256').update(token).digest('hex');
const inside = (spans: readonly Span[], start: number, end: number): boolean => spans.some((s) => start >= s.offset && end < s.offset + s.bytes);

interface Grant {
  spans: Span[];
  active: Set<{ res: ServerResponse; start: number; end: number }>;
}

/** Grants by token digest; a change cuts the responses it no longer covers. */
export class GrantTable {
  private readonly grants = new Map<string, Grant>();
  active = 0;

  /** The token's spans from now on (replacing any earlier). */
  set(key: string, spans: readonly Span[]): void {
    const g = this.grants.get(key) ?? { spans: [], active: new Set() };
    this.grants.set(key, g);
    g.spans = [...spans];
    for (const a of g.active) if (!inside(g.spans, a.start, a.end)) a.res.destroy();
  }

  add(key: string, spans: readonly Span[]): void {
    this.grants.get(key)?.spans.push(...spans);
  }

  revoke(key: string): void {
    const g = this.grants.get(key);
    this.grants.delete(key);
    for (const a of g?.active ?? []) a.res.destroy();
  }

  get(key: string): Grant | undefined {
    return this.grants.get(key);
  }
}

function refuse(res: ServerResponse, status: number, why: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', connection: 'close', ...headers });
  res.end(`${why}\n`);
}

/**
 * Buffers of READ_BYTES that responses read the file into, reused once the socket has taken their
 * bytes: a new buffer per read (a read stream's way) costs the page faults and zeroing of fresh
 * memory on every 4 MiB, as much CPU as sending them.
 */
export class BufferPool {
  private readonly free: Buffer[] = [];
  /** Buffers made so far (a test's view of the reuse). */
  allocated = 0;

  take(): Buffer {
    const reused = this.free.pop();
    if (reused !== undefined) return reused;
    this.allocated++;
    return Buffer.allocUnsafeSlow(READ_BYTES);
  }

  give(buf: Buffer): void {
    // At most what the responses allowed at once can use.
    if (this.free.length < MAX_ACTIVE * READS_AHEAD) this.free.push(buf);
  }
}

/**
 * Sends bytes `start`..`end` of `modelPath` on `res`: READ_BYTES reads into pooled buffers, at
 * most READS_AHEAD written and not yet taken by the socket; a buffer goes back to the pool only
 * from its write's callback (the socket no longer holds it). Stops when the response closes.
 */
async function sendRange(modelPath: string, res: ServerResponse, start: number, end: number, pool: BufferPool): Promise<void> {
  const fh = await open(modelPath, 'r');
  let closed = false;
  const wakes = new Set<() => void>();
  res.once('close', () => {
    closed = true;
    for (const wake of wakes) wake();
  });
  try {
    const writes: Promise<void>[] = [];
    for (let at = start; at <= end && !closed;) {
      const n = Math.min(READ_BYTES, end + 1 - at);
      const buf = pool.take();
      const { bytesRead } = await fh.read(buf, 0, n, at);
      if (bytesRead !== n) throw new Error(`the file ended at ${at + bytesRead}`);
      if (closed) break;
      writes.push(new Promise<void>((resolve) => {
        wakes.add(resolve);
        res.write(buf.subarray(0, n), (err) => {
          if (err === null || err === undefined) pool.give(buf);
          wakes.delete(resolve);
          resolve();
        });
      }));
      at += n;
      if (writes.length >= READS_AHEAD) await writes.shift();
    }
    await Promise.all(writes);
    if (!closed) res.end();
  } finally {
    await fh.close();
  }
}

/**
 * The server answering ranges of `modelPath` (`fileBytes` long) to the tokens of `table`: each
 * response is the file sent in READ_BYTES reads into reused buffers (sendRange), Nagle off.
 */
export function rangeServer(modelPath: string, fileBytes: number, table: GrantTable, pool = new BufferPool()): Server {
  return createServer((req: IncomingMessage, res: ServerResponse): void => {
    if (req.method !== 'GET') return refuse(res, 405, 'Only GET is served here.', { allow: 'GET' });
    if (req.url !== WEIGHTS_HTTP_PATH) return refuse(res, 404, `Only ${WEIGHTS_HTTP_PATH} is served here.`);
    if (req.headers.authorization === undefined) return refuse(res, 401, 'A bearer token is required.', { 'www-authenticate': 'Bearer' });
    const presented = /^Bearer (\S+)$/.exec(req.headers.authorization)?.[1];
    const g = presented !== undefined ? table.get(tokenKey(presented)) : undefined;
    if (g === undefined) return refuse(res, 403, 'This token is not valid (or no longer: the member left or was planned out).');
    const m = /^bytes=(\d{1,15})-(\d{1,15})$/.exec(req.headers.range ?? '');
    if (m === null) return refuse(res, 400, 'One Range: bytes=a-b is required.');
    const start = Number(m[1]);
    const end = Number(m[2]);
    if (start > end || end >= fileBytes) return refuse(res, 416, `The range ${start}-${end} is not within the file's ${fileBytes} bytes.`, { 'content-range': `bytes */${fileBytes}` });
    if (!inside(g.spans, start, end)) return refuse(res, 403, `The bytes ${start}-${end} are not among this member's layers.`);
    if (table.active >= MAX_ACTIVE) return refuse(res, 503, 'Too many transfers at once; try again.', { 'retry-after': '1' });
    table.active++;
    const entry = { res, start, end };
    g.active.add(entry);
    res.on('close', () => {
      if (g.active.delete(entry)) table.active--;
    });
    res.socket?.setNoDelay(true);
    res.writeHead(206, { 'content-type': 'application/octet-stream', 'content-length': String(end - start + 1), 'content-range': `bytes ${start}-${end}/${fileBytes}` });
    // A file that cannot be read (moved, truncated) ends the response short: the member's check refuses it.
    sendRange(modelPath, res, start, end, pool).catch(() => res.destroy());
  });
}

/** Messages to the worker (each answered by `{ type: 'done', seq }`), and its first answer. */
export type ToWorker =
  | { type: 'set' | 'add'; seq: number; key: string; spans: Span[] }
  | { type: 'revoke'; seq: number; key: string }
  | { type: 'close'; seq: number };
export type FromWorker = { type: 'listening'; port: number } | { type: 'failed'; message: string } | { type: 'done'; seq: number };

/** Applies one message to the table (the worker's and the in-thread fallback's one path). */
export function applyToTable(table: GrantTable, msg: Exclude<ToWorker, { type: 'close' }>): void {
  if (msg.type === 'set') table.set(msg.key, msg.spans);
  else if (msg.type === 'add') table.add(msg.key, msg.spans);
  else table.revoke(msg.key);
}
