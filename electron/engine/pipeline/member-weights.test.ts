import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelFingerprint } from '../runtime/shard-cache.js';
import { hashSpans, PartialModel, SpanHashes, stageSpans, stageTensorNames } from './member-weights.js';

let dir: string;
let path: string;
let file: GgufFile;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-weights-'));
  path = await testModelPath('stories260K.gguf');
  file = await openGguf(path);
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** Copies the spans from the real file into the partial one as the host would stream them. */
async function transfer(partial: PartialModel, spans: Awaited<ReturnType<typeof hashSpans>>, corrupt = false): Promise<void> {
  const bytes = await readFile(path);
  for (const s of spans) {
    const data = bytes.subarray(s.offset, s.offset + s.bytes).slice();
    if (corrupt && data.length > 0) data[0] = (data[0]! + 1) & 0xff;
    await partial.write(s.offset, data, spans);
    await partial.verify(s);
  }
}

describe('a member\'s weights', () => {
  it('names only the blocks of its range, plus the embedding when it starts at layer 0', () => {
    const mid = stageTensorNames(file, { start: 1, end: 3 });
    expect(mid.every((n) => /^blk\.[12]\./.test(n))).toBe(true);
    expect(mid.length).toBe(file.tensors.filter((t) => /^blk\.[12]\./.test(t.name)).length);
    expect(stageTensorNames(file, { start: 0, end: 1 })).toContain('token_embd.weight');
    expect(stageTensorNames(file, { start: 0, end: 5 })).not.toContain('output_norm.weight');
  });

  it('covers the header and its tensors with few spans, far less than the whole file', () => {
    const spans = stageSpans(file, { start: 1, end: 3 });
    expect(spans[0]).toEqual({ offset: 0, bytes: file.dataOffset });
    const total = spans.reduce((n, s) => n + s.bytes, 0);
    expect(total).toBeLessThan(file.fileSize / 2);
    for (const n of stageTensorNames(file, { start: 1, end: 3 })) {
      const t = file.tensor(n)!;
      expect(spans.some((s) => t.offset >= s.offset && t.offset + t.byteLength <= s.offset + s.bytes)).toBe(true);
    }
  });

  it('builds a partial GGUF that opens like the original, with the same fingerprint and tensor bytes', async () => {
    const spans = await hashSpans(path, stageSpans(file, { start: 1, end: 3 }));
    const partial = await PartialModel.open(join(dir, 'a'), await modelFingerprint(file), file.fileSize);
    await transfer(partial, spans);
    const copy = await openGguf(partial.path);
    expect(await modelFingerprint(copy)).toBe(await modelFingerprint(file));
    const original = await readFile(path);
    const got = await readFile(partial.path);
    const t = file.tensor('blk.2.attn_q.weight')!;
    expect(Buffer.compare(got.subarray(t.offset, t.offset + t.byteLength), original.subarray(t.offset, t.offset + t.byteLength))).toBe(0);
    expect((await stat(partial.path)).size).toBe(file.fileSize);
    expect(partial.missing(spans)).toEqual([]);
  });

  it('resumes: a reopened partial model asks only for the spans it has not verified', async () => {
    const spans = await hashSpans(path, stageSpans(file, { start: 3, end: 5 }));
    const fp = await modelFingerprint(file);
    const first = await PartialModel.open(join(dir, 'b'), fp, file.fileSize);
    await transfer(first, spans.slice(0, 1));
    const again = await PartialModel.open(join(dir, 'b'), fp, file.fileSize);
    expect(again.missing(spans)).toEqual(spans.slice(1));
  });

  it('lets two members on one machine fill the same file at once without losing either\'s progress', async () => {
    const fp = await modelFingerprint(file);
    const [first, second] = await Promise.all([
      hashSpans(path, stageSpans(file, { start: 0, end: 2 })),
      hashSpans(path, stageSpans(file, { start: 2, end: 5 })),
    ]);
    const [p1, p2] = await Promise.all([PartialModel.open(join(dir, 'd'), fp, file.fileSize), PartialModel.open(join(dir, 'd'), fp, file.fileSize)]);
    await Promise.all([transfer(p1, first), transfer(p2, second)]);
    const later = await PartialModel.open(join(dir, 'd'), fp, file.fileSize);
    expect(later.missing([...first, ...second])).toEqual([]);
  });

  it('refuses corrupted bytes and bytes outside the announced spans', async () => {
    const spans = await hashSpans(path, stageSpans(file, { start: 1, end: 2 }));
    const partial = await PartialModel.open(join(dir, 'c'), await modelFingerprint(file), file.fileSize);
    await expect(transfer(partial, spans, true)).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
    const end = spans[spans.length - 1]!;
    await expect(partial.write(end.offset + end.bytes + 1, new Uint8Array(4), spans)).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
    expect(partial.missing(spans)).toEqual(spans);
  });
});

