// A member's copy of the model: either its own full GGUF (checked by fingerprint) or a partial
// GGUF under the cache: a sparse file of the host file's size holding the header and exactly the
// byte spans of this member's tensors at their original offsets, so the GGUF reader, the shard
// cache key and the stage loader work on it unchanged and nothing else is ever stored.
// progress.jsonl records the spans already verified (sha256), so an interrupted transfer resumes.
// fetchSpans fills it from a URL instead, one HTTP Range request per span, hashing as it writes.
import { createHash } from 'node:crypto';
import { appendFile, mkdir, open, readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { LayerRange } from '../runtime/layer-range.js';

export interface Span {
  offset: number;
  bytes: number;
}

export interface HashedSpan extends Span {
  sha256: string;
}

/**
 * Tensors a member stage of `range` reads (no head: the host is the head): its blocks, the token
 * embedding when it starts at layer 0, and small model-wide tensors (rope frequencies).
 */
export function stageTensorNames(file: GgufFile, range: LayerRange): string[] {
  const names: string[] = [];
  for (const t of file.tensors) {
    const m = /^blk\.(\d+)\./.exec(t.name);
    if (m !== null) {
      const L = Number(m[1]);
      if (L >= range.start && L < range.end) names.push(t.name);
    } else if (t.name === 'token_embd.weight' ? range.start === 0 : t.name !== 'output.weight' && t.name !== 'output_norm.weight') {
      names.push(t.name);
    }
  }
  return names;
}

/**
 * The spans a member needs: the header (metadata + tensor index), then its tensors' bytes, one span
 * per layer (a layer's adjacent tensors merged) and one per model-wide tensor. Spans never cross a
 * layer boundary, so the same layer has the same span (and sha256) in every range that holds it:
 * a member whose range moves keeps the layers it already verified and asks only for the rest.
 */
export function stageSpans(file: GgufFile, range: LayerRange): Span[] {
  const spans: Span[] = [{ offset: 0, bytes: file.dataOffset }];
  const tensors = stageTensorNames(file, range)
    .map((n) => file.tensor(n)!)
    .map((t) => ({ offset: t.offset, bytes: t.byteLength, unit: /^blk\.(\d+)\./.exec(t.name)?.[1] ?? t.name }))
    .sort((a, b) => a.offset - b.offset);
  let lastUnit: string | undefined;
  for (const { unit, ...s } of tensors) {
    const last = spans[spans.length - 1]!;
    if (unit === lastUnit && last.offset + last.bytes === s.offset) last.bytes += s.bytes;
    else spans.push(s);
    lastUnit = unit;
  }
  return spans;
}

/**
 * The host's sha256 of each span of its model file, computed once per span and reused by every
 * later plan (a re-plan hashes only spans no earlier plan covered).
 */
export class SpanHashes {
  private readonly known = new Map<string, Promise<string>>();

  constructor(private readonly path: string) {}

  async hash(spans: readonly Span[]): Promise<HashedSpan[]> {
    return Promise.all(spans.map(async (s) => {
      const key = `${s.offset}+${s.bytes}`;
      let h = this.known.get(key);
      if (h === undefined) {
        h = hashSpans(this.path, [s]).then(([x]) => x!.sha256);
        this.known.set(key, h);
        h.catch(() => this.known.delete(key));
      }
      return { offset: s.offset, bytes: s.bytes, sha256: await h };
    }));
  }

  /** How many distinct spans have been hashed (a test's view of the reuse). */
  get size(): number {
    return this.known.size;
  }
}

/** Reads the spans from the host's file and hashes them (the host side of a transfer). */
export async function hashSpans(path: string, spans: readonly Span[]): Promise<HashedSpan[]> {
  const fh = await open(path, 'r');
  try {
    const out: HashedSpan[] = [];
    for (const s of spans) {
      const h = createHash('sha256');
      for (let at = 0; at < s.bytes; at += 1 << 20) {
        const n = Math.min(1 << 20, s.bytes - at);
        const buf = Buffer.allocUnsafe(n);
        await fh.read(buf, 0, n, s.offset + at);
        h.update(buf);
      }
      out.push({ ...s, sha256: h.digest('hex') });
    }
    return out;
  } finally {
    await fh.close();
  }
}

interface Progress {
  fingerprint: string;
  done: HashedSpan[];
}

const sameSpan = (a: HashedSpan, b: HashedSpan): boolean => a.offset === b.offset && a.bytes === b.bytes && a.sha256 === b.sha256;

/** The verified spans recorded for a file (a line cut short by a crash is ignored: that span is simply sent again). */
async function readProgress(path: string, fingerprint: string): Promise<Progress> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { fingerprint, done: [] };
    throw err;
  }
  const done: HashedSpan[] = [];
  for (const line of text.split('\n')) {
    try {
      const s = JSON.parse(line) as HashedSpan;
      if (Number.isSafeInteger(s.offset) && Number.isSafeInteger(s.bytes) && typeof s.sha256 === 'string') done.push(s);
    } catch {
      // An empty or partial line.
    }
  }
  return { fingerprint, done };
}

