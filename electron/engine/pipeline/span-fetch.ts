// A member's HTTP side of a weights transfer: fills its partial model (member-weights.ts) from a
// URL with Range requests, one per span, up to PARALLEL_SPANS at once over kept-alive connections,
// each span hashed as its bytes arrive and written in batches (the socket's chunks as they came,
// no copy) with one write in flight while the next bytes arrive; a span counts once its bytes are
// on disk and match the host's sha256. The host's own range server (weights-http.ts, with the
// member's bearer token) is asked through node:http, a public model URL (https, CDN redirects)
// through fetch.
import { Agent, request as httpRequest } from 'node:http';
import { KiwiError } from '../errors.js';
import type { HashedSpan, PartialModel } from './member-weights.js';

/** Bytes gathered before one write (a batch of the socket's chunks, written with writev). */
const WRITE_BYTES = 1 << 20;
/** Spans in flight at once: on loopback one connection is bound by one core's copy and hash; a few overlap the waits. */
export const PARALLEL_SPANS = 4;
const HTTP_IDLE_MS = 10_000;
/** A host address from another LAN (the member is in another home) never connects: give up fast. */
const HTTP_CONNECT_MS = 2_000;

/** Where fetchSpans asks: a bearer token (the host's own server, weights-http.ts) and a way to stop. */
export interface FetchOptions {
  token?: string;
  signal?: AbortSignal;
  /** Spans fetched at once (default PARALLEL_SPANS). */
  parallel?: number;
}

/**
 * Fetches each span from `url` with one HTTP Range request (`bytes=a-b`) into `partial`, writing
 * and hashing the bytes as they arrive, and verifies it against the host's sha256, exactly as a
 * span streamed from the host. Any failure (network, a server without ranges, a refused token,
 * short or wrong bytes) is a WEIGHTS_TRANSFER_FAILED once the spans in flight are done (no other
 * starts); every span verified stays recorded, so the caller can get the rest elsewhere.
 */
export async function fetchSpans(url: string, spans: readonly HashedSpan[], partial: PartialModel, onBytes: (bytes: number) => void, opts: FetchOptions = {}): Promise<void> {
  const parallel = Math.max(1, opts.parallel ?? PARALLEL_SPANS);
  const agent = opts.token !== undefined ? new Agent({ keepAlive: true, maxSockets: parallel }) : undefined;
  const get: RangeGetter = agent !== undefined ? (range) => getRangeHttp(url, range, opts.token!, agent, opts.signal) : (range) => getRangeFetch(url, range, opts.signal);
  let next = 0;
  let failure: unknown;
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < spans.length) {
      const s = spans[next++]!;
      try {
        await fetchSpan(url, s, partial, onBytes, get);
      } catch (err) {
        // No span starts after a failure; those in flight finish (their bytes stay verified).
        failure ??= err;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(parallel, spans.length) }, worker));
  } finally {
    agent?.destroy();
  }
  if (failure !== undefined) throw failure;
}

type RangeGetter = (range: string) => Promise<RangeResponse>;

