import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelFingerprint } from '../runtime/shard-cache.js';
import { hashSpans, stageSpans, type HashedSpan } from './member-weights.js';
import type { Assign, MemberToHostBody, WeightsPlan } from './ring-protocol.js';
import { startWeightsHttp } from './weights-http.js';
import { PROGRESS_EVERY_BYTES, progressDue, WeightsPlans, WeightsReceipt } from './weights-receipt.js';

let dir: string;
let path: string;
let bytes: Uint8Array;
let assign: Assign;
let plan: WeightsPlan;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-receipt-'));
  path = await testModelPath('stories260K.gguf');
  bytes = new Uint8Array(await readFile(path));
  const file = await openGguf(path);
  const spans = await hashSpans(path, stageSpans(file, { start: 1, end: 3 }));
  assign = {
    kind: 'assign', epoch: 1, start: 1, end: 3, prev: 0, next: 0, encoding: 'f32', zstd: false, receive: { tensor: 'f32', zstd: false },
    model: { fingerprint: await modelFingerprint(file), name: 'stories260K', fileBytes: (await stat(path)).size }, maxPositions: 64,
  };
  plan = { kind: 'weights-plan', epoch: 1, spans };
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** A receipt and what it told the host and the member. */
function receiptIn(weightsDir: string, modelPath?: string, warnings?: KiwiError[]) {
  const sent: MemberToHostBody[] = [];
  const progress: Array<[number, number]> = [];
  const receipt = new WeightsReceipt({ weightsDir, ...(modelPath !== undefined ? { modelPath } : {}) }, {
    send: (body) => sent.push(body),
    progress: (received, total) => progress.push([received, total]),
    warning: (err) => {
      if (warnings === undefined) throw err;
      warnings.push(err);
    },
  });
  return { receipt, sent, progress };
}

/** Streams the requested spans as the host does, in chunks of at most `chunkBytes`. */
function stream(receipt: WeightsReceipt, spans: readonly { offset: number; bytes: number }[], chunkBytes = 4096): void {
  for (const s of spans) {
    for (let at = 0; at < s.bytes; at += chunkBytes) {
      const n = Math.min(chunkBytes, s.bytes - at);
      receipt.chunk(s.offset + at, bytes.slice(s.offset + at, s.offset + at + n));
    }
  }
}

const total = (spans: readonly HashedSpan[]): number => spans.reduce((n, s) => n + s.bytes, 0);

