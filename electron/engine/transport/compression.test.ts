import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { inspectZstdFrame, MAX_WINDOW_BYTES, zstdCompress, zstdDecompress } from './compression.js';

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return isKiwiError(err) ? err.code : `not a KiwiError: ${String(err)}`;
  }
  return 'no error';
}

/** Bytes that compress a little (like activations: noisy low bits, repeated high bits). */
function noisy(n: number, seed = 1): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out[i] = i % 4 === 3 ? 0x3f : x >>> 24;
  }
  return out;
}

/** A zstd frame header (no content size) with the given window descriptor, then `blocks`. */
function frame(windowDescriptor: number, ...blocks: Uint8Array[]): Uint8Array {
  return Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, 0x00, windowDescriptor, ...blocks.flatMap((b) => [...b])]);
}
/** A block header: last flag, type (0 raw, 1 RLE, 2 compressed), size; then its stored bytes. */
function block(last: boolean, type: number, size: number, stored: Uint8Array = new Uint8Array(type === 1 ? 1 : size)): Uint8Array {
  const h = (size << 3) | (type << 1) | (last ? 1 : 0);
  return Uint8Array.from([h & 0xff, (h >> 8) & 0xff, (h >> 16) & 0xff, ...stored]);
}

describe('zstd through compression.ts', () => {
  it('compresses and decompresses every size the wire allows, up to 16 MiB, in bounded slices', async () => {
    for (const n of [0, 1, 1000, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 6_553_600, 16 << 20]) {
      const data = noisy(n, n);
      const packed = await zstdCompress(data);
      const layout = inspectZstdFrame(packed, n);
      expect(layout.windowBytes).toBeLessThanOrEqual(MAX_WINDOW_BYTES);
      const back = await zstdDecompress(packed, n);
      expect(back.length).toBe(n);
      expect(Buffer.compare(Buffer.from(back), Buffer.from(data))).toBe(0);
    }
  }, 120_000);

  it('refuses a frame that decompresses to more or less than declared, and stops early on a bomb', async () => {
    const zeros = await zstdCompress(new Uint8Array(32 << 20));
    expect(zeros.length).toBeLessThan(4096);
    expect(await codeOf(zstdDecompress(zeros, 1 << 20))).toBe('COMPRESSION_INVALID');
    expect(await codeOf(zstdDecompress(zeros, (32 << 20) + 1))).toBe('COMPRESSION_INVALID');
    expect((await zstdDecompress(zeros, 32 << 20)).length).toBe(32 << 20);
  }, 60_000);

  it('checks the frame before decoding: window, dictionary, reserved bits, block sizes, trailing bytes', () => {
    const code = (bytes: Uint8Array, max = 1 << 20): string => {
      try {
        inspectZstdFrame(bytes, max);
        return 'ok';
      } catch (err) {
        return isKiwiError(err) ? err.code : String(err);
      }
    };
    const oneRaw = block(true, 0, 4, Uint8Array.of(1, 2, 3, 4));
    expect(code(frame(0x50, oneRaw))).toBe('ok');
    // Window 2^(10+31): the decoder would allocate it.
    expect(code(frame(0xf8, oneRaw))).toBe('COMPRESSION_INVALID');
    expect(code(frame(((23 - 10) << 3) | 0, oneRaw))).toBe('COMPRESSION_INVALID');
    // A dictionary id.
    expect(code(Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, 0x01, 0x50, 7, ...oneRaw]))).toBe('COMPRESSION_INVALID');
    // Reserved bit.
    expect(code(Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, 0x08, 0x50, ...oneRaw]))).toBe('COMPRESSION_INVALID');
    // Reserved block type, a block larger than 128 KiB, a truncated block, bytes after the frame.
    expect(code(frame(0x50, block(true, 3, 4)))).toBe('COMPRESSION_INVALID');
    expect(code(frame(0x50, block(true, 0, (128 << 10) + 1)))).toBe('COMPRESSION_INVALID');
    expect(code(frame(0x50, oneRaw).subarray(0, 10))).toBe('COMPRESSION_INVALID');
    expect(code(Uint8Array.from([...frame(0x50, oneRaw), 0]))).toBe('COMPRESSION_INVALID');
    // Two frames back to back, a skippable frame.
    expect(code(Uint8Array.from([...frame(0x50, oneRaw), ...frame(0x50, oneRaw)]))).toBe('COMPRESSION_INVALID');
    expect(code(Uint8Array.from([0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]))).toBe('COMPRESSION_INVALID');
    // RLE blocks that alone produce more than allowed are refused without decoding.
    const rle = Array.from({ length: 20 }, (_, i) => block(i === 19, 1, 128 << 10, Uint8Array.of(9)));
    expect(code(frame(0x50, ...rle), 1 << 20)).toBe('FRAME_TOO_LARGE');
    // A stated content size beyond the limit.
    const stated = Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0, 0, 0, 1, ...oneRaw]);
    expect(code(stated)).toBe('FRAME_TOO_LARGE');
  });

  it('decodes hand-made raw and RLE blocks with a window up to the limit', async () => {
    const w4m = ((22 - 10) << 3) | 0; // 4 MiB
    const bytes = frame(w4m, block(false, 0, 3, Uint8Array.of(1, 2, 3)), block(true, 1, 5, Uint8Array.of(7)));
    expect([...(await zstdDecompress(bytes, 8))]).toEqual([1, 2, 3, 7, 7, 7, 7, 7]);
  });

  it('never throws anything but a KiwiError on random or corrupted frames, and keeps working after them (10,000 cases)', async () => {
    const valid = await zstdCompress(noisy(3000));
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.uint8Array({ maxLength: 64 }).map((b) => Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, ...b])),
          fc.uint8Array({ maxLength: 200 }),
          fc.array(fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }).map((edits) => {
            const b = valid.slice();
            for (const [i, v] of edits) b[i] = v;
            return b;
          }),
          fc.nat(valid.length).map((n) => valid.subarray(0, n)),
        ),
        fc.integer({ min: 0, max: 1 << 20 }),
        async (bytes, declared) => {
          try {
            const out = await zstdDecompress(bytes, declared);
            expect(out.length).toBe(declared);
          } catch (err) {
            if (!isKiwiError(err)) throw err;
          }
        },
      ),
      { numRuns: 10_000 },
    );
    expect((await zstdDecompress(valid, 3000)).length).toBe(3000);
  }, 300_000);
});
