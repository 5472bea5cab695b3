// zstd for link payloads: the one module that owns the zstd-codec dependency (zstd compiled to
// WebAssembly with a fixed 16 MiB heap, where a failed allocation aborts the whole instance).
// So nothing here ever hands the codec a whole payload: both directions stream in slices of at
// most SLICE_BYTES through zstd's streaming API, and the output is gathered in JavaScript. Before a
// byte is decompressed, the frame's structure is walked (RFC 8878 §3.1.1: frame header, block
// headers, checksum) without decoding it: exactly one frame, no dictionary, a window of at most
// MAX_WINDOW_BYTES (the decoder allocates it), no bytes after it, and blocks whose output the
// caller's declared size can hold; the decoder is then fed slice by slice, each bounded in what it
// can produce, and stops at the first slice that overruns the declared size. Should the codec
// fail anyway, the error is a KiwiError and the next call gets a fresh instance.
import { createRequire } from 'node:module';
import { KiwiError } from '../errors.js';

/** Largest window a frame may ask the decoder for (ours use 1-2 MiB at level 3; the heap is 16 MiB). */
export const MAX_WINDOW_BYTES = 4 * 1024 * 1024;
/** Bytes handed to the codec per call, and about the most output one decoder call may produce. */
const SLICE_BYTES = 1024 * 1024;
/** RFC 8878 §3.1.1.2.4: Block_Maximum_Size. */
const MAX_BLOCK_BYTES = 128 * 1024;
const ZSTD_MAGIC = 0xfd2fb528;

type Emit = (chunk: Uint8Array) => void;
interface StreamBinding {
  transform(chunk: Uint8Array, emit: Emit): boolean;
  end(emit: Emit): boolean;
  delete(): void;
}
interface Binding {
  ZstdCompressStreamBinding: new () => StreamBinding & { begin(level: number): boolean };
  ZstdDecompressStreamBinding: new () => StreamBinding & { begin(): boolean };
}

// Boxed: the Emscripten module is a thenable, which a promise would try to resolve again and again.
let codec: Promise<{ binding: Binding }> | undefined;

/** One WebAssembly instance of the codec's streaming bindings, loaded on first use (boxed, see above). */
function loadBinding(): Promise<{ binding: Binding }> {
  codec ??= new Promise((resolve) => {
    // zstd-codec's own loader (lib/module.js) instantiates a fresh module on every call.
    const loader = createRequire(import.meta.url)('zstd-codec/lib/module.js') as { run(f: (binding: Binding) => void): void };
    loader.run((binding) => resolve({ binding }));
  });
  return codec;
}

/** Runs `f` on a stream binding; anything the codec throws (an abort is a string) becomes a KiwiError and retires the instance. */
async function withStream<S extends StreamBinding, T>(make: (b: Binding) => S, f: (s: S) => T, what: string): Promise<T> {
  const { binding } = await loadBinding();
  let stream: S | undefined;
  try {
    stream = make(binding);
    return f(stream);
  } catch (err) {
    if (err instanceof KiwiError) throw err;
    codec = undefined;
    throw new KiwiError('COMPRESSION_FAILED', `zstd could not ${what}: ${String(err instanceof Error ? err.message : err).slice(0, 200)}`);
  } finally {
    try {
      stream?.delete();
    } catch {
      // The instance aborted: it is already retired above, its memory goes with it.
      codec = undefined;
    }
  }
}