describe('a member receiving its weights', () => {
  it('asks the host for every span, stores and verifies what arrives, and reports the end', async () => {
    const weightsDir = join(dir, 'host');
    const { receipt, sent, progress } = receiptIn(weightsDir);
    const got = receipt.obtain(assign, plan);
    await expect.poll(() => sent.length).toBe(1);
    const request = sent[0];
    if (request?.kind !== 'weights-request') throw new Error(`unexpected ${request?.kind}`);
    expect(request.spans).toEqual(plan.spans.map((s) => ({ offset: s.offset, bytes: s.bytes })));
    stream(receipt, request.spans);
    const r = await got;
    expect(r.source).toBe('host');
    expect(r.transferredBytes).toBe(total(plan.spans));
    expect(progress.at(-1)).toEqual([total(plan.spans), total(plan.spans)]);
    expect(await modelFingerprint(r.file)).toBe(assign.model.fingerprint);
  });

  it('takes what an earlier transfer verified on disk without asking again', async () => {
    const { receipt, sent } = receiptIn(join(dir, 'host'));
    expect((await receipt.obtain(assign, plan)).source).toBe('cache');
    expect(sent).toEqual([]);
  });

  it('uses its own copy of the model when the fingerprint matches', async () => {
    const { receipt, sent } = receiptIn(join(dir, 'unused'), path);
    expect(await receipt.obtain(assign, plan)).toMatchObject({ source: 'local', transferredBytes: 0 });
    expect(sent).toEqual([]);
  });

  it.each([
    ['a re-plan cancelled', 'cancelled', (r: WeightsReceipt) => r.cancel(new KiwiError('RING_REPLAN', 'The host re-planned the ring during the transfer.')), 'RING_REPLAN'],
    ['the member left', 'left', (r: WeightsReceipt) => r.close(new KiwiError('SESSION_ENDED', 'This member left the session.')), 'SESSION_ENDED'],
  ] as const)('ends a transfer %s: obtain() rejects, its late chunks are dropped', async (_why, folder, end, code) => {
    const { receipt, sent } = receiptIn(join(dir, folder));
    const got = receipt.obtain(assign, plan);
    await expect.poll(() => sent.length).toBe(1);
    end(receipt);
    await expect(got).rejects.toSatisfy((err: unknown) => isKiwiError(err, code));
    stream(receipt, plan.spans);
  });

  it('fails the transfer on a span whose bytes do not match the host\'s hash', async () => {
    const { receipt, sent } = receiptIn(join(dir, 'corrupt'));
    const got = receipt.obtain(assign, plan);
    await expect.poll(() => sent.length).toBe(1);
    const first = plan.spans[0] as HashedSpan;
    const data = bytes.slice(first.offset, first.offset + first.bytes);
    data[0] = ((data[0] ?? 0) + 1) & 0xff;
    receipt.chunk(first.offset, data);
    await expect(got).rejects.toSatisfy((err: unknown) => isKiwiError(err));
  });

  it('hashes the streamed bytes as they arrive: one bad byte in a middle chunk is refused, the span is not kept, and is asked for again', async () => {
    const weightsDir = join(dir, 'corrupt-middle');
    const { receipt, sent } = receiptIn(weightsDir);
    const got = receipt.obtain(assign, plan);
    await expect.poll(() => sent.length).toBe(1);
    const big = plan.spans.reduce((a, b) => (b.bytes > a.bytes ? b : a));
    expect(big.bytes).toBeGreaterThan(3 * 4096);
    const spans = plan.spans.slice(0, plan.spans.indexOf(big));
    stream(receipt, spans);
    // The big span in 4 KiB chunks, its second chunk altered by one bit.
    for (let at = 0; at < big.bytes; at += 4096) {
      const data = bytes.slice(big.offset + at, big.offset + Math.min(at + 4096, big.bytes));
      if (at === 4096) data[7] = (data[7]! ^ 1) & 0xff;
      receipt.chunk(big.offset + at, data);
    }
    await expect(got).rejects.toSatisfy((err: unknown) => isKiwiError(err, 'WEIGHTS_TRANSFER_FAILED') && /sha256/.test((err as Error).message));
    // A new receipt keeps the spans verified before it and asks for the bad one (and the rest) again.
    const again = receiptIn(weightsDir);
    const next = again.receipt.obtain(assign, plan);
    await expect.poll(() => again.sent.length).toBe(1);
    const request = again.sent[0];
    if (request?.kind !== 'weights-request') throw new Error(`unexpected ${request?.kind}`);
    expect(request.spans).toEqual(plan.spans.slice(spans.length).map((s) => ({ offset: s.offset, bytes: s.bytes })));
    stream(again.receipt, request.spans);
    expect(await next).toMatchObject({ source: 'host', transferredBytes: total(plan.spans.slice(spans.length)) });
  });

  it('refuses a chunk that is not the next bytes of the span being received', async () => {
    const { receipt, sent } = receiptIn(join(dir, 'out-of-order'));
    const got = receipt.obtain(assign, plan);
    await expect.poll(() => sent.length).toBe(1);
    const first = plan.spans[0] as HashedSpan;
    receipt.chunk(first.offset + 16, bytes.slice(first.offset + 16, first.offset + 32));
    await expect(got).rejects.toSatisfy((err: unknown) => isKiwiError(err, 'WEIGHTS_TRANSFER_FAILED') && /not the next bytes/.test((err as Error).message));
  });
});