describe('weights a member already holds', () => {
  it('gives each layer the same span in every range that holds it, never one across layers', () => {
    const a = stageSpans(file, { start: 1, end: 3 });
    const b = stageSpans(file, { start: 2, end: 5 });
    const key = (s: { offset: number; bytes: number }): string => `${s.offset}+${s.bytes}`;
    const layer2 = stageSpans(file, { start: 2, end: 3 }).map(key);
    for (const k of layer2) {
      expect(a.map(key)).toContain(k);
      expect(b.map(key)).toContain(k);
    }
    const layerOf = new Map(file.tensors.map((t) => [t.offset, /^blk\.(\d+)\./.exec(t.name)?.[1] ?? t.name]));
    for (const s of b.slice(1)) {
      const inside = file.tensors.filter((t) => t.offset >= s.offset && t.offset < s.offset + s.bytes);
      expect(new Set(inside.map((t) => layerOf.get(t.offset))).size).toBe(1);
    }
  });

  it('asks only for the layers a new range adds once the old range is on disk', async () => {
    const partial = await PartialModel.open(join(dir, 'reuse'), await modelFingerprint(file), file.fileSize);
    await transfer(partial, await hashSpans(path, stageSpans(file, { start: 1, end: 3 })));
    const next = await hashSpans(path, stageSpans(file, { start: 2, end: 5 }));
    const added = new Set(stageSpans(file, { start: 3, end: 5 }).filter((s) => s.offset !== 0).map((s) => s.offset));
    expect(partial.missing(next).map((s) => s.offset).sort((x, y) => x - y)).toEqual([...added].sort((x, y) => x - y));
  });

  it('adopts spans lying inside a span verified under an older, merged layout, after checking their hash', async () => {
    const partial = await PartialModel.open(join(dir, 'adopt'), await modelFingerprint(file), file.fileSize);
    const blocks = stageSpans(file, { start: 1, end: 4 }).slice(1);
    const merged = { offset: blocks[0]!.offset, bytes: blocks.at(-1)!.offset + blocks.at(-1)!.bytes - blocks[0]!.offset };
    await transfer(partial, await hashSpans(path, [merged]));
    const inner = await hashSpans(path, stageSpans(file, { start: 2, end: 3 }).slice(1));
    const forged = inner.map((s) => ({ ...s, sha256: '0'.repeat(64) }));
    expect(await partial.adopt(forged)).toBe(0);
    expect(partial.missing(forged)).toEqual(forged);
    expect(await partial.adopt(inner)).toBe(inner.length);
    expect(partial.missing(inner)).toEqual([]);
    // Recorded: a later run finds them verified without hashing again.
    const again = await PartialModel.open(join(dir, 'adopt'), await modelFingerprint(file), file.fileSize);
    expect(again.missing(inner)).toEqual([]);
  });

  it('hashes each span of the host\'s file once and reuses it for later plans', async () => {
    const hashes = new SpanHashes(path);
    const first = await hashes.hash(stageSpans(file, { start: 1, end: 3 }));
    expect(first).toEqual(await hashSpans(path, stageSpans(file, { start: 1, end: 3 })));
    const before = hashes.size;
    await hashes.hash(stageSpans(file, { start: 1, end: 3 }));
    expect(hashes.size).toBe(before);
    await hashes.hash(stageSpans(file, { start: 2, end: 4 }));
    expect(hashes.size).toBe(before + stageSpans(file, { start: 3, end: 4 }).length - 1);
  });
});
