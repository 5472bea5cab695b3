import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelFingerprint } from '../runtime/shard-cache.js';
import { startRangeServer } from '../test-support/range-server.js';
import { hashSpans, PartialModel, stageSpans } from './member-weights.js';
import { fetchSpans } from './span-fetch.js';

let dir: string;
let path: string;
let file: GgufFile;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-span-fetch-'));
  path = await testModelPath('stories260K.gguf');
  file = await openGguf(path);
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const sortedRanges = (spans: ReadonlyArray<{ offset: number; bytes: number }>): string[] => spans.map((s) => `bytes=${s.offset}-${s.offset + s.bytes - 1}`).sort();

describe('a member fetching its spans over HTTP', () => {
  it('fetches exactly its spans from a URL with one range request each, verified like a transfer from the host', async () => {
    const original = await readFile(path);
    const server = await startRangeServer({ body: original });
    try {
      const spans = await hashSpans(path, stageSpans(file, { start: 2, end: 4 }));
      const partial = await PartialModel.open(join(dir, 'e'), await modelFingerprint(file), file.fileSize);
      let fetched = 0;
      await fetchSpans(`${server.url}/model.gguf`, spans, partial, (n) => (fetched += n));
      // Several spans are asked for at once, so they may arrive in any order: one request each.
      expect(server.requests.map((r) => r.range ?? '').sort()).toEqual(sortedRanges(spans));
      expect(fetched).toBe(spans.reduce((n, s) => n + s.bytes, 0));
      expect(partial.missing(spans)).toEqual([]);
      expect(await modelFingerprint(await openGguf(partial.path))).toBe(await modelFingerprint(file));
    } finally {
      await server.close();
    }
  });

  it('fails a URL transfer that ignores ranges or serves other bytes, keeping the spans verified before', async () => {
    const original = await readFile(path);
    const spans = await hashSpans(path, stageSpans(file, { start: 1, end: 2 }));
    const fp = await modelFingerprint(file);
    const noRanges = await startRangeServer({ body: original, supportRange: false });
    const other = Buffer.from(original);
    const last = spans[spans.length - 1]!;
    other[last.offset] = (other[last.offset]! + 1) & 0xff;
    const wrong = await startRangeServer({ body: other });
    try {
      const a = await PartialModel.open(join(dir, 'f'), fp, file.fileSize);
      await expect(fetchSpans(noRanges.url, spans, a, () => {})).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
      expect(a.missing(spans)).toEqual(spans);
      const b = await PartialModel.open(join(dir, 'g'), fp, file.fileSize);
      await expect(fetchSpans(wrong.url, spans, b, () => {})).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
      expect(b.missing(spans)).toEqual([last]);
      await expect(fetchSpans('http://127.0.0.1:1/none', spans, b, () => {})).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
    } finally {
      await noRanges.close();
      await wrong.close();
    }
  });

  it('asks for several spans at once: a server that answers only once three requests are open still fills them all', async () => {
    const original = await readFile(path);
    const spans = await hashSpans(path, stageSpans(file, { start: 0, end: 6 }));
    expect(spans.length).toBeGreaterThanOrEqual(3);
    // Holds every response until three are waiting: a member asking one span after another would wait forever.
    const held: Array<() => void> = [];
    let open = 0;
    let most = 0;
    const server = createServer((req, res) => {
      const [, a, b] = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '') ?? [];
      const start = Number(a);
      const end = Number(b);
      open++;
      most = Math.max(most, open);
      res.on('close', () => open--);
      held.push(() => {
        res.writeHead(206, { 'content-length': String(end - start + 1), 'content-range': `bytes ${start}-${end}/${original.length}` });
        res.end(original.subarray(start, end + 1));
      });
      if (most >= 3) for (const answer of held.splice(0)) answer();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const partial = await PartialModel.open(join(dir, 'p'), await modelFingerprint(file), file.fileSize);
      await fetchSpans(`http://127.0.0.1:${(server.address() as AddressInfo).port}/model.gguf`, spans, partial, () => {}, { token: 't'.repeat(43), parallel: 3 });
      expect(most).toBe(3);
      expect(partial.missing(spans)).toEqual([]);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