describe('a member receiving its weights from the host\'s HTTP range server', () => {
  it('fetches every span from it with the plan\'s token, asking nothing over the session', async () => {
    const server = await startWeightsHttp(path, { host: '127.0.0.1' });
    try {
      const { receipt, sent, progress } = receiptIn(join(dir, 'http'));
      const r = await receipt.obtain(assign, { ...plan, http: { urls: server.urls, token: await server.grant('m', plan.spans) } });
      expect(r).toMatchObject({ source: 'host-http', transferredBytes: total(plan.spans) });
      expect(sent.filter((b) => b.kind === 'weights-request')).toEqual([]);
      expect(progress.at(-1)).toEqual([total(plan.spans), total(plan.spans)]);
      expect(await modelFingerprint(r.file)).toBe(assign.model.fingerprint);
    } finally {
      await server.close();
    }
  });

  it('falls back to the encrypted stream when no address of it can be reached, with a warning', async () => {
    const closed = await startWeightsHttp(path, { host: '127.0.0.1' });
    const token = await closed.grant('m', plan.spans);
    await closed.close();
    const warnings: KiwiError[] = [];
    const { receipt, sent } = receiptIn(join(dir, 'http-unreachable'), undefined, warnings);
    const got = receipt.obtain(assign, { ...plan, http: { urls: [...closed.urls, closed.urls[0]!.replace('127.0.0.1', '127.0.0.2')], token } });
    await expect.poll(() => sent.length).toBe(1);
    const request = sent[0];
    if (request?.kind !== 'weights-request') throw new Error(`unexpected ${request?.kind}`);
    expect(request.spans).toEqual(plan.spans.map((s) => ({ offset: s.offset, bytes: s.bytes })));
    stream(receipt, request.spans);
    expect(await got).toMatchObject({ source: 'host', transferredBytes: total(plan.spans) });
    expect(warnings.map((w) => w.code)).toEqual(['WEIGHTS_TRANSFER_FAILED', 'WEIGHTS_TRANSFER_FAILED']);
    expect(warnings.at(-1)?.message).toMatch(/over the encrypted session/);
  });

  it('stops a download in progress when the member leaves, and asks nothing over the session', async () => {
    // A server that accepts and never answers: without the stop, the download would wait out its idle timeout.
    let connected = 0;
    let hungUp = 0;
    const silent = createServer((socket) => {
      connected++;
      socket.on('close', () => hungUp++);
      socket.resume(); // reads the request (and then the client's hang-up) without answering
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const { receipt, sent } = receiptIn(join(dir, 'http-left'), undefined, []);
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
      const got = receipt.obtain(assign, { ...plan, http: { urls: [url], token: 'x'.repeat(43) } });
      await expect.poll(() => connected).toBeGreaterThan(0);
      receipt.close(new KiwiError('SESSION_ENDED', 'This member left the session.'));
      await expect(got).rejects.toSatisfy((err: unknown) => isKiwiError(err, 'SESSION_ENDED'));
      expect(sent).toEqual([]);
      await expect.poll(() => hungUp).toBe(connected);
    } finally {
      silent.close();
    }
  });

  it('falls back when it refuses the token, streaming only what it did not give', async () => {
    const server = await startWeightsHttp(path, { host: '127.0.0.1' });
    try {
      const warnings: KiwiError[] = [];
      const { receipt, sent } = receiptIn(join(dir, 'http-refused'), undefined, warnings);
      const got = receipt.obtain(assign, { ...plan, http: { urls: server.urls, token: 'x'.repeat(43) } });
      await expect.poll(() => sent.length).toBe(1);
      const request = sent[0];
      if (request?.kind !== 'weights-request') throw new Error(`unexpected ${request?.kind}`);
      stream(receipt, request.spans);
      expect((await got).source).toBe('host');
      expect(warnings[0]?.message).toMatch(/HTTP 403/);
    } finally {
      await server.close();
    }
  });
});

describe('weights progress', () => {
  it.each([
    ['not before another MiB', PROGRESS_EVERY_BYTES - 1, 0, false, false],
    ['after a MiB', PROGRESS_EVERY_BYTES + 5, 5, false, true],
    ['always at the end', 10, 0, true, true],
  ] as const)('is due %s', (_what, received, last, finished, due) => {
    expect(progressDue(received, last, finished)).toBe(due);
  });
});

describe('the host\'s weights plans', () => {
  const planOf = (epoch: number): WeightsPlan => ({ kind: 'weights-plan', epoch, spans: [] });

  it('gives a plan that arrived before it was asked for', async () => {
    const plans = new WeightsPlans();
    plans.put(planOf(2));
    await expect(plans.next(2)).resolves.toEqual(planOf(2));
  });

  it('waits for the plan of its epoch, dropping older plans', async () => {
    const plans = new WeightsPlans();
    plans.put(planOf(1));
    const next = plans.next(2);
    plans.put(planOf(1));
    plans.put(planOf(2));
    await expect(next).resolves.toEqual(planOf(2));
  });

  it('gives only the newest assignment its plan: a newer plan or wait ends an older wait, and an older wait comes too late', async () => {
    const replanned = (err: unknown): boolean => isKiwiError(err, 'RING_REPLAN');
    // A newer plan while waiting: that assignment was replaced; the plan waits for its own.
    let plans = new WeightsPlans();
    const second = plans.next(2);
    plans.put(planOf(3));
    await expect(second).rejects.toSatisfy(replanned);
    await expect(plans.next(3)).resolves.toEqual(planOf(3));
    // A newer wait ends the older one.
    plans = new WeightsPlans();
    const older = plans.next(1);
    const newer = plans.next(2);
    await expect(older).rejects.toSatisfy(replanned);
    // An older assignment's wait that comes after them ends at once, leaving the newer's plan and wait be.
    await expect(plans.next(1)).rejects.toSatisfy(replanned);
    plans.put(planOf(2));
    await expect(newer).resolves.toEqual(planOf(2));
    plans.put(planOf(4));
    plans.put(planOf(3));
    await expect(plans.next(3)).rejects.toSatisfy(replanned);
    await expect(plans.next(4)).resolves.toEqual(planOf(4));
  });

  it('ends the wait when the member leaves', async () => {
    const plans = new WeightsPlans();
    const next = plans.next(1);
    plans.cancel(new KiwiError('SESSION_ENDED', 'This member left the session.'));
    await expect(next).rejects.toSatisfy((err: unknown) => isKiwiError(err, 'SESSION_ENDED'));
  });
});