function concat(chunks: readonly Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** Compresses `bytes` of any size as one zstd frame (without a content size: callers declare it themselves). */
export function zstdCompress(bytes: Uint8Array, level = 3): Promise<Uint8Array> {
  return withStream(
    (b) => new b.ZstdCompressStreamBinding(),
    (s) => {
      const chunks: Uint8Array[] = [];
      let total = 0;
      // The emitted view lies in the codec's heap: copy it out at once.
      const emit: Emit = (c) => {
        chunks.push(c.slice());
        total += c.length;
      };
      if (!s.begin(level)) throw new KiwiError('COMPRESSION_FAILED', `zstd refused compression level ${level}.`);
      for (let at = 0; at < bytes.length; at += SLICE_BYTES) {
        if (!s.transform(bytes.subarray(at, at + SLICE_BYTES), emit)) throw new KiwiError('COMPRESSION_FAILED', `zstd could not compress ${bytes.length} bytes.`);
      }
      if (!s.end(emit)) throw new KiwiError('COMPRESSION_FAILED', `zstd could not finish a frame of ${bytes.length} bytes.`);
      return concat(chunks, total);
    },
    `compress ${bytes.length} bytes`,
  );
}

export interface ZstdFrameLayout {
  windowBytes: number;
  /** The content size the frame header states, if it states one. */
  contentBytes: number | undefined;
  /** Offsets that end slices to feed the decoder: each slice can produce at most about SLICE_BYTES. */
  sliceEnds: number[];
  /** Output that raw and RLE blocks are sure to produce (compressed blocks may add up to 128 KiB each). */
  minOutputBytes: number;
}

const invalid = (why: string): KiwiError => new KiwiError('COMPRESSION_INVALID', `Malformed zstd payload: ${why}.`);

/**
 * Walks one zstd frame that must fill `bytes` exactly, without decompressing it, and checks it
 * against `maxContentBytes` (RFC 8878 §3.1.1). Pure; throws COMPRESSION_INVALID or FRAME_TOO_LARGE.
 */
export function inspectZstdFrame(bytes: Uint8Array, maxContentBytes: number): ZstdFrameLayout {
  if (bytes.length < 6) throw invalid(`${bytes.length} bytes cannot hold a frame header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== ZSTD_MAGIC) throw invalid('bad magic number (not a zstd frame, or a skippable one)');
  const fhd = bytes[4]!;
  const fcsFlag = fhd >> 6;
  const singleSegment = (fhd >> 5) & 1;
  if ((fhd & 0x08) !== 0) throw invalid('a reserved header bit is set');
  const checksum = (fhd >> 2) & 1;
  const dictBytes = [0, 1, 2, 4][fhd & 3]!;
  let at = 5;
  let windowBytes = 0;
  if (singleSegment === 0) {
    const wd = bytes[at++]!;
    const windowLog = 10 + (wd >> 3);
    if (windowLog > 31) throw invalid(`a window of 2^${windowLog} bytes`);
    const base = 2 ** windowLog;
    windowBytes = base + (base / 8) * (wd & 7);
  }
  if (at + dictBytes > bytes.length) throw invalid('the frame header is truncated');
  let dictId = 0;
  for (let i = 0; i < dictBytes; i++) dictId += bytes[at + i]! * 256 ** i;
  if (dictId !== 0) throw invalid('the frame needs a dictionary');
  at += dictBytes;
  const fcsBytes = [singleSegment ? 1 : 0, 2, 4, 8][fcsFlag]!;
  if (at + fcsBytes > bytes.length) throw invalid('the frame header is truncated');
  let contentBytes: number | undefined;
  if (fcsBytes === 1) contentBytes = view.getUint8(at);
  else if (fcsBytes === 2) contentBytes = view.getUint16(at, true) + 256;
  else if (fcsBytes === 4) contentBytes = view.getUint32(at, true);
  else if (fcsBytes === 8) contentBytes = Number(view.getBigUint64(at, true));
  at += fcsBytes;
  if (contentBytes !== undefined && contentBytes > maxContentBytes) {
    throw new KiwiError('FRAME_TOO_LARGE', `A zstd frame declares ${contentBytes} bytes, more than the ${maxContentBytes} its frame allows.`, { size: contentBytes, maxBytes: maxContentBytes });
  }
  if (singleSegment === 1) windowBytes = contentBytes ?? 0;
  if (windowBytes > MAX_WINDOW_BYTES) throw invalid(`it asks for a window of ${windowBytes} bytes, more than ${MAX_WINDOW_BYTES}`);
  const blockMax = Math.min(MAX_BLOCK_BYTES, Math.max(windowBytes, 1));
  const sliceEnds: number[] = [];
  let minOutputBytes = 0;
  let maxOutputBytes = 0;
  let sliceOut = 0;
  for (;;) {
    if (at + 3 > bytes.length) throw invalid('a block header is truncated');
    const header = bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16);
    at += 3;
    const last = header & 1;
    const type = (header >> 1) & 3;
    const size = header >>> 3;
    if (type === 3) throw invalid('a block of the reserved type');
    if (size > blockMax) throw invalid(`a block of ${size} bytes, more than the ${blockMax} its window allows`);
    // Raw: size bytes stored; RLE: one byte repeated size times; compressed: size bytes of input.
    const stored = type === 1 ? 1 : size;
    const out = type === 2 ? blockMax : size;
    if (at + stored > bytes.length) throw invalid('a block is truncated');
    if (type !== 2 && size === 0 && last === 0) throw invalid('an empty block before the last one');
    at += stored;
    if (type !== 2) minOutputBytes += size;
    maxOutputBytes += out;
    if (minOutputBytes > maxContentBytes) {
      throw new KiwiError('FRAME_TOO_LARGE', `A zstd frame holds more than the ${maxContentBytes} bytes its frame allows.`, { maxBytes: maxContentBytes });
    }
    sliceOut += out;
    if (last === 1) break;
    if (sliceOut >= SLICE_BYTES || at - (sliceEnds.at(-1) ?? 0) >= SLICE_BYTES) {
      sliceEnds.push(at);
      sliceOut = 0;
    }
  }
  if (checksum === 1) at += 4;
  if (at !== bytes.length) throw invalid(at > bytes.length ? 'the checksum is truncated' : `${bytes.length - at} bytes after the frame`);
  sliceEnds.push(at);
  if (contentBytes !== undefined && (contentBytes < minOutputBytes || contentBytes > maxOutputBytes)) throw invalid('its blocks do not add up to the content size it states');
  return { windowBytes, contentBytes, sliceEnds, minOutputBytes };
}

/**
 * Decompresses one zstd frame that must produce exactly `expectedBytes` (the size the caller's own
 * frame declared, already checked against what its shape allows). Memory: the result, plus at most
 * one window and one slice inside the codec.
 */
export function zstdDecompress(bytes: Uint8Array, expectedBytes: number): Promise<Uint8Array> {
  if (!Number.isSafeInteger(expectedBytes) || expectedBytes < 0) return Promise.reject(new Error(`zstdDecompress: bad expected size ${expectedBytes}`));
  let layout: ZstdFrameLayout;
  try {
    layout = inspectZstdFrame(bytes, expectedBytes);
  } catch (err) {
    return Promise.reject(err);
  }
  if (layout.contentBytes !== undefined && layout.contentBytes !== expectedBytes) {
    return Promise.reject(invalid(`the frame states ${layout.contentBytes} bytes where ${expectedBytes} were declared`));
  }
  return withStream(
    (b) => new b.ZstdDecompressStreamBinding(),
    (s) => {
      const out = new Uint8Array(expectedBytes);
      let written = 0;
      let overflow = false;
      const emit: Emit = (c) => {
        if (overflow || written + c.length > expectedBytes) {
          overflow = true;
          return;
        }
        out.set(c, written);
        written += c.length;
      };
      if (!s.begin()) throw new KiwiError('COMPRESSION_FAILED', 'zstd could not start a decompression stream.');
      let from = 0;
      for (const end of layout.sliceEnds) {
        if (!s.transform(bytes.subarray(from, end), emit)) throw invalid('the decoder rejected a block (corrupt data)');
        if (overflow) throw invalid(`it decompresses to more than the ${expectedBytes} bytes declared`);
        from = end;
      }
      if (!s.end(emit) || overflow) throw invalid('the frame does not end where it should');
      if (written !== expectedBytes) throw invalid(`it decompresses to ${written} bytes, not the ${expectedBytes} declared`);
      return out;
    },
    `decompress ${bytes.length} bytes`,
  );
}