/** The receiving side: a partial GGUF being filled span by span. */
export class PartialModel {
  private constructor(
    readonly path: string,
    private readonly progressPath: string,
    private progress: Progress,
    readonly fileBytes: number,
  ) {}

  static async open(dir: string, fingerprint: string, fileBytes: number): Promise<PartialModel> {
    await mkdir(dir, { recursive: true });
    const path = join(dir, `${fingerprint}.gguf`);
    const progressPath = join(dir, `${fingerprint}.progress.jsonl`);
    const progress = await readProgress(progressPath, fingerprint);
    const fh = await open(path, 'a+');
    try {
      // A sparse file of the full size: spans land at their own offsets; the rest takes no disk.
      if ((await fh.stat()).size !== fileBytes) await fh.truncate(fileBytes);
    } finally {
      await fh.close();
    }
    return new PartialModel(path, progressPath, progress, fileBytes);
  }

  /**
   * Spans of `plan` whose bytes this file already holds inside a span verified earlier (e.g. under
   * an older, merged layout) are hashed here and, when they match the host's sha256, recorded as
   * verified, so missing() no longer asks for them. Returns how many were adopted.
   */
  async adopt(plan: readonly HashedSpan[]): Promise<number> {
    let adopted = 0;
    for (const s of plan) {
      if (this.progress.done.some((d) => sameSpan(d, s))) continue;
      if (!this.progress.done.some((d) => s.offset >= d.offset && s.offset + s.bytes <= d.offset + d.bytes)) continue;
      const [got] = await hashSpans(this.path, [s]);
      if (got?.sha256 !== s.sha256) continue;
      this.progress.done.push(s);
      await appendFile(this.progressPath, `${JSON.stringify(s)}\n`);
      adopted++;
    }
    return adopted;
  }

  /** The spans of `plan` not yet verified here. */
  missing(plan: readonly HashedSpan[]): HashedSpan[] {
    return plan.filter((s) => !this.progress.done.some((d) => sameSpan(d, s)));
  }

  async write(offset: number, data: Uint8Array, plan: readonly HashedSpan[]): Promise<void> {
    if (!plan.some((s) => offset >= s.offset && offset + data.length <= s.offset + s.bytes)) {
      throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The host sent ${data.length} bytes at ${offset}, outside the spans it announced.`);
    }
    const fh = await open(this.path, 'r+');
    try {
      await fh.write(data, 0, data.length, offset);
    } finally {
      await fh.close();
    }
  }

  /** Hashes a span after its last chunk; records it when it matches. */
  async verify(span: HashedSpan): Promise<void> {
    const [got] = await hashSpans(this.path, [span]);
    await this.record(span, got?.sha256);
  }

  /**
   * Stores one span's bytes in arrival order through one open handle, hashing them on the way, so
   * finish() verifies it without reading it back.
   */
  async spanWriter(span: HashedSpan): Promise<SpanWriter> {
    const fh = await open(this.path, 'r+');
    const h = createHash('sha256');
    let at = span.offset;
    return {
      write: async (data) => {
        if (at + data.length > span.offset + span.bytes) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `${data.length} bytes at ${at} run past the span at ${span.offset} (+${span.bytes}).`);
        h.update(data);
        await fh.write(data, 0, data.length, at);
        at += data.length;
      },
      finish: async () => {
        await fh.close();
        if (at !== span.offset + span.bytes) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The bytes at ${span.offset} ended after ${at - span.offset} of ${span.bytes}.`);
        await this.record(span, h.digest('hex'));
      },
      close: () => fh.close().catch(() => {}),
    };
  }

  private async record(span: HashedSpan, sha256: string | undefined): Promise<void> {
    if (sha256 !== span.sha256) {
      throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The bytes at ${span.offset} (+${span.bytes}) do not match the host's sha256; the transfer was corrupted. Join again to retry.`);
    }
    // An append-only log of one JSON line per verified span: several members on one machine may
    // fill the same file (different spans) at once, and small O_APPEND writes never interleave.
    this.progress.done.push(span);
    await appendFile(this.progressPath, `${JSON.stringify(span)}\n`);
  }
}

