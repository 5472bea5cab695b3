// A member's copy of the model: either its own full GGUF (checked by fingerprint) or a partial
// GGUF under the cache: a sparse file of the host file's size holding the header and exactly the
// byte spans of this member's tensors at their original offsets, so the GGUF reader, the shard
// cache key and the stage loader work on it unchanged and nothing else is ever stored.
// progress.jsonl records the spans already verified (sha256), so an interrupted transfer resumes,
// and those released once the shard cache built their layer (member-layers.ts: a hole now).
// span-fetch.ts fills it from a URL instead, with HTTP Range requests, hashing as it writes.
import { createHash } from 'node:crypto';
import { appendFile, mkdir, open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { punchHole } from './member-layers.js';
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
  /** Verified spans, not released. */
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
  let done: HashedSpan[] = [];
  for (const line of text.split('\n')) {
    try {
      const s = JSON.parse(line) as HashedSpan & { released?: boolean };
      if (!Number.isSafeInteger(s.offset) || !Number.isSafeInteger(s.bytes) || typeof s.sha256 !== 'string') continue;
      if (s.released === true) done = done.filter((d) => !sameSpan(d, s));
      else done.push({ offset: s.offset, bytes: s.bytes, sha256: s.sha256 });
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

  /** Whether `span`'s bytes are here, verified. */
  holds(span: HashedSpan): boolean {
    return this.progress.done.some((d) => sameSpan(d, span));
  }

  /**
   * Frees the disk blocks of `spans` (their layers are built in the shard cache): each becomes a
   * hole and is recorded as released, so missing() asks for it again should it be needed raw.
   * Returns the bytes freed (0 where the system cannot punch holes: the bytes then stay).
   */
  async release(spans: readonly HashedSpan[]): Promise<number> {
    let freed = 0;
    for (const s of spans) {
      if (!this.holds(s) || !(await punchHole(this.path, s))) continue;
      this.progress.done = this.progress.done.filter((d) => !sameSpan(d, s));
      await appendFile(this.progressPath, `${JSON.stringify({ ...s, released: true })}\n`);
      freed += s.bytes;
    }
    return freed;
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
        // Several chunks go out in one writev, as they arrived (no copy into one buffer).
        const parts = data instanceof Uint8Array ? [data] : data;
        const n = parts.reduce((sum, p) => sum + p.length, 0);
        if (at + n > span.offset + span.bytes) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `${n} bytes at ${at} run past the span at ${span.offset} (+${span.bytes}).`);
        for (const p of parts) h.update(p);
        let written = (await fh.writev(parts, at)).bytesWritten;
        // A short writev (rare on a file): the rest goes out with plain writes.
        const all = written < n ? Buffer.concat(parts, n) : undefined;
        while (all !== undefined && written < n) written += (await fh.write(all, written, n - written, at + written)).bytesWritten;
        at += n;
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
  /** The next bytes of the span, in order: one buffer or several written together. */
  write(data: Uint8Array | readonly Uint8Array[]): Promise<void>;
  /** Closes the file and records the span when its bytes and sha256 are the host's; throws otherwise. */
  finish(): Promise<void>;
  /** Closes the file without recording (a failed fetch). */
  close(): Promise<void>;
}
