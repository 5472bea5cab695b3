import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError } from '../errors.js';
import { decodeFrame, encodeFrame, FrameDecoder, FrameFlags, FrameType, type Frame } from './frame-codec.js';

const bytes = (...b: number[]): Uint8Array => Uint8Array.from(b);

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    if (isKiwiError(err)) return err.code;
    throw err;
  }
  return undefined;
}

describe('frame codec', () => {
  it('encodes a DATA frame to the documented bytes', () => {
    expect(encodeFrame({ type: FrameType.DATA, flags: 0, payload: bytes(0xaa, 0xbb, 0xcc) })).toEqual(
      bytes(0x4b, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x03, 0xaa, 0xbb, 0xcc),
    );
  });

  it('encodes a sealed PING with an empty payload to the documented bytes', () => {
    expect(encodeFrame({ type: FrameType.PING, flags: FrameFlags.SEALED, payload: bytes() })).toEqual(bytes(0x4b, 1, 2, 1, 0, 0, 0, 0));
  });

  it('decodes a fixture frame', () => {
    expect(decodeFrame(bytes(0x4b, 1, 5, 0, 0, 0, 0, 2, 0x68, 0x69))).toEqual({ type: FrameType.CLOSE, flags: 0, payload: bytes(0x68, 0x69) });
  });

  it('decodes a stream split at every byte boundary into the same frames', () => {
    const frames: Frame[] = [
      { type: FrameType.DATA, flags: 0, payload: bytes(1, 2, 3, 4, 5) },
      { type: FrameType.PING, flags: FrameFlags.SEALED, payload: bytes() },
      { type: FrameType.HELLO, flags: 0, payload: new Uint8Array(33).fill(7) },
    ];
    const stream = new Uint8Array(Buffer.concat(frames.map((f) => encodeFrame(f))));
    for (let a = 0; a <= stream.length; a++) {
      for (let b = a; b <= stream.length; b++) {
        const d = new FrameDecoder();
        const out = [...d.push(stream.subarray(0, a)), ...d.push(stream.subarray(a, b)), ...d.push(stream.subarray(b))];
        d.end();
        expect(out).toEqual(frames);
      }
    }
  });

  it('decodes a stream fed one byte at a time', () => {
    const frame = { type: FrameType.DATA, flags: 0, payload: new Uint8Array(300).map((_, i) => i & 0xff) };
    const d = new FrameDecoder();
    const out: Frame[] = [];
    for (const b of encodeFrame(frame)) out.push(...d.push(bytes(b)));
    expect(out).toEqual([frame]);
  });

  it.each([
    ['FRAME_BAD_MAGIC', bytes(0x4c, 1, 1, 0, 0, 0, 0, 0)],
    ['FRAME_BAD_VERSION', bytes(0x4b, 2, 1, 0, 0, 0, 0, 0)],
    ['FRAME_UNKNOWN_TYPE', bytes(0x4b, 1, 0, 0, 0, 0, 0, 0)],
    ['FRAME_UNKNOWN_TYPE', bytes(0x4b, 1, 99, 0, 0, 0, 0, 0)],
    ['FRAME_BAD_FLAGS', bytes(0x4b, 1, 1, 2, 0, 0, 0, 0)],
    ['FRAME_TOO_LARGE', bytes(0x4b, 1, 1, 0, 0xff, 0xff, 0xff, 0xff)],
  ])('refuses a header with %s', (code, header) => {
    expect(codeOf(() => new FrameDecoder().push(header))).toBe(code);
  });

  it('refuses an oversized length before allocating the payload', () => {
    const d = new FrameDecoder(1024);
    expect(codeOf(() => d.push(bytes(0x4b, 1, 1, 0, 0, 0, 4, 1)))).toBe('FRAME_TOO_LARGE');
    expect(d.bufferedBytes).toBe(0);
  });

  it('refuses to encode a payload above the limit', () => {
    expect(codeOf(() => encodeFrame({ type: FrameType.DATA, flags: 0, payload: new Uint8Array(11) }, 10))).toBe('FRAME_TOO_LARGE');
  });

  it('reports a truncated frame at every cut point', () => {
    const whole = encodeFrame({ type: FrameType.DATA, flags: 0, payload: bytes(9, 8, 7) });
    for (let cut = 1; cut < whole.length; cut++) {
      const d = new FrameDecoder();
      expect(d.push(whole.subarray(0, cut))).toEqual([]);
      expect(codeOf(() => d.end())).toBe('FRAME_TRUNCATED');
    }
  });

  it('refuses trailing bytes after a whole-message frame', () => {
    const whole = encodeFrame({ type: FrameType.DATA, flags: 0, payload: bytes(1) });
    expect(codeOf(() => decodeFrame(Buffer.concat([whole, whole])))).toBe('FRAME_TRAILING_BYTES');
    expect(codeOf(() => decodeFrame(Buffer.concat([whole, bytes(0x4b)])))).toBe('FRAME_TRUNCATED');
  });

  it('stays failed after a protocol violation', () => {
    const d = new FrameDecoder();
    expect(codeOf(() => d.push(bytes(0, 0, 0, 0, 0, 0, 0, 0)))).toBe('FRAME_BAD_MAGIC');
    expect(codeOf(() => d.push(encodeFrame({ type: FrameType.DATA, flags: 0, payload: bytes() })))).toBe('FRAME_BAD_MAGIC');
  });

  it('round-trips arbitrary frames through arbitrary chunking', () => {
    const frameArb = fc.record({
      type: fc.constantFrom(...Object.values(FrameType)),
      flags: fc.constantFrom(0, FrameFlags.SEALED),
      payload: fc.uint8Array({ maxLength: 64 }),
    });
    fc.assert(
      fc.property(fc.array(frameArb, { maxLength: 6 }), fc.array(fc.nat(80), { maxLength: 10 }), (frames, cuts) => {
        const stream = new Uint8Array(Buffer.concat(frames.map((f) => encodeFrame(f))));
        const d = new FrameDecoder();
        const out: Frame[] = [];
        let pos = 0;
        for (const c of cuts) {
          out.push(...d.push(stream.subarray(pos, pos + c)));
          pos = Math.min(stream.length, pos + c);
        }
        out.push(...d.push(stream.subarray(pos)));
        d.end();
        expect(out).toEqual(frames);
      }),
    );
  });

  it('never throws anything but a frame error on arbitrary bytes (fuzz)', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 40 }), { maxLength: 8 }), (chunks) => {
        const d = new FrameDecoder(256);
        try {
          for (const c of chunks) d.push(c);
          d.end();
        } catch (err) {
          expect(isKiwiError(err)).toBe(true);
          expect((err as { code: string }).code).toMatch(/^FRAME_/);
        }
      }),
      { numRuns: 2000 },
    );
  });
});
