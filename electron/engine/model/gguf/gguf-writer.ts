// GGUF v3 writer (spec: ggml/docs/gguf.md). The header is encoded in memory (it is small); tensor
// data is streamed to disk in index order, chunk by chunk, with the alignment padding between
// tensors, so a model of many GB is never held in memory. Layout is the one llama.cpp expects:
// tensor i starts at align(end of tensor i-1) relative to the aligned data section.
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { KiwiError } from '../../errors.js';
import { GgmlType, GgufValueType, ggmlTypeName, tensorByteLength } from './gguf-types.js';
import type { GgufValue } from './gguf-types.js';
import type { GgufFile } from './gguf-reader.js';

/** A metadata value with its explicit GGUF type (JS numbers alone do not say u32 or f32). */
export type GgufTypedValue =
  | { type: GgufValueType.UINT8 | GgufValueType.INT8 | GgufValueType.UINT16 | GgufValueType.INT16; value: number }
  | { type: GgufValueType.UINT32 | GgufValueType.INT32 | GgufValueType.FLOAT32 | GgufValueType.FLOAT64; value: number }
  | { type: GgufValueType.UINT64 | GgufValueType.INT64; value: number | bigint }
  | { type: GgufValueType.BOOL; value: boolean }
  | { type: GgufValueType.STRING; value: string }
  | { type: GgufValueType.ARRAY; elementType: GgufValueType; value: readonly GgufWriteValue[] };

/**
 * What the writer accepts: a typed value, or a JS value whose GGUF type is unambiguous (string,
 * boolean, typed arrays, string[]). Plain numbers must be typed (see the `gv` helpers).
 */
export type GgufWriteValue =
  | GgufTypedValue
  | string
  | boolean
  | readonly string[]
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigUint64Array
  | BigInt64Array;

/** Helpers to type metadata values: gv.u32(5), gv.f32(1e-5), gv.array(GgufValueType.INT32, [...]). */
export const gv = {
  u8: (value: number): GgufTypedValue => ({ type: GgufValueType.UINT8, value }),
  i8: (value: number): GgufTypedValue => ({ type: GgufValueType.INT8, value }),
  u16: (value: number): GgufTypedValue => ({ type: GgufValueType.UINT16, value }),
  i16: (value: number): GgufTypedValue => ({ type: GgufValueType.INT16, value }),
  u32: (value: number): GgufTypedValue => ({ type: GgufValueType.UINT32, value }),
  i32: (value: number): GgufTypedValue => ({ type: GgufValueType.INT32, value }),
  f32: (value: number): GgufTypedValue => ({ type: GgufValueType.FLOAT32, value }),
  f64: (value: number): GgufTypedValue => ({ type: GgufValueType.FLOAT64, value }),
  u64: (value: number | bigint): GgufTypedValue => ({ type: GgufValueType.UINT64, value }),
  i64: (value: number | bigint): GgufTypedValue => ({ type: GgufValueType.INT64, value }),
  bool: (value: boolean): GgufTypedValue => ({ type: GgufValueType.BOOL, value }),
  str: (value: string): GgufTypedValue => ({ type: GgufValueType.STRING, value }),
  array: (elementType: GgufValueType, value: readonly GgufWriteValue[]): GgufTypedValue => ({
    type: GgufValueType.ARRAY,
    elementType,
    value,
  }),
};

export interface GgufTensorSpec {
  name: string;
  type: GgmlType;
  /** ne[0] first. */
  dims: readonly number[];
}

export interface GgufWriteSpec {
  metadata: Iterable<readonly [string, GgufWriteValue]>;
  tensors: readonly GgufTensorSpec[];
  /** Written as general.alignment when not 32 (the default). */
  alignment?: number;
}

export interface GgufLayout {
  header: Uint8Array;
  /** Absolute offset of the data section (header length rounded up to the alignment). */
  dataOffset: number;
  tensors: Array<GgufTensorSpec & { offset: number; byteLength: number }>;
  fileSize: number;
}

const encoder = new TextEncoder();

