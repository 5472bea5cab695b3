// zstd for link payloads: the one module that owns the zstd-codec (WebAssembly) dependency.
// Decompression refuses a frame that does not state its content size or states more than the
// caller's limit, so a hostile peer cannot make us allocate (zstd frame format: RFC 8878 §3.1.1).
import { createRequire } from 'node:module';
import { KiwiError } from '../errors.js';

interface ZstdSimple {
  compress(bytes: Uint8Array, level?: number): Uint8Array | null;
  decompress(bytes: Uint8Array): Uint8Array | null;
}
interface ZstdModule {
  run(f: (zstd: { Simple: new () => ZstdSimple }) => void): void;
}

let codec: Promise<ZstdSimple> | undefined;

/** Loads the WebAssembly codec once; every other call waits for the same instance. */
export function loadZstd(): Promise<ZstdSimple> {
  codec ??= new Promise((resolve) => {
    const { ZstdCodec } = createRequire(import.meta.url)('zstd-codec') as { ZstdCodec: ZstdModule };
    ZstdCodec.run((zstd) => resolve(new zstd.Simple()));
  });
  return codec;
}

const ZSTD_MAGIC = 0xfd2fb528;

/** The content size a zstd frame header declares, or undefined when it declares none (RFC 8878 §3.1.1.1). */
export function zstdContentSize(bytes: Uint8Array): number | undefined {
  if (bytes.length < 6) throw new KiwiError('COMPRESSION_INVALID', `A zstd frame of ${bytes.length} bytes is too short to hold its header.`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== ZSTD_MAGIC) throw new KiwiError('COMPRESSION_INVALID', 'The payload is not a zstd frame (bad magic number).');
  const fhd = bytes[4]!;
  const fcsFlag = fhd >> 6;
  const singleSegment = (fhd >> 5) & 1;
  const dictFlag = fhd & 3;
  const fcsBytes = [singleSegment ? 1 : 0, 2, 4, 8][fcsFlag]!;
  if (fcsBytes === 0) return undefined;
  const at = 5 + (singleSegment ? 0 : 1) + [0, 1, 2, 4][dictFlag]!;
  if (at + fcsBytes > bytes.length) throw new KiwiError('COMPRESSION_INVALID', 'The zstd frame header is truncated.');
  switch (fcsBytes) {
    case 1:
      return view.getUint8(at);
    case 2:
      return view.getUint16(at, true) + 256;
    case 4:
      return view.getUint32(at, true);
    default:
      return Number(view.getBigUint64(at, true));
  }
}

export async function zstdCompress(bytes: Uint8Array, level = 3): Promise<Uint8Array> {
  const out = (await loadZstd()).compress(bytes, level);
  if (out === null) throw new Error(`zstd could not compress ${bytes.length} bytes`);
  return out;
}

/** Decompresses one zstd frame whose declared size is at most maxBytes. */
export async function zstdDecompress(bytes: Uint8Array, maxBytes: number): Promise<Uint8Array> {
  const size = zstdContentSize(bytes);
  if (size === undefined) throw new KiwiError('COMPRESSION_INVALID', 'The zstd frame does not declare its content size; Kiwi requires it.');
  if (size > maxBytes) {
    throw new KiwiError('FRAME_TOO_LARGE', `A compressed payload declares ${size} bytes, more than the limit of ${maxBytes}.`, { size, maxBytes });
  }
  if (size === 0) return new Uint8Array(0);
  const out = (await loadZstd()).decompress(bytes);
  if (out === null || out.length !== size) throw new KiwiError('COMPRESSION_INVALID', 'The zstd frame is corrupt or its size does not match its header.');
  return out;
}
