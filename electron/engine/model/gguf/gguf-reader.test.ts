// The GGUF reader on real files (stories260K's published facts, llama.cpp's vocab files, a sparse
// 34 GiB file) and on hand-made broken headers, each refused with a stable code and a clear message.
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KiwiError } from '../../errors.js';
import { testModelPath } from '../test-models.js';
import { openGguf, parseGguf, readTensorBytes } from './gguf-reader.js';
import { GgmlType, GgufValueType } from './gguf-types.js';
import { buildGguf, gv, layoutGguf } from './gguf-writer.js';
import { metaNumber, metaString, metaStringArray, requireString } from './gguf-metadata.js';

const VOCABS = [
  'bert-bge',
  'deepseek-coder',
  'deepseek-llm',
  'falcon',
  'gpt-2',
  'llama-spm',
  'mpt',
  'phi-3',
  'refact',
  'starcoder',
];

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-gguf-reader-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Expects `fn` to throw a KiwiError with `code` whose message matches `pattern`. */
function expectKiwi(fn: () => unknown, code: string, pattern: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(KiwiError);
  expect((caught as KiwiError).code).toBe(code);
  expect((caught as KiwiError).message).toMatch(pattern);
}

/** A little-endian byte builder for hand-made (often broken) headers. */
class Bytes {
  private parts: number[] = [];
  u32(v: number): this {
    for (let i = 0; i < 4; i++) this.parts.push((v >>> (8 * i)) & 0xff);
    return this;
  }
  u64(v: number | bigint): this {
    let b = BigInt(v);
    for (let i = 0; i < 8; i++) {
      this.parts.push(Number(b & 0xffn));
      b >>= 8n;
    }
    return this;
  }
  str(s: string): this {
    const b = new TextEncoder().encode(s);
    this.u64(b.length);
    this.parts.push(...b);
    return this;
  }
  raw(...b: number[]): this {
    this.parts.push(...b);
    return this;
  }
  done(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

const header = (version: number, tensors: number | bigint, kvs: number | bigint): Bytes =>
  new Bytes().u32(0x46554747).u32(version).u64(tensors).u64(kvs);

describe('openGguf on real files', () => {
  it('reads the published facts of stories260K.gguf', async () => {
    const f = await openGguf(await testModelPath('stories260K.gguf'));
    expect(f.version).toBe(3);
    expect(f.tensors).toHaveLength(48);
    expect(f.metadata.size).toBe(19);
    expect(f.alignment).toBe(32);
    expect(f.dataOffset).toBe(14176);
    expect(f.fileSize).toBe(1185376);
    expect(requireString(f.metadata, 'general.architecture')).toBe('llama');
    expect(metaNumber(f.metadata, 'llama.block_count')).toBe(5);
    expect(metaNumber(f.metadata, 'llama.attention.layer_norm_rms_epsilon')).toBeCloseTo(1e-5, 10);
    expect(metaStringArray(f.metadata, 'tokenizer.ggml.tokens')).toHaveLength(512);
    expect(f.metadata.get('tokenizer.ggml.scores')).toBeInstanceOf(Float32Array);
    expect(f.metadata.get('tokenizer.ggml.token_type')).toBeInstanceOf(Int32Array);
    const embd = f.tensor('token_embd.weight');
    expect(embd).toMatchObject({ type: GgmlType.F32, dims: [64, 512], offset: 14176, byteLength: 64 * 512 * 4 });
    const q = f.tensor('blk.0.attn_k.weight');
    expect(q).toMatchObject({ type: GgmlType.F32, dims: [64, 32], byteLength: 64 * 32 * 4 });
    const last = f.tensors.reduce((a, b) => (a.offset > b.offset ? a : b));
    expect(last.offset + last.byteLength).toBe(f.fileSize);
  });

  it('reads a tensor byte range exactly where the file holds it', async () => {
    const path = await testModelPath('stories260K.gguf');
    const f = await openGguf(path);
    const whole = await readFile(path);
    const t = f.tensor('blk.2.ffn_down.weight')!;
    const all = await readTensorBytes(f, t);
    expect(all.equals(whole.subarray(t.offset, t.offset + t.byteLength))).toBe(true);
    const part = await readTensorBytes(f, t, { start: 100, end: 228 });
    expect(part.equals(whole.subarray(t.offset + 100, t.offset + 228))).toBe(true);
    await expect(readTensorBytes(f, t, { start: 0, end: t.byteLength + 1 })).rejects.toThrow(/outside tensor/);
  });

  it('reads every vocab-only file of llama.cpp with its tokens and no tensors', async () => {
    for (const name of VOCABS) {
      const path = await testModelPath(`vocab/ggml-vocab-${name}.gguf`);
      const f = await openGguf(path, { maxHeaderBytes: 64 * 1024 * 1024 });
      expect(f.version, name).toBe(3);
      expect(f.tensors, name).toHaveLength(0);
      expect(metaStringArray(f.metadata, 'tokenizer.ggml.tokens')!.length, name).toBeGreaterThan(30000);
      // The metadata ends exactly at the end of these files.
      expect(parseGguf(await readFile(path)).metadata.size, name).toBe(f.metadata.size);
    }
  });

  it('reads a header larger than its first read chunk incrementally', async () => {
    const path = await testModelPath('vocab/ggml-vocab-deepseek-llm.gguf');
    const f = await openGguf(path);
    expect(metaString(f.metadata, 'tokenizer.ggml.pre')).toBe('deepseek-llm');
    expect(metaStringArray(f.metadata, 'tokenizer.ggml.merges')).toHaveLength(99757);
  });

  it('refuses a missing file with FILE_NOT_FOUND', async () => {
    await expect(openGguf(join(dir, 'nope.gguf'))).rejects.toMatchObject({ code: 'FILE_NOT_FOUND' });
  });
});

describe('parseGguf values', () => {
  it('decodes every metadata value type, including nested arrays', () => {
    const bytes = buildGguf(
      {
        metadata: [
          ['a.u8', gv.u8(250)],
          ['a.i8', gv.i8(-5)],
          ['a.u16', gv.u16(65000)],
          ['a.i16', gv.i16(-30000)],
          ['a.u32', gv.u32(4000000000)],
          ['a.i32', gv.i32(-2000000000)],
          ['a.f32', gv.f32(1.5)],
          ['a.f64', gv.f64(Math.PI)],
          ['a.u64small', gv.u64(12345678901)],
          ['a.u64big', gv.u64(2n ** 63n + 5n)],
          ['a.i64', gv.i64(-(2n ** 62n))],
          ['a.bool', true],
          ['a.str', 'héllo ✓'],
          ['a.strs', ['x', '', 'zz']],
          ['a.bools', gv.array(GgufValueType.BOOL, [true, false, true])],
          ['a.f32s', Float32Array.of(1, -2.5)],
          ['a.i32s', Int32Array.of(-1, 7)],
          ['a.u64s', BigUint64Array.of(1n, 2n ** 64n - 1n)],
          ['a.u8s', Uint8Array.of(1, 2, 3)],
          [
            'a.nested',
            gv.array(GgufValueType.ARRAY, [
              gv.array(GgufValueType.INT16, [gv.i16(1), gv.i16(-2)]),
              gv.array(GgufValueType.INT16, []),
            ]),
          ],
          ['a.nested_strs', gv.array(GgufValueType.ARRAY, [['p', 'q'], ['r']])],
        ],
        tensors: [],
      },
      [],
    );
    const m = parseGguf(bytes).metadata;
    expect(m.get('a.u8')).toBe(250);
    expect(m.get('a.i8')).toBe(-5);
    expect(m.get('a.u16')).toBe(65000);
    expect(m.get('a.i16')).toBe(-30000);
    expect(m.get('a.u32')).toBe(4000000000);
    expect(m.get('a.i32')).toBe(-2000000000);
    expect(m.get('a.f32')).toBe(1.5);
    expect(m.get('a.f64')).toBe(Math.PI);
    expect(m.get('a.u64small')).toBe(12345678901);
    expect(m.get('a.u64big')).toBe(2n ** 63n + 5n);
    expect(m.get('a.i64')).toBe(-(2n ** 62n));
    expect(m.get('a.bool')).toBe(true);
    expect(m.get('a.str')).toBe('héllo ✓');
    expect(m.get('a.strs')).toEqual(['x', '', 'zz']);
    expect(m.get('a.bools')).toEqual([true, false, true]);
    expect(m.get('a.f32s')).toEqual(Float32Array.of(1, -2.5));
    expect(m.get('a.i32s')).toEqual(Int32Array.of(-1, 7));
    expect(m.get('a.u64s')).toEqual(BigUint64Array.of(1n, 2n ** 64n - 1n));
    expect(m.get('a.u8s')).toEqual(Uint8Array.of(1, 2, 3));
    expect(m.get('a.nested')).toEqual([Int16Array.of(1, -2), new Int16Array(0)]);
    expect(m.get('a.nested_strs')).toEqual([['p', 'q'], ['r']]);
  });

  it('reads GGUF version 2 files', () => {
    const bytes = header(2, 0, 1).str('general.architecture').u32(GgufValueType.STRING).str('llama').done();
    const f = parseGguf(bytes);
    expect(f.version).toBe(2);
    expect(f.metadata.get('general.architecture')).toBe('llama');
  });

  it('places tensors on a custom general.alignment', () => {
    const bytes = buildGguf(
      {
        metadata: [['general.architecture', 'llama']],
        tensors: [
          { name: 'a', type: GgmlType.F32, dims: [3] },
          { name: 'b', type: GgmlType.Q8_0, dims: [32, 2] },
        ],
        alignment: 64,
      },
      [new Uint8Array(12).fill(1), new Uint8Array(68).fill(2)],
    );
    const f = parseGguf(bytes);
    expect(f.alignment).toBe(64);
    expect(f.dataOffset % 64).toBe(0);
    expect(f.tensor('a')).toMatchObject({ offset: f.dataOffset, byteLength: 12 });
    expect(f.tensor('b')).toMatchObject({ offset: f.dataOffset + 64, byteLength: 68, dims: [32, 2] });
    expect(bytes[f.tensor('b')!.offset]).toBe(2);
  });
});

describe('parseGguf refuses broken files', () => {
  it('refuses a wrong magic', () => {
    expectKiwi(() => parseGguf(new TextEncoder().encode('GGML\x03\0\0\0')), 'GGUF_INVALID', /wrong magic/);
  });
  it('refuses GGUF version 1 as unsupported', () => {
    expectKiwi(() => parseGguf(header(1, 0, 0).done()), 'GGUF_UNSUPPORTED', /version 1/);
  });
  it('refuses an unknown version and points out a big-endian file', () => {
    expectKiwi(() => parseGguf(header(0x03000000, 0, 0).done()), 'GGUF_UNSUPPORTED', /big-endian/);
  });
  it('refuses a file truncated inside the header', () => {
    expectKiwi(() => parseGguf(header(3, 0, 1).str('general.name').done()), 'GGUF_INVALID', /truncated/);
  });
  it('refuses a tensor count larger than the file can hold', () => {
    expectKiwi(() => parseGguf(header(3, 2n ** 62n, 0).done()), 'GGUF_INVALID', /tensor count/);
  });
  it('refuses a string length larger than the file', () => {
    const b = header(3, 0, 1).u64(2n ** 40n).raw(...new Array<number>(64).fill(65)).done();
    expectKiwi(() => parseGguf(b), 'GGUF_INVALID', /metadata key #0 is 1099511627776 bytes long/);
  });
  it('refuses an array count larger than the file before allocating', () => {
    const b = header(3, 0, 1).str('k').u32(GgufValueType.ARRAY).u32(GgufValueType.UINT64).u64(2n ** 50n).done();
    expectKiwi(() => parseGguf(b), 'GGUF_INVALID', /element count of metadata 'k'/);
  });
  it('refuses arrays nested too deeply', () => {
    const b = header(3, 0, 1).str('k').u32(GgufValueType.ARRAY);
    for (let i = 0; i < 20; i++) b.u32(GgufValueType.ARRAY).u64(1);
    b.u32(GgufValueType.UINT8).u64(0);
    expectKiwi(() => parseGguf(b.done()), 'GGUF_INVALID', /deeper/);
  });
  it('refuses an unknown metadata value type', () => {
    expectKiwi(() => parseGguf(header(3, 0, 1).str('k').u32(13).u32(0).done()), 'GGUF_INVALID', /unknown value type 13/);
  });
  it('refuses a bool that is neither 0 nor 1', () => {
    expectKiwi(() => parseGguf(header(3, 0, 1).str('k').u32(GgufValueType.BOOL).raw(2).done()), 'GGUF_INVALID', /bool/);
  });
  it('refuses invalid UTF-8 in a string', () => {
    const b = header(3, 0, 1).str('k').u32(GgufValueType.STRING).u64(2).raw(0xc3, 0x28).done();
    expectKiwi(() => parseGguf(b), 'GGUF_INVALID', /UTF-8/);
  });
  it('refuses a duplicated metadata key', () => {
    const b = header(3, 0, 2).str('k').u32(GgufValueType.UINT8).raw(1).str('k').u32(GgufValueType.UINT8).raw(2).done();
    expectKiwi(() => parseGguf(b), 'GGUF_INVALID', /'k' appears twice/);
  });
  it('refuses an alignment that is not a power of two', () => {
    const b = header(3, 0, 1).str('general.alignment').u32(GgufValueType.UINT32).u32(48).done();
    expectKiwi(() => parseGguf(b), 'GGUF_INVALID', /general.alignment is 48/);
  });

  const tensorFile = (opts: { type?: number; dims?: number[]; offset?: number; names?: string[]; pad?: number }): Uint8Array => {
    const names = opts.names ?? ['t'];
    const b = header(3, names.length, 0);
    names.forEach((name, i) => {
      const dims = opts.dims ?? [8];
      b.str(name).u32(dims.length);
      for (const d of dims) b.u64(d);
      b.u32(opts.type ?? GgmlType.F32).u64(opts.offset ?? i * 32);
    });
    const head = b.done();
    const out = new Uint8Array(Math.ceil(head.length / 32) * 32 + (opts.pad ?? 64));
    out.set(head);
    return out;
  };

  it('accepts a well-formed hand-made tensor index', () => {
    const f = parseGguf(tensorFile({ names: ['a', 'b'] }));
    expect(f.tensors.map((t) => [t.name, t.byteLength])).toEqual([
      ['a', 32],
      ['b', 32],
    ]);
  });
  it('refuses an unknown tensor type as unsupported', () => {
    expectKiwi(() => parseGguf(tensorFile({ type: 99 })), 'GGUF_UNSUPPORTED', /ggml type 99/);
  });
  it('refuses a removed tensor type and names it', () => {
    expectKiwi(() => parseGguf(tensorFile({ type: 31, dims: [32] })), 'GGUF_UNSUPPORTED', /Q4_0_4_4/);
  });
  it('refuses a tensor whose data lies outside the file', () => {
    expectKiwi(() => parseGguf(tensorFile({ offset: 1 << 20 })), 'GGUF_INVALID', /outside the file/);
  });
  it('refuses a misaligned tensor offset', () => {
    expectKiwi(() => parseGguf(tensorFile({ offset: 4 })), 'GGUF_INVALID', /not a multiple of the alignment/);
  });
  it('refuses overlapping tensors', () => {
    expectKiwi(() => parseGguf(tensorFile({ names: ['a', 'b'], dims: [16], pad: 256 })), 'GGUF_INVALID', /overlap/);
  });
  it('refuses duplicated tensor names', () => {
    expectKiwi(() => parseGguf(tensorFile({ names: ['a', 'a'] })), 'GGUF_INVALID', /'a' appears twice/);
  });
  it('refuses a quantized row that is not a whole number of blocks', () => {
    expectKiwi(() => parseGguf(tensorFile({ type: GgmlType.Q4_0, dims: [33] })), 'GGUF_INVALID', /block size 32/);
  });
  it('refuses more than four dimensions', () => {
    expectKiwi(() => parseGguf(tensorFile({ dims: [1, 1, 1, 1, 1] })), 'GGUF_INVALID', /5 dimensions/);
  });
  it('refuses a shape too large to address', () => {
    expectKiwi(() => parseGguf(tensorFile({ dims: [2 ** 40, 2 ** 40] })), 'GGUF_INVALID', /too large|outside/);
  });
  it('refuses a string that would take the header past maxHeaderBytes', () => {
    const b = header(3, 0, 1).str('k').u32(GgufValueType.STRING).str('x'.repeat(5000)).done();
    expectKiwi(() => parseGguf(b, b.length, { maxHeaderBytes: 1000 }), 'GGUF_INVALID', /more than the 9\d\d bytes left/);
  });
});

describe('openGguf on broken files', () => {
  it('refuses a stories260K truncated in its tensor data', async () => {
    const whole = await readFile(await testModelPath('stories260K.gguf'));
    const path = join(dir, 'truncated.gguf');
    await writeFile(path, whole.subarray(0, whole.length - 1));
    await expect(openGguf(path)).rejects.toMatchObject({ code: 'GGUF_INVALID', message: expect.stringMatching(/outside the file/) });
  });
  it('refuses an empty file as truncated', async () => {
    const path = join(dir, 'empty.gguf');
    await writeFile(path, new Uint8Array(0));
    await expect(openGguf(path)).rejects.toMatchObject({ code: 'GGUF_INVALID', message: expect.stringMatching(/truncated/) });
  });
});

describe('parseGguf limits', () => {
  it('refuses millions of tiny nested arrays before building them', () => {
    // 2^22 empty arrays fit in 50 MB of file but would be millions of JS objects.
    const count = 1 << 22;
    const b = header(3, 0, 1).str('k').u32(GgufValueType.ARRAY).u32(GgufValueType.ARRAY).u64(count).done();
    const bytes = new Uint8Array(b.length + count * 12);
    bytes.set(b);
    for (let i = 0; i < count; i++) bytes[b.length + i * 12] = GgufValueType.UINT8;
    expectKiwi(() => parseGguf(bytes, bytes.length, { maxTotalElements: 1 << 20 }), 'GGUF_INVALID', /array elements in all/);
  });
});

describe('openGguf on files of tens of GB', () => {
  it('reads the index of a sparse 34 GiB file and a byte range beyond 32-bit offsets', async () => {
    const path = join(dir, 'sparse.gguf');
    // Only the header is written; the file is then extended sparsely to 34 GiB of tensor data.
    const layout = layoutGguf({
      metadata: [['general.architecture', 'llama']],
      tensors: [
        { name: 'small', type: GgmlType.F32, dims: [8] },
        { name: 'huge', type: GgmlType.Q8_0, dims: [32, 2 ** 30] },
      ],
    });
    const fh = await open(path, 'w');
    try {
      await fh.write(layout.header, 0, layout.header.length, 0);
      await fh.truncate(layout.fileSize);
      await fh.write(Uint8Array.of(0x7f, 1, 2), 0, 3, layout.fileSize - 3);
    } finally {
      await fh.close();
    }
    const f = await openGguf(path);
    const huge = f.tensor('huge')!;
    expect(huge.byteLength).toBe(34 * 2 ** 30);
    expect(huge.offset + huge.byteLength).toBe(f.fileSize);
    expect(f.fileSize).toBeGreaterThan(2 ** 35);
    const tail = await readTensorBytes(f, huge, { start: huge.byteLength - 4, end: huge.byteLength });
    expect(Array.from(tail)).toEqual([0, 0x7f, 1, 2]);
  });
});