/** Growable little-endian byte buffer for the header. */
class ByteSink {
  private buf = new Uint8Array(4096);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.length + n) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v: number): void {
    this.reserve(1);
    this.view.setUint8(this.length, v);
    this.length += 1;
  }
  u32(v: number): void {
    this.reserve(4);
    this.view.setUint32(this.length, v, true);
    this.length += 4;
  }
  u64(v: number | bigint): void {
    this.reserve(8);
    this.view.setBigUint64(this.length, BigInt(v), true);
    this.length += 8;
  }
  bytes(b: Uint8Array): void {
    this.reserve(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }
  string(s: string): void {
    const b = encoder.encode(s);
    this.u64(b.length);
    this.bytes(b);
  }
  scalar(type: GgufValueType, v: number | bigint | boolean | string, key: string): void {
    const n = (): number => {
      if (typeof v !== 'number') throw usage(`metadata '${key}': expected a number for ${GgufValueType[type]}`);
      return v;
    };
    const int = (lo: number, hi: number): number => {
      const x = n();
      if (!Number.isInteger(x) || x < lo || x > hi) throw usage(`metadata '${key}': ${String(x)} does not fit ${GgufValueType[type]}`);
      return x;
    };
    this.reserve(8);
    switch (type) {
      case GgufValueType.UINT8:
        this.view.setUint8(this.length, int(0, 0xff));
        this.length += 1;
        return;
      case GgufValueType.INT8:
        this.view.setInt8(this.length, int(-0x80, 0x7f));
        this.length += 1;
        return;
      case GgufValueType.UINT16:
        this.view.setUint16(this.length, int(0, 0xffff), true);
        this.length += 2;
        return;
      case GgufValueType.INT16:
        this.view.setInt16(this.length, int(-0x8000, 0x7fff), true);
        this.length += 2;
        return;
      case GgufValueType.UINT32:
        this.view.setUint32(this.length, int(0, 0xffffffff), true);
        this.length += 4;
        return;
      case GgufValueType.INT32:
        this.view.setInt32(this.length, int(-0x80000000, 0x7fffffff), true);
        this.length += 4;
        return;
      case GgufValueType.FLOAT32:
        this.view.setFloat32(this.length, n(), true);
        this.length += 4;
        return;
      case GgufValueType.FLOAT64:
        this.view.setFloat64(this.length, n(), true);
        this.length += 8;
        return;
      case GgufValueType.UINT64:
      case GgufValueType.INT64: {
        if (typeof v !== 'number' && typeof v !== 'bigint') throw usage(`metadata '${key}': expected an integer`);
        const b = BigInt(v);
        if (type === GgufValueType.UINT64) {
          if (b < 0n || b >= 1n << 64n) throw usage(`metadata '${key}': ${b.toString()} does not fit UINT64`);
          this.view.setBigUint64(this.length, b, true);
        } else {
          if (b < -(1n << 63n) || b >= 1n << 63n) throw usage(`metadata '${key}': ${b.toString()} does not fit INT64`);
          this.view.setBigInt64(this.length, b, true);
        }
        this.length += 8;
        return;
      }
      case GgufValueType.BOOL:
        if (typeof v !== 'boolean') throw usage(`metadata '${key}': expected a boolean`);
        this.u8(v ? 1 : 0);
        return;
      case GgufValueType.STRING:
        if (typeof v !== 'string') throw usage(`metadata '${key}': expected a string`);
        this.string(v);
        return;
      default:
        throw usage(`metadata '${key}': value type ${String(type)} is not a scalar type`);
    }
  }
  result(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

function usage(message: string): KiwiError {
  return new KiwiError('USAGE', message);
}

const TYPED_ARRAY_TYPES: Array<[new (...args: never[]) => ArrayBufferView, GgufValueType]> = [
  [Uint8Array, GgufValueType.UINT8],
  [Int8Array, GgufValueType.INT8],
  [Uint16Array, GgufValueType.UINT16],
  [Int16Array, GgufValueType.INT16],
  [Uint32Array, GgufValueType.UINT32],
  [Int32Array, GgufValueType.INT32],
  [Float32Array, GgufValueType.FLOAT32],
  [Float64Array, GgufValueType.FLOAT64],
  [BigUint64Array, GgufValueType.UINT64],
  [BigInt64Array, GgufValueType.INT64],
];

/** The GGUF type a write value will be stored as. */
export function ggufTypeOf(v: GgufWriteValue): GgufValueType {
  if (typeof v === 'string') return GgufValueType.STRING;
  if (typeof v === 'boolean') return GgufValueType.BOOL;
  if (Array.isArray(v)) return GgufValueType.ARRAY;
  if (ArrayBuffer.isView(v)) return GgufValueType.ARRAY;
  return (v as GgufTypedValue).type;
}

function writeValue(sink: ByteSink, v: GgufWriteValue, key: string, withType: boolean): void {
  if (ArrayBuffer.isView(v)) {
    const entry = TYPED_ARRAY_TYPES.find(([ctor]) => v instanceof ctor);
    if (entry === undefined) throw usage(`metadata '${key}': unsupported typed array`);
    if (withType) sink.u32(GgufValueType.ARRAY);
    sink.u32(entry[1]);
    sink.u64((v as unknown as { length: number }).length);
    // Host order is little-endian on every platform Kiwi runs on (checked in gguf-reader too).
    sink.bytes(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    return;
  }
  if (Array.isArray(v)) {
    if (withType) sink.u32(GgufValueType.ARRAY);
    sink.u32(GgufValueType.STRING);
    sink.u64(v.length);
    for (const s of v as readonly unknown[]) {
      if (typeof s !== 'string') throw usage(`metadata '${key}': a plain array must hold only strings; use gv.array for others`);
      sink.string(s);
    }
    return;
  }
  if (typeof v === 'string' || typeof v === 'boolean') {
    const t = typeof v === 'string' ? GgufValueType.STRING : GgufValueType.BOOL;
    if (withType) sink.u32(t);
    sink.scalar(t, v, key);
    return;
  }
  const typed = v as GgufTypedValue;
  if (typed.type === GgufValueType.ARRAY) {
    if (withType) sink.u32(GgufValueType.ARRAY);
    sink.u32(typed.elementType);
    sink.u64(typed.value.length);
    for (const e of typed.value) {
      const et = ggufTypeOf(e);
      if (et !== typed.elementType) {
        throw usage(`metadata '${key}': array of ${GgufValueType[typed.elementType]} holds a ${GgufValueType[et]}`);
      }
      writeValue(sink, e, key, false);
    }
    return;
  }
  if (withType) sink.u32(typed.type);
  sink.scalar(typed.type, typed.value, key);
}

/**
 * Turns a parsed file's metadata back into write values with the file's own types, e.g. to write a
 * GGUF holding a subset of another's tensors. (An empty nested bool or string array is written as
 * an empty string array: the reader keeps no element type for it.)
 */
export function writableMetadata(file: Pick<GgufFile, 'metadata' | 'metadataTypes'>): Array<[string, GgufWriteValue]> {
  const out: Array<[string, GgufWriteValue]> = [];
  for (const [key, value] of file.metadata) {
    const info = file.metadataTypes.get(key);
    if (info === undefined) throw usage(`metadata '${key}' has no recorded type`);
    out.push([key, toWriteValue(value, info.type, info.elementType)]);
  }
  return out;
}

function toWriteValue(v: GgufValue, type: GgufValueType, elementType?: GgufValueType): GgufWriteValue {
  if (type !== GgufValueType.ARRAY) {
    if (typeof v === 'string' || typeof v === 'boolean') return v;
    return { type, value: v } as GgufTypedValue;
  }
  if (ArrayBuffer.isView(v)) return v as GgufWriteValue;
  const arr = v as GgufValue[];
  if (elementType === GgufValueType.STRING) return arr as string[];
  if (elementType === GgufValueType.BOOL) return gv.array(GgufValueType.BOOL, arr as boolean[]);
  // Arrays of arrays: inner element types follow from the values.
  return gv.array(
    GgufValueType.ARRAY,
    arr.map((inner) => {
      if (ArrayBuffer.isView(inner)) return inner as GgufWriteValue;
      const xs = inner as GgufValue[];
      const innerType = typeof xs[0] === 'boolean' ? GgufValueType.BOOL : Array.isArray(xs[0]) ? GgufValueType.ARRAY : GgufValueType.STRING;
      return toWriteValue(xs, GgufValueType.ARRAY, innerType);
    }),
  );
}

function alignUp(n: number, alignment: number): number {
  const r = n % alignment;
  return r === 0 ? n : n + (alignment - r);
}

/** Encodes the header and computes where every tensor goes. Pure. */
export function layoutGguf(spec: GgufWriteSpec): GgufLayout {
  const alignment = spec.alignment ?? 32;
  if (!Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0) {
    throw usage(`alignment ${String(alignment)} must be a power of two`);
  }
  const entries = [...spec.metadata].filter(([k]) => k !== 'general.alignment');
  if (alignment !== 32) entries.push(['general.alignment', gv.u32(alignment)]);
  const keys = new Set<string>();
  for (const [k] of entries) {
    if (keys.has(k)) throw usage(`metadata key '${k}' given twice`);
    keys.add(k);
  }

  const sink = new ByteSink();
  sink.u32(0x46554747);
  sink.u32(3);
  sink.u64(spec.tensors.length);
  sink.u64(entries.length);
  for (const [k, v] of entries) {
    sink.string(k);
    writeValue(sink, v, k, true);
  }
  const names = new Set<string>();
  let rel = 0;
  const placed: GgufLayout['tensors'] = [];
  for (const t of spec.tensors) {
    if (names.has(t.name)) throw usage(`tensor '${t.name}' given twice`);
    names.add(t.name);
    if (encoder.encode(t.name).length > 63) throw usage(`tensor name '${t.name}' is longer than 63 bytes`);
    const byteLength = tensorByteLength(t.type, t.dims);
    sink.string(t.name);
    sink.u32(t.dims.length);
    for (const d of t.dims) sink.u64(d);
    sink.u32(t.type);
    sink.u64(rel);
    placed.push({ ...t, offset: rel, byteLength });
    rel = alignUp(rel + byteLength, alignment);
  }
  const header = sink.result();
  const dataOffset = alignUp(header.length, alignment);
  for (const p of placed) p.offset += dataOffset;
  const last = placed[placed.length - 1];
  const fileSize = last === undefined ? header.length : last.offset + last.byteLength;
  return { header, dataOffset, tensors: placed, fileSize };
}

/** Builds a whole GGUF file in memory (for tests and tiny files). */
export function buildGguf(spec: GgufWriteSpec, data: readonly Uint8Array[]): Uint8Array {
  const layout = layoutGguf(spec);
  if (data.length !== layout.tensors.length) throw usage(`${String(layout.tensors.length)} tensors but ${String(data.length)} data arrays`);
  const out = new Uint8Array(layout.fileSize);
  out.set(layout.header, 0);
  layout.tensors.forEach((t, i) => {
    const d = data[i]!;
    if (d.length !== t.byteLength) throw usage(`tensor '${t.name}' needs ${String(t.byteLength)} bytes, got ${String(d.length)}`);
    out.set(d, t.offset);
  });
  return out;
}

export interface GgufStreamWriter {
  readonly layout: GgufLayout;
  /** Appends bytes of the current tensor; tensors are written in index order, each completely. */
  write(chunk: Uint8Array): Promise<void>;
  /** Flushes, checks every tensor was written in full, and closes the file. */
  finish(): Promise<void>;
  /** Closes the file without checking (after a failure); the caller deletes it. */
  abort(): Promise<void>;
}

const FLUSH_BYTES = 8 * 1024 * 1024;

/** Opens `path` for writing a GGUF of the given spec; data follows through write(). */
export async function createGgufWriter(path: string, spec: GgufWriteSpec): Promise<GgufStreamWriter> {
  const layout = layoutGguf(spec);
  const fh: FileHandle = await open(path, 'w');
  const pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let filePos = 0;
  let tensorIndex = 0;
  let tensorWritten = 0;

  const flush = async (): Promise<void> => {
    if (pendingBytes === 0) return;
    const buf = Buffer.concat(pending, pendingBytes);
    pending.length = 0;
    pendingBytes = 0;
    let done = 0;
    while (done < buf.length) {
      const { bytesWritten } = await fh.write(buf, done, buf.length - done, filePos);
      done += bytesWritten;
      filePos += bytesWritten;
    }
  };
  const queue = async (b: Uint8Array): Promise<void> => {
    if (b.length === 0) return;
    // Copy: callers may reuse their buffers after write() resolves.
    pending.push(Uint8Array.from(b));
    pendingBytes += b.length;
    if (pendingBytes >= FLUSH_BYTES) await flush();
  };
  const padTo = async (target: number): Promise<void> => {
    const at = filePos + pendingBytes;
    if (target > at) await queue(new Uint8Array(target - at));
  };

  try {
    await queue(layout.header);
    if (layout.tensors.length > 0) await padTo(layout.dataOffset);
  } catch (err) {
    await fh.close();
    throw err;
  }

  return {
    layout,
    async write(chunk) {
      let off = 0;
      while (off < chunk.length) {
        // Zero-length tensors take no bytes: step over them so the index stays in sync.
        while (layout.tensors[tensorIndex]?.byteLength === 0) tensorIndex++;
        const t = layout.tensors[tensorIndex];
        if (t === undefined) throw usage(`more tensor data written than the ${String(layout.tensors.length)} tensors hold`);
        if (tensorWritten === 0) await padTo(t.offset);
        const take = Math.min(chunk.length - off, t.byteLength - tensorWritten);
        await queue(chunk.subarray(off, off + take));
        off += take;
        tensorWritten += take;
        if (tensorWritten === t.byteLength) {
          tensorIndex++;
          tensorWritten = 0;
        }
      }
    },
    async finish() {
      while (layout.tensors[tensorIndex]?.byteLength === 0) tensorIndex++;
      if (tensorIndex !== layout.tensors.length) {
        const t = layout.tensors[tensorIndex]!;
        throw usage(`tensor '${t.name}' (${ggmlTypeName(t.type)}) got ${String(tensorWritten)} of ${String(t.byteLength)} bytes`);
      }
      await flush();
      await fh.close();
    },
    async abort() {
      pending.length = 0;
      pendingBytes = 0;
      await fh.close();
    },
  };
}

export { GgmlType, GgufValueType };
