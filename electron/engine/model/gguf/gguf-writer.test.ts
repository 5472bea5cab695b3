// The streaming GGUF writer: chunked writes equal the in-memory build, every value type round-trips
// through the reader, and stories260K is rewritten byte for byte.
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../test-models.js';
import { openGguf, parseGguf, readTensorBytes } from './gguf-reader.js';
import { GgmlType, GgufValueType, tensorByteLength } from './gguf-types.js';
import { buildGguf, createGgufWriter, gv, layoutGguf, writableMetadata } from './gguf-writer.js';
import type { GgufWriteValue } from './gguf-writer.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-gguf-writer-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const TENSORS = [
  { name: 'a', type: GgmlType.F32, dims: [5] },
  { name: 'empty', type: GgmlType.F16, dims: [0, 3] },
  { name: 'b', type: GgmlType.Q4_0, dims: [64, 3] },
  { name: 'c', type: GgmlType.Q6_K, dims: [256, 2, 1] },
];

function fill(n: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed * 17) & 0xff);
}

describe('GGUF writer', () => {
  it('streams tensors in chunks of any size to the same bytes as the in-memory builder', async () => {
    const metadata: Array<[string, GgufWriteValue]> = [
      ['general.architecture', 'llama'],
      ['x.ints', Int32Array.of(1, -2, 3)],
      ['x.nested', gv.array(GgufValueType.ARRAY, [gv.array(GgufValueType.FLOAT32, [gv.f32(0.5)])])],
    ];
    const data = TENSORS.map((t, i) => fill(tensorByteLength(t.type, t.dims), i));
    const expected = buildGguf({ metadata, tensors: TENSORS }, data);
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 700 }), async (chunkSize) => {
        const path = join(dir, `chunked-${String(chunkSize)}.gguf`);
        const w = await createGgufWriter(path, { metadata, tensors: TENSORS });
        const all = Buffer.concat(data);
        for (let off = 0; off < all.length; off += chunkSize) await w.write(all.subarray(off, off + chunkSize));
        await w.finish();
        expect(new Uint8Array(await readFile(path))).toEqual(expected);
        await rm(path);
      }),
      { numRuns: 25 },
    );
  });

  it('round-trips metadata and tensor data through the reader', async () => {
    const path = join(dir, 'roundtrip.gguf');
    const w = await createGgufWriter(path, {
      metadata: [
        ['general.architecture', 'llama'],
        ['general.name', 'round ✓ trip'],
        ['a.u64', gv.u64(2n ** 60n)],
        ['a.f64', gv.f64(-1.25)],
        ['a.bool', false],
        ['a.strs', ['one', 'two']],
        ['a.u16s', Uint16Array.of(65535, 0)],
      ],
      tensors: TENSORS,
      alignment: 128,
    });
    const data = TENSORS.map((t, i) => fill(tensorByteLength(t.type, t.dims), i + 5));
    for (const d of data) await w.write(d);
    await w.finish();
    const f = await openGguf(path);
    expect(f.version).toBe(3);
    expect(f.alignment).toBe(128);
    expect(f.dataOffset % 128).toBe(0);
    expect(f.metadata.get('general.name')).toBe('round ✓ trip');
    expect(f.metadata.get('a.u64')).toBe(2n ** 60n);
    expect(f.metadata.get('a.f64')).toBe(-1.25);
    expect(f.metadata.get('a.bool')).toBe(false);
    expect(f.metadata.get('a.strs')).toEqual(['one', 'two']);
    expect(f.metadata.get('a.u16s')).toEqual(Uint16Array.of(65535, 0));
    expect(f.metadata.get('general.alignment')).toBe(128);
    for (const [i, t] of TENSORS.entries()) {
      const info = f.tensor(t.name)!;
      expect(info.dims).toEqual(t.dims);
      expect(info.offset % 128).toBe(0);
      expect(new Uint8Array(await readTensorBytes(f, info))).toEqual(data[i]);
    }
    expect((await stat(path)).size).toBe(f.fileSize);
  });

  it('rewrites stories260K.gguf byte for byte from what the reader read', async () => {
    const path = await testModelPath('stories260K.gguf');
    const original = new Uint8Array(await readFile(path));
    const f = parseGguf(original);
    const metadata = writableMetadata(f);
    expect(f.metadataTypes.get('llama.attention.layer_norm_rms_epsilon')).toEqual({ type: GgufValueType.FLOAT32 });
    expect(f.metadataTypes.get('tokenizer.ggml.scores')).toEqual({ type: GgufValueType.ARRAY, elementType: GgufValueType.FLOAT32 });
    const data = f.tensors.map((t) => original.subarray(t.offset, t.offset + t.byteLength));
    const rebuilt = buildGguf({ metadata, tensors: f.tensors }, data);
    expect(rebuilt.length).toBe(original.length);
    expect(Buffer.from(rebuilt).equals(Buffer.from(original))).toBe(true);
  });

  it('writes back every value type, nested arrays included, with the types the reader recorded', () => {
    const spec = {
      metadata: [
        ['a.u8', gv.u8(1)],
        ['a.i16', gv.i16(-2)],
        ['a.u64', gv.u64(3)],
        ['a.f64', gv.f64(0.25)],
        ['a.bools', gv.array(GgufValueType.BOOL, [true, false])],
        ['a.nested', gv.array(GgufValueType.ARRAY, [gv.array(GgufValueType.BOOL, [true]), ['s'], Int8Array.of(-1)])],
      ] as Array<[string, GgufWriteValue]>,
      tensors: [],
    };
    const bytes = buildGguf(spec, []);
    expect(buildGguf({ metadata: writableMetadata(parseGguf(bytes)), tensors: [] }, [])).toEqual(bytes);
  });

  it('round-trips arbitrary metadata through reader and writer (property)', () => {
    const scalar = fc.oneof(
      fc.integer({ min: 0, max: 255 }).map(gv.u8),
      fc.integer({ min: -128, max: 127 }).map(gv.i8),
      fc.integer({ min: 0, max: 65535 }).map(gv.u16),
      fc.integer({ min: -32768, max: 32767 }).map(gv.i16),
      fc.nat().map(gv.u32),
      fc.integer().map(gv.i32),
      fc.float({ noNaN: true }).map(gv.f32),
      fc.double({ noNaN: true }).map(gv.f64),
      fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map(gv.u64),
      fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(gv.i64),
      fc.boolean(),
      fc.string({ unit: 'grapheme', maxLength: 20 }),
    );
    const array = fc.oneof(
      fc.array(fc.string({ maxLength: 8 }), { maxLength: 5 }),
      fc.array(fc.boolean(), { maxLength: 5 }).map((b) => gv.array(GgufValueType.BOOL, b)),
      fc.array(fc.integer(), { maxLength: 5 }).map((x) => Int32Array.from(x)),
      fc.array(fc.float({ noNaN: true }), { maxLength: 5 }).map((x) => Float32Array.from(x)),
      fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { maxLength: 3 }).map((x) => BigUint64Array.from(x)),
      fc.array(fc.array(fc.integer({ min: -128, max: 127 }), { maxLength: 3 }), { maxLength: 3 }).map((xs) =>
        gv.array(GgufValueType.ARRAY, xs.map((x) => Int8Array.from(x))),
      ),
    );
    const entries = fc.uniqueArray(fc.tuple(fc.string({ minLength: 1, maxLength: 12 }), fc.oneof(scalar, array)), {
      selector: ([k]) => k,
      maxLength: 12,
    });
    fc.assert(
      fc.property(entries, (md) => {
        const metadata = md.filter(([k]) => k !== 'general.alignment') as Array<[string, GgufWriteValue]>;
        const bytes = buildGguf({ metadata, tensors: [] }, []);
        const parsed = parseGguf(bytes);
        expect([...parsed.metadata.keys()]).toEqual(metadata.map(([k]) => k));
        expect(buildGguf({ metadata: writableMetadata(parsed), tensors: [] }, [])).toEqual(bytes);
      }),
      { numRuns: 200 },
    );
  });

  it('refuses data that does not match the tensor index', async () => {
    const path = join(dir, 'short.gguf');
    const w = await createGgufWriter(path, { metadata: [], tensors: TENSORS });
    await w.write(new Uint8Array(20));
    await expect(w.finish()).rejects.toThrow(/tensor 'b'/);
    const w2 = await createGgufWriter(path, { metadata: [], tensors: [TENSORS[0]!] });
    await expect(w2.write(new Uint8Array(21))).rejects.toThrow(/more tensor data/);
    await w2.abort();
  });

  it('refuses numbers that do not fit their declared type, and duplicate keys', () => {
    expect(() => layoutGguf({ metadata: [['k', gv.u8(256)]], tensors: [] })).toThrow(/does not fit UINT8/);
    expect(() => layoutGguf({ metadata: [['k', gv.i32(1.5)]], tensors: [] })).toThrow(/does not fit INT32/);
    expect(() => layoutGguf({ metadata: [['k', 'a'], ['k', 'b']], tensors: [] })).toThrow(/given twice/);
    expect(() => layoutGguf({ metadata: [], tensors: [{ name: 'q', type: GgmlType.Q4_0, dims: [31] }] })).toThrow(/block size 32/);
  });
});
