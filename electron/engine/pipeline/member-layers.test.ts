import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelFingerprint } from '../runtime/shard-cache.js';
import { builtSpans, layerSpans, layerTags, partialCacheSource } from './member-layers.js';
import { hashSpans, PartialModel, stageSpans, type HashedSpan } from './member-weights.js';

let dir: string;
let path: string;
let file: GgufFile;
let spans: HashedSpan[];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-layers-'));
  path = await testModelPath('stories260K.gguf');
  file = await openGguf(path);
  spans = await hashSpans(path, stageSpans(file, { start: 1, end: 4 }));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

async function received(name: string): Promise<PartialModel> {
  const partial = await PartialModel.open(join(dir, name), await modelFingerprint(file), file.fileSize);
  const bytes = await readFile(path);
  for (const s of spans) {
    await partial.write(s.offset, bytes.subarray(s.offset, s.offset + s.bytes).slice(), spans);
    await partial.verify(s);
  }
  return partial;
}

describe('a member\'s layers, received and built', () => {
  it('tells each layer\'s spans apart from the model-wide ones, and picks those of built layers', () => {
    const { layers, rest } = layerSpans(file, spans);
    expect([...layers.keys()].sort()).toEqual([1, 2, 3]);
    expect(rest[0]).toEqual(spans[0]); // the header
    expect([...layers.values()].flat().length + rest.length).toBe(spans.length);
    const tags = layerTags(file, spans);
    expect(builtSpans(file, spans, new Set([tags.get(2)!]))).toEqual(layers.get(2));
    // A tag names the bytes: another sha256 is another layer.
    const other = spans.map((s) => (layers.get(2)!.includes(s) ? { ...s, sha256: '0'.repeat(64) } : s));
    expect(builtSpans(file, other, new Set([tags.get(2)!]))).toEqual([]);
  });

  it.runIf(process.platform === 'linux')('releases a built layer\'s received bytes (a hole on disk) and asks for them again only if needed raw', async () => {
    const partial = await received('release');
    const { layers } = layerSpans(file, spans);
    const blocksBefore = (await stat(partial.path)).blocks;
    const layer2 = layers.get(2)!;
    const freed = await partial.release(layer2);
    expect(freed).toBe(layer2.reduce((n, s) => n + s.bytes, 0));
    const freedDisk = (blocksBefore - (await stat(partial.path)).blocks) * 512;
    // Whole blocks inside the span are freed; at most one partial block at each end stays.
    expect(freedDisk).toBeGreaterThan(freed - 2 * 4096 * layer2.length);
    expect(partial.missing(spans)).toEqual(layer2);
    expect(partialCacheSource(file, spans, (s) => partial.holds(s)).rawLayer!(2)).toBe(false);
    // The others' bytes are intact, and the release is remembered across runs.
    const kept = spans.filter((s) => !layer2.includes(s));
    expect(await hashSpans(partial.path, kept)).toEqual(kept);
    const again = await PartialModel.open(join(dir, 'release'), await modelFingerprint(file), file.fileSize);
    expect(again.missing(spans)).toEqual(layer2);
    expect(await again.release(layer2)).toBe(0);
  });
});