/** One span being written (PartialModel.spanWriter). */
export interface SpanWriter {
  write(data: Uint8Array): Promise<void>;
  /** Closes the file and records the span when its bytes and sha256 are the host's; throws otherwise. */
  finish(): Promise<void>;
  /** Closes the file without recording (a failed fetch). */
  close(): Promise<void>;
}

const WRITE_BYTES = 1 << 20;
const HTTP_IDLE_MS = 10_000;
/** A host address from another LAN (the member is in another home) never connects: give up fast. */
const HTTP_CONNECT_MS = 2_000;

/** Where fetchSpans asks: a bearer token (the host's own server, weights-http.ts) and a way to stop. */
export interface FetchOptions {
  token?: string;
  signal?: AbortSignal;
}

/**
 * Fetches each span from `url` with one HTTP Range request (`bytes=a-b`) into `partial`, writing
 * and hashing the bytes as they arrive, and verifies it against the host's sha256, exactly as a
 * span streamed from the host. Any failure (network, a server without ranges, short or wrong
 * bytes) is a WEIGHTS_TRANSFER_FAILED; spans verified before it stay recorded, so the caller can
 * get the rest elsewhere.
 */
export async function fetchSpans(url: string, spans: readonly HashedSpan[], partial: PartialModel, onBytes: (bytes: number) => void, opts: FetchOptions = {}): Promise<void> {
  const fail = (why: string): KiwiError => new KiwiError('WEIGHTS_TRANSFER_FAILED', `Could not fetch the model's bytes from ${url}: ${why}.`);
  for (const s of spans) {
    if (s.bytes === 0) {
      await partial.verify(s);
      continue;
    }
    const last = s.offset + s.bytes - 1;
    let res: RangeResponse;
    try {
      res = await (opts.token !== undefined ? getRangeHttp : getRangeFetch)(url, `bytes=${s.offset}-${last}`, opts);
    } catch (err) {
      throw fail((err as Error).message);
    }
    const contentRange = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.contentRange ?? '');
    if (res.status !== 206 || contentRange === null || Number(contentRange[1]) !== s.offset || Number(contentRange[2]) !== last) {
      await res.cancel();
      throw fail(`asked for bytes ${s.offset}-${last}, got HTTP ${res.status}${contentRange === null ? ' without a matching Content-Range' : ` with ${contentRange[0]}`}`);
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
        const data = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
        const n = pendingBytes;
        writing = writer.write(data).then(() => onBytes(n));
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
}

interface RangeResponse {
  status: number;
  contentRange: string | null;
  body: AsyncIterable<Uint8Array>;
  cancel(): Promise<void>;
}

/** A Range request through fetch (a public model URL: https, redirects to a CDN). */
async function getRangeFetch(url: string, range: string, opts: FetchOptions): Promise<RangeResponse> {
  const res = await fetch(url, { headers: { range }, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
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
function getRangeHttp(url: string, range: string, opts: FetchOptions): Promise<RangeResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'GET', headers: { range, authorization: `Bearer ${opts.token}` }, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) }, (res) => {
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
