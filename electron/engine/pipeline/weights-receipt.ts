// How a member obtains the weights of its assigned range, in order of preference: its own copy of
// the model (when its fingerprint matches), spans already verified on disk (this session or an
// earlier run), HTTP range requests to the model's URL when the host names one, then to the
// host's own range server (weights-http.ts: in clear, but checked against the sha256 the plan
// brought over the encrypted channel), and the host streaming what is still missing (behind NAT,
// relay only, --weights-http off) over the encrypted session. Each span is verified against the
// host's hash as it completes (member-weights.ts, span-fetch.ts); a re-plan ends a transfer in progress, and its
// late chunks are dropped.
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { modelFingerprint, type ShardSource } from '../runtime/shard-cache.js';
import { builtSpans, partialCacheSource } from './member-layers.js';
import { PartialModel, type HashedSpan, type SpanWriter } from './member-weights.js';
import { fetchSpans } from './span-fetch.js';
import type { Assign, MemberToHostBody, WeightsPlan } from './ring-protocol.js';

export type WeightsSource = 'local' | 'cache' | 'url' | 'host-http' | 'host' | 'kept';

/** Progress goes to the host about every MiB (its flow control), and always at the end. */
export const PROGRESS_EVERY_BYTES = 1 << 20;

/** Whether progress is due: another PROGRESS_EVERY_BYTES since the last report, or the end. */
export function progressDue(receivedBytes: number, lastReportedBytes: number, finished: boolean): boolean {
  return receivedBytes - lastReportedBytes >= PROGRESS_EVERY_BYTES || finished;
}

/** A download needs no flow control: its progress goes out at most every this many ms, and at the end. */
export const DOWNLOAD_PROGRESS_MS = 250;

export interface WeightsReceiptIo {
  /** To the host: weights-request (the spans still missing) and weights-progress. */
  send: (body: MemberToHostBody) => void;
  /** Progress of the download or transfer (at the rate progressDue allows). */
  progress: (receivedBytes: number, totalBytes: number) => void;
  /** An HTTP source failed (the host's range server, the model's URL); the next one, or the host's stream, gets the rest. */
  warning: (err: KiwiError) => void;
}

interface Transfer {
  partial: PartialModel;
  missing: HashedSpan[];
  receivedBytes: number;
  totalBytes: number;
  lastReportedBytes: number;
  /** The span being stored (missing[0]), hashed as its chunks arrive, and where its next chunk starts. */
  writing: { writer: SpanWriter; at: number } | undefined;
  done: () => void;
  failed: (err: KiwiError) => void;
}

const sumBytes = (spans: readonly { bytes: number }[]): number => spans.reduce((n, s) => n + s.bytes, 0);

/** Bytes of the weights a plan's range reads (the member's memory need, with the KV cache on top). */
export const planBytes = (plan: WeightsPlan): number => sumBytes(plan.spans);

export class WeightsReceipt {
  private transfer: Transfer | undefined;
  private chunkQueue: Promise<void> = Promise.resolve();
  /** Aborted by close(): downloads in progress stop, and obtain() gets nothing more. */
  private readonly closing = new AbortController();

  constructor(
    private readonly opts: {
      modelPath?: string;
      weightsDir: string;
      /** The layer tags the shard cache holds built for a model (member-layers.ts): those layers are not received again. */
      built?: (fingerprint: string) => Promise<ReadonlySet<string>>;
    },
    private readonly io: WeightsReceiptIo,
  ) {}

