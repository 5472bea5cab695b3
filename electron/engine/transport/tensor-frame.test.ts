import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { zstdCompress } from './compression.js';
import { decodeSafetensors, decodeStepFrame, encodeSafetensors, encodeStepFrame, firstNonFinite, maxStepFrameBytes, type RawTensor, type StepFrame } from './tensor-frame.js';

const hiddenFrame = (batch: number, seq: number, width: number, seed = 1): StepFrame => {
  const hidden = new Float32Array(batch * seq * width);
  for (let i = 0; i < hidden.length; i++) hidden[i] = Math.sin(i * 0.37 + seed) * (1 + (i % 7));
  return { metadata: { step: '7', requests: '[1,2]' }, tensor: { kind: 'hidden', hidden, dims: [batch, seq, width] } };
};

async function expectCode(p: Promise<unknown> | (() => unknown), code: string): Promise<void> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    expect(isKiwiError(err) ? err.code : String(err)).toBe(code);
    return;
  }
  throw new Error(`expected ${code}`);
}

describe('safetensors container', () => {
  it('writes the byte layout of the safetensors format', () => {
    const t: RawTensor = { dtype: 'F32', shape: [2], data: new Uint8Array(new Float32Array([1, -2]).buffer) };
    const bytes = encodeSafetensors(new Map([['x', t]]), { step: '1' });
    const headerLength = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    expect((8 + headerLength) % 8).toBe(0);
    const header = JSON.parse(Buffer.from(bytes.subarray(8, 8 + headerLength)).toString('utf8'));
    expect(header).toEqual({ __metadata__: { step: '1' }, x: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } });
    expect([...bytes.subarray(8 + headerLength)]).toEqual([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
  });

  it('reads a hand-written file with two tensors', () => {
    const json = '{"a":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F16","shape":[1],"data_offsets":[3,5]}}';
    const bytes = new Uint8Array(8 + json.length + 5);
    new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
    bytes.set(Buffer.from(json), 8);
    bytes.set([1, 2, 255, 0, 0x3c], 8 + json.length);
    const { tensors } = decodeSafetensors(bytes);
    expect([...(tensors.get('a')?.data ?? [])]).toEqual([1, 2, 255]);
    expect(tensors.get('b')?.shape).toEqual([1]);
  });

  const build = (header: unknown, data = 0): Uint8Array => {
    const json = Buffer.from(JSON.stringify(header));
    const bytes = new Uint8Array(8 + json.length + data);
    new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
    bytes.set(json, 8);
    return bytes;
  };

  it('rejects a header length larger than the limit before reading it', async () => {
    const bytes = new Uint8Array(16);
    new DataView(bytes.buffer).setBigUint64(0, 2n ** 62n, true);
    await expectCode(() => decodeSafetensors(bytes), 'FRAME_TOO_LARGE');
  });

  it('rejects a shape whose size does not match its byte span', async () => {
    await expectCode(() => decodeSafetensors(build({ x: { dtype: 'F32', shape: [1_000_000_000, 1_000_000_000], data_offsets: [0, 4] } }, 4)), 'TENSOR_FRAME_INVALID');
  });

  it('rejects offsets beyond the data, holes, overlaps and trailing bytes', async () => {
    await expectCode(() => decodeSafetensors(build({ x: { dtype: 'I8', shape: [4], data_offsets: [0, 4] } }, 3)), 'TENSOR_FRAME_INVALID');
    await expectCode(() => decodeSafetensors(build({ x: { dtype: 'I8', shape: [2], data_offsets: [2, 4] } }, 4)), 'TENSOR_FRAME_INVALID');
    await expectCode(
      () => decodeSafetensors(build({ x: { dtype: 'I8', shape: [2], data_offsets: [0, 2] }, y: { dtype: 'I8', shape: [2], data_offsets: [1, 3] } }, 3)),
      'TENSOR_FRAME_INVALID',
    );
    await expectCode(() => decodeSafetensors(build({ x: { dtype: 'I8', shape: [2], data_offsets: [0, 2] } }, 3)), 'TENSOR_FRAME_INVALID');
  });

  it('rejects unknown dtypes, negative dims and non-string metadata', async () => {
    await expectCode(() => decodeSafetensors(build({ x: { dtype: 'F64', shape: [1], data_offsets: [0, 8] } }, 8)), 'TENSOR_FRAME_INVALID');
    await expectCode(() => decodeSafetensors(build({ x: { dtype: 'I8', shape: [-1], data_offsets: [0, 0] } })), 'TENSOR_FRAME_INVALID');
    await expectCode(() => decodeSafetensors(build({ __metadata__: { step: 1 } })), 'TENSOR_FRAME_INVALID');
  });

  it('rejects every truncation of a valid container', async () => {
    const bytes = encodeSafetensors(new Map([['x', { dtype: 'F32', shape: [3], data: new Uint8Array(12) } as RawTensor]]), {});
    for (let n = 0; n < bytes.length; n++) await expectCode(() => decodeSafetensors(bytes.subarray(0, n)), 'TENSOR_FRAME_INVALID');
  });
});

describe('step frames', () => {
  it('carries f32 hidden states and metadata exactly', async () => {
    const frame = hiddenFrame(2, 1, 16);
    const back = await decodeStepFrame(await encodeStepFrame(frame, { encoding: 'f32', zstd: false }), { maxBytes: 1 << 20, hidden: 16 });
    expect(back.metadata).toEqual({ ...frame.metadata, encoding: 'f32' });
    expect(back.tensor).toEqual(frame.tensor);
  });

  it('carries token ids', async () => {
    const frame: StepFrame = { metadata: {}, tensor: { kind: 'ids', ids: BigInt64Array.from([1n, 511n, 3n]), dims: [1, 3] } };
    const back = await decodeStepFrame(await encodeStepFrame(frame, { encoding: 'int8', zstd: true }), { maxBytes: 1 << 20 });
    expect(back.tensor).toEqual(frame.tensor);
  });

  it('keeps f16 and int8 encodings within their rounding error, with and without zstd', async () => {
    const frame = hiddenFrame(1, 3, 64);
    const src = (frame.tensor as { hidden: Float32Array }).hidden;
    for (const [encoding, tol] of [['f16', 1e-3], ['int8', 1 / 127]] as const) {
      for (const zstd of [false, true]) {
        const back = await decodeStepFrame(await encodeStepFrame(frame, { encoding, zstd }), { maxBytes: 1 << 20, hidden: 64 });
        const h = (back.tensor as { hidden: Float32Array }).hidden;
        for (let r = 0; r < 3; r++) {
          const row = src.subarray(r * 64, (r + 1) * 64);
          const max = Math.max(...row.map(Math.abs));
          for (let i = 0; i < 64; i++) expect(Math.abs(h[r * 64 + i]! - row[i]!)).toBeLessThanOrEqual(max * tol);
        }
      }
    }
  });

  it('makes an int8 frame about a quarter of the f32 frame', async () => {
    const frame = hiddenFrame(1, 8, 256);
    const f32 = await encodeStepFrame(frame, { encoding: 'f32', zstd: false });
    const int8 = await encodeStepFrame(frame, { encoding: 'int8', zstd: false });
    expect(int8.length).toBeLessThan(f32.length / 3);
  });

  it('rejects hidden states of the wrong width', async () => {
    const bytes = await encodeStepFrame(hiddenFrame(1, 1, 16), { encoding: 'f32', zstd: false });
    await expectCode(decodeStepFrame(bytes, { maxBytes: 1 << 20, hidden: 32 }), 'TENSOR_FRAME_INVALID');
  });

  it('rejects a frame larger than maxBytes, also when zstd would inflate it', async () => {
    const bytes = await encodeStepFrame(hiddenFrame(1, 1, 1024), { encoding: 'f32', zstd: false });
    await expectCode(decodeStepFrame(bytes, { maxBytes: 1024 }), 'FRAME_TOO_LARGE');
    const bomb = await zstdCompress(new Uint8Array(4 << 20));
    expect(bomb.length).toBeLessThan(1024);
    // Declaring the true size is refused before decompressing; declaring less stops at the first slice past it.
    for (const [declared, code] of [[4 << 20, 'FRAME_TOO_LARGE'], [1000, 'COMPRESSION_INVALID']] as const) {
      const framed = new Uint8Array(5 + bomb.length);
      framed[0] = 1;
      new DataView(framed.buffer).setUint32(1, declared, true);
      framed.set(bomb, 5);
      await expectCode(decodeStepFrame(framed, { maxBytes: 1024 }), code);
    }
  });

  it('refuses a 20-byte zstd frame whose header declares 16 MiB, without touching the codec', async () => {
    const framed = new Uint8Array(25);
    const view = new DataView(framed.buffer);
    framed[0] = 1;
    view.setUint32(1, 16 << 20, true);
    view.setUint32(5, 0xfd2fb528, true);
    framed[9] = 0xa0; // single segment, 4-byte content size
    view.setUint32(10, 16 << 20, true);
    await expectCode(decodeStepFrame(framed, { maxBytes: maxStepFrameBytes({ hidden: 64, maxRows: 8, maxSeq: 512 }, 'f32') }), 'FRAME_TOO_LARGE');
    view.setUint32(1, 1000, true);
    await expectCode(decodeStepFrame(framed, { maxBytes: 1 << 20 }), 'FRAME_TOO_LARGE');
  });

  it('refuses encodings and compression the link did not agree on', async () => {
    const frame = hiddenFrame(1, 2, 8);
    const expect32 = { maxBytes: 1 << 20, hidden: 8, expect: { tensor: 'f32', zstd: false } } as const;
    await expectCode(decodeStepFrame(await encodeStepFrame(frame, { encoding: 'f32', zstd: true }), expect32), 'WIRE_NOT_AGREED');
    await expectCode(decodeStepFrame(await encodeStepFrame(frame, { encoding: 'f16', zstd: false }), expect32), 'WIRE_NOT_AGREED');
    await expectCode(decodeStepFrame(await encodeStepFrame(frame, { encoding: 'int8', zstd: false }), expect32), 'WIRE_NOT_AGREED');
    const ids = await encodeStepFrame({ metadata: {}, tensor: { kind: 'ids', ids: BigInt64Array.of(1n), dims: [1, 1] } }, { encoding: 'f32', zstd: false });
    await expectCode(decodeStepFrame(ids, expect32), 'WIRE_NOT_AGREED');
    await expectCode(decodeStepFrame(await encodeStepFrame(frame, { encoding: 'f16', zstd: true }), { ...expect32, expect: { tensor: 'f16', zstd: false } }), 'WIRE_NOT_AGREED');
    const back = await decodeStepFrame(await encodeStepFrame(frame, { encoding: 'f16', zstd: true }), { ...expect32, expect: { tensor: 'f16', zstd: true } });
    expect(back.tensor.kind).toBe('hidden');
  });

  it('carries a 4096 x 400 f32 prefill (6.5 MB) zstd-compressed', async () => {
    const hidden = new Float32Array(400 * 4096);
    for (let i = 0; i < hidden.length; i++) hidden[i] = Math.sin(i) * 3;
    const bytes = await encodeStepFrame({ metadata: { step: '1' }, tensor: { kind: 'hidden', hidden, dims: [1, 400, 4096] } }, { encoding: 'f32', zstd: true });
    const limit = maxStepFrameBytes({ hidden: 4096, maxRows: 8, maxSeq: 400 }, 'f32');
    const back = await decodeStepFrame(bytes, { maxBytes: limit, hidden: 4096, expect: { tensor: 'f32', zstd: true } });
    const got = (back.tensor as { hidden: Float32Array }).hidden;
    expect(Buffer.compare(Buffer.from(got.buffer, got.byteOffset, got.byteLength), Buffer.from(hidden.buffer))).toBe(0);
    expect(firstNonFinite(hidden)).toBe(-1);
  }, 60_000);

  it('finds NaN and infinite activations', () => {
    expect(firstNonFinite(Float32Array.of(1, 2, Number.NaN))).toBe(2);
    expect(firstNonFinite(Float32Array.of(Number.POSITIVE_INFINITY))).toBe(0);
    expect(firstNonFinite(Float32Array.of(-1e38, 0))).toBe(-1);
  });

  it('rejects unknown flags, unknown encodings and missing scales', async () => {
    const ok = await encodeStepFrame(hiddenFrame(1, 1, 8), { encoding: 'int8', zstd: false });
    const flagged = ok.slice();
    flagged[0] = 4;
    await expectCode(decodeStepFrame(flagged, { maxBytes: 1 << 20 }), 'TENSOR_FRAME_INVALID');
    const noScale = encodeSafetensors(new Map([['hidden', { dtype: 'I8', shape: [1, 1, 2], data: new Uint8Array(2) } as RawTensor]]), { encoding: 'int8' });
    await expectCode(decodeStepFrame(Uint8Array.of(0, ...noScale), { maxBytes: 1 << 20 }), 'TENSOR_FRAME_INVALID');
    const odd = encodeSafetensors(new Map([['hidden', { dtype: 'F32', shape: [1, 1, 1], data: new Uint8Array(4) } as RawTensor]]), { encoding: 'bf8' });
    await expectCode(decodeStepFrame(Uint8Array.of(0, ...odd), { maxBytes: 1 << 20 }), 'TENSOR_FRAME_INVALID');
  });

  it('never fails with anything but a KiwiError on corrupted or random bytes', async () => {
    const valid = await encodeStepFrame(hiddenFrame(1, 2, 8), { encoding: 'f16', zstd: false });
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.uint8Array({ maxLength: 300 }), fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 0, max: 255 })).map(([i, v]) => {
        const b = valid.slice();
        b[i] = v;
        return b;
      })), async (bytes) => {
        try {
          await decodeStepFrame(bytes, { maxBytes: 1 << 16 });
        } catch (err) {
          if (!isKiwiError(err)) throw err;
        }
      }),
      { numRuns: 400 },
    );
  });
});