async function fetchSpan(url: string, s: HashedSpan, partial: PartialModel, onBytes: (bytes: number) => void, get: RangeGetter): Promise<void> {
  const fail = (why: string): KiwiError => new KiwiError('WEIGHTS_TRANSFER_FAILED', `Could not fetch the model's bytes from ${url}: ${why}.`);
  if (s.bytes === 0) return partial.verify(s);
  const last = s.offset + s.bytes - 1;
  let res: RangeResponse;
  try {
    res = await get(`bytes=${s.offset}-${last}`);
  } catch (err) {
    throw fail((err as Error).message);
  }
  const contentRange = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.contentRange ?? '');
  if (res.status !== 206 || contentRange === null || Number(contentRange[1]) !== s.offset || Number(contentRange[2]) !== last) {
    await res.cancel();
    const refused = res.status === 401 || res.status === 403 ? ' (the host refused this member\'s token for these bytes)' : '';
    throw fail(`asked for bytes ${s.offset}-${last}, got HTTP ${res.status}${contentRange === null ? ' without a matching Content-Range' : ` with ${contentRange[0]}`}${refused}`);
  }
  const reader = res.body[Symbol.asyncIterator]();
  const writer = await partial.spanWriter(s);
  // One write in flight while the next bytes arrive.
  let writing: Promise<void> = Promise.resolve();
  try {
    let got = 0;
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    const flush = async (): Promise<void> => {
      if (pendingBytes === 0) return;
      await writing;
      const batch = pending;
      const n = pendingBytes;
      writing = writer.write(batch).then(() => onBytes(n));
      writing.catch(() => {});
      pending = [];
      pendingBytes = 0;
    };
    for (;;) {
      let chunk: IteratorResult<Uint8Array>;
      try {
        chunk = await reader.next();
      } catch (err) {
        throw fail((err as Error).message);
      }
      if (chunk.done === true) break;
      got += chunk.value.length;
      if (got > s.bytes) {
        await res.cancel();
        throw fail(`the server sent more than the ${s.bytes} bytes asked for at ${s.offset}`);
      }
      pending.push(chunk.value);
      pendingBytes += chunk.value.length;
      if (pendingBytes >= WRITE_BYTES) await flush();
    }
    await flush();
    await writing;
    if (got !== s.bytes) throw fail(`the response for ${s.bytes} bytes at ${s.offset} ended after ${got}`);
  } catch (err) {
    await res.cancel();
    await writing.catch(() => {});
    await writer.close();
    throw err;
  }
  await writer.finish();
}

interface RangeResponse {
  status: number;
  contentRange: string | null;
  body: AsyncIterable<Uint8Array>;
  cancel(): Promise<void>;
}

/** A Range request through fetch (a public model URL: https, redirects to a CDN). */
async function getRangeFetch(url: string, range: string, signal: AbortSignal | undefined): Promise<RangeResponse> {
  const res = await fetch(url, { headers: { range }, ...(signal !== undefined ? { signal } : {}) });
  const reader = res.body?.getReader();
  return {
    status: reader === undefined ? 0 : res.status,
    contentRange: res.headers.get('content-range'),
    body: chunksOf(reader),
    cancel: async () => {
      await reader?.cancel().catch(() => {});
    },
  };
}

/** A web stream's chunks as an async iterable (the DOM typings, which e2e/ compiles with, give ReadableStream none). */
async function* chunksOf(reader: ReadableStreamDefaultReader<Uint8Array> | undefined): AsyncGenerator<Uint8Array> {
  if (reader === undefined) return;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    yield value;
  }
}

/**
 * A Range request with the bearer token through node:http (the host's own server, weights-http.ts:
 * plain http, no redirects), about twice fetch's throughput on a fast link.
 */
function getRangeHttp(url: string, range: string, token: string, agent: Agent, signal: AbortSignal | undefined): Promise<RangeResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'GET', agent, headers: { range, authorization: `Bearer ${token}` }, ...(signal !== undefined ? { signal } : {}) }, (res) => {
      const contentRange = res.headers['content-range'];
      resolve({
        status: res.statusCode ?? 0,
        contentRange: typeof contentRange === 'string' ? contentRange : null,
        body: res,
        cancel: () => {
          res.destroy();
          return Promise.resolve();
        },
      });
    });
    // An address behind NAT may never answer: 10 s without a byte ends the attempt (the caller falls back).
    req.setTimeout(HTTP_IDLE_MS, () => req.destroy(new Error(`no answer for ${HTTP_IDLE_MS / 1000} s`)));
    req.on('socket', (socket) => {
      if (!socket.connecting) return;
      const timer = setTimeout(() => req.destroy(new Error(`no connection within ${HTTP_CONNECT_MS / 1000} s`)), HTTP_CONNECT_MS);
      socket.once('connect', () => clearTimeout(timer));
      socket.once('close', () => clearTimeout(timer));
    });
    req.on('error', reject);
    req.end();
  });
}