  /** The weights of assignment `a` as `plan` describes them, from the first source that has them. */
  async obtain(a: Assign, plan: WeightsPlan): Promise<{ file: GgufFile; source: WeightsSource; transferredBytes: number }> {
    if (this.opts.modelPath !== undefined) {
      const file = await openGguf(this.opts.modelPath);
      if ((await modelFingerprint(file)) === a.model.fingerprint) return { file, source: 'local', transferredBytes: 0 };
    }
    const partial = await PartialModel.open(this.opts.weightsDir, a.model.fingerprint, a.model.fileBytes);
    // Layers received for an earlier range (this session or an earlier run of the same model) stay:
    // only the spans not already verified on disk are asked for, and only those count as moved.
    // Layers built in the shard cache count as held too: their raw spans were released.
    const needed = await this.needed(partial, a, plan);
    await partial.adopt(needed);
    let missing = partial.missing(needed);
    if (missing.length === 0) return { file: await openGguf(partial.path), source: 'cache', transferredBytes: 0 };
    const sources: Array<{ source: 'host-http' | 'url'; url: string; token?: string }> = [
      // A public mirror first (it spares the host's uplink), then the host's own range server.
      ...(a.model.url !== undefined ? [{ source: 'url' as const, url: a.model.url }] : []),
      ...(plan.http?.urls ?? []).map((url) => ({ source: 'host-http' as const, url, token: plan.http!.token })),
    ];
    let fetched = 0;
    for (const [i, { source, url, token }] of sources.entries()) {
      fetched += await this.download(url, missing, partial, token, i === sources.length - 1);
      this.closing.signal.throwIfAborted();
      missing = partial.missing(needed);
      if (missing.length === 0) {
        const file = await openGguf(partial.path);
        if ((await modelFingerprint(file)) !== a.model.fingerprint) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The model header fetched from ${url} does not match the host's model.`);
        return { file, source, transferredBytes: fetched };
      }
    }
    const totalBytes = sumBytes(missing);
    this.closing.signal.throwIfAborted();
    await new Promise<void>((resolve, reject) => {
      this.transfer = { partial, missing: [...missing], receivedBytes: 0, totalBytes, lastReportedBytes: 0, writing: undefined, done: resolve, failed: reject };
      this.io.send({ kind: 'weights-request', spans: missing.map((s) => ({ offset: s.offset, bytes: s.bytes })) });
    });
    this.transfer = undefined;
    const file = await openGguf(partial.path);
    if ((await modelFingerprint(file)) !== a.model.fingerprint) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', 'The received model header does not match the host\'s model.');
    return { file, source: 'host', transferredBytes: totalBytes };
  }

  /** The plan's spans less those of layers built in the shard cache (which need their header to be told apart). */
  private async needed(partial: PartialModel, a: Assign, plan: WeightsPlan): Promise<HashedSpan[]> {
    const header = plan.spans.find((s) => s.offset === 0);
    if (this.opts.built === undefined || header === undefined || !partial.holds(header)) return plan.spans;
    const built = new Set(builtSpans(await openGguf(partial.path), plan.spans, await this.opts.built(a.model.fingerprint)));
    return plan.spans.filter((s) => !built.has(s));
  }

  /** How the shard cache tells the bytes of a partial model `file` (obtained for `plan`) apart. */
  async cacheSource(a: Assign, file: GgufFile, plan: WeightsPlan): Promise<Omit<ShardSource, 'path'>> {
    const partial = await PartialModel.open(this.opts.weightsDir, a.model.fingerprint, a.model.fileBytes);
    return partialCacheSource(file, plan.spans, (s) => partial.holds(s));
  }

  /** Frees the received bytes of the plan's layers now built in the shard cache (each layer stays on disk once); returns the bytes freed. */
  async releaseBuilt(a: Assign, file: GgufFile, plan: WeightsPlan): Promise<number> {
    if (this.opts.built === undefined) return 0;
    const partial = await PartialModel.open(this.opts.weightsDir, a.model.fingerprint, a.model.fileBytes);
    return partial.release(builtSpans(file, plan.spans, await this.opts.built(a.model.fingerprint)));
  }

  /**
   * Fetches `spans` from `url` (with `token`: the host's range server) and returns the bytes
   * verified; a failure is a warning (the next source gets what is still missing), never an error.
   */
  private async download(url: string, spans: readonly HashedSpan[], partial: PartialModel, token: string | undefined, last: boolean): Promise<number> {
    const totalBytes = sumBytes(spans);
    let receivedBytes = 0;
    let lastReportAt = 0;
    try {
      await fetchSpans(url, spans, partial, (n) => {
        receivedBytes += n;
        const now = performance.now();
        if (now - lastReportAt < DOWNLOAD_PROGRESS_MS && receivedBytes < totalBytes) return;
        lastReportAt = now;
        this.io.progress(receivedBytes, totalBytes);
      }, { signal: this.closing.signal, ...(token !== undefined ? { token } : {}) });
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.io.warning(new KiwiError(err.code, `${err.message} ${last ? 'Receiving the rest over the encrypted session instead.' : 'Trying the next address.'}`));
    }
    return receivedBytes;
  }

  /** The member is leaving: a download or transfer in progress ends, and obtain() rejects with `err`. */
  close(err: KiwiError): void {
    this.closing.abort(err);
    this.cancel(err);
  }

  /** Ends the transfer in progress, if any (a re-plan): obtain() rejects with `err`. */
  cancel(err: KiwiError): void {
    const t = this.transfer;
    if (t === undefined) return;
    this.transfer = undefined;
    t.failed(err);
    this.chunkQueue = this.chunkQueue.then(() => t.writing?.writer.close());
  }

  /**
   * A chunk of weights from the host. The host sends the spans asked for in order, each from its
   * start: a chunk is stored through the span's writer, which hashes the bytes on their way to
   * disk (as span-fetch.ts does), so a span is verified the moment its last chunk is written,
   * never read back. A chunk anywhere else is refused.
   */
  chunk(offset: number, data: Uint8Array): void {
    const t = this.transfer;
    // Chunks of a transfer that a re-plan ended may still be on their way.
    if (t === undefined) return;
    this.chunkQueue = this.chunkQueue.then(async () => {
      if (this.transfer !== t) return;
      try {
        const span = t.missing[0];
        const at = t.writing?.at ?? span?.offset;
        if (span === undefined || offset !== at || offset + data.length > span.offset + span.bytes) {
          throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The host sent ${data.length} bytes at ${offset}, not the next bytes of the spans asked for${span !== undefined ? ` (${at} in the span at ${span.offset} +${span.bytes})` : ''}.`);
        }
        t.writing ??= { writer: await t.partial.spanWriter(span), at: span.offset };
        await t.writing.writer.write(data);
        t.writing.at += data.length;
        t.receivedBytes += data.length;
        if (t.writing.at === span.offset + span.bytes) {
          const { writer } = t.writing;
          t.writing = undefined;
          // Throws when the bytes do not match the host's sha256: the span is not recorded.
          await writer.finish();
          t.missing.shift();
        }
        if (progressDue(t.receivedBytes, t.lastReportedBytes, t.missing.length === 0)) {
          t.lastReportedBytes = t.receivedBytes;
          this.io.progress(t.receivedBytes, t.totalBytes);
        }
        if (t.missing.length === 0) t.done();
      } catch (err) {
        this.transfer = undefined;
        await t.writing?.writer.close();
        t.writing = undefined;
        // A disk error (full, read-only) ends the transfer and is reported to the host, not a crash.
        t.failed(isKiwiError(err) ? err : new KiwiError('WEIGHTS_TRANSFER_FAILED', `Could not store the received weights: ${(err as Error).message}`));
      }
    });
  }
}

/**
 * The host's weights plans, one per assignment epoch: a plan may arrive before or after the member
 * asks for it. Only the newest assignment gets one: a wait for an older epoch ends (RING_REPLAN)
 * once a newer plan or a newer wait comes, and a plan older than the wait is dropped.
 */
export class WeightsPlans {
  private pending: WeightsPlan | undefined;
  private waiter: { epoch: number; take(plan: WeightsPlan): void; cancel(err: KiwiError): void } | undefined;

  constructor(private readonly timeoutMs = 60_000) {}

  /** A plan from the host. */
  put(plan: WeightsPlan): void {
    const w = this.waiter;
    if (w !== undefined && plan.epoch === w.epoch) return w.take(plan);
    if ((w !== undefined && plan.epoch < w.epoch) || (this.pending !== undefined && plan.epoch < this.pending.epoch)) return;
    w?.cancel(replaced());
    this.pending = plan;
  }

  /** Ends the wait in progress, if any (the member is closing): next() rejects with `err`. */
  cancel(err: KiwiError): void {
    this.pending = undefined;
    this.waiter?.cancel(err);
  }

  /** The plan of assignment `epoch`. */
  next(epoch: number): Promise<WeightsPlan> {
    if (Math.max(this.pending?.epoch ?? -Infinity, this.waiter?.epoch ?? -Infinity) > epoch) return Promise.reject(replaced());
    const ready = this.pending;
    this.pending = undefined;
    if (ready?.epoch === epoch) return Promise.resolve(ready);
    this.waiter?.cancel(replaced());
    return new Promise((resolve, reject) => {
      const end = (): void => {
        clearTimeout(timer);
        if (this.waiter === waiter) this.waiter = undefined;
      };
      const timer = setTimeout(() => {
        end();
        reject(new KiwiError('SESSION_TIMEOUT', 'The host did not describe this member\'s weights in time.'));
      }, this.timeoutMs);
      const waiter = {
        epoch,
        take: (plan: WeightsPlan) => {
          end();
          resolve(plan);
        },
        cancel: (err: KiwiError) => {
          end();
          reject(err);
        },
      };
      this.waiter = waiter;
    });
  }
}

const replaced = (): KiwiError => new KiwiError('RING_REPLAN', 'A newer assignment replaced this one before the host described its weights.');
