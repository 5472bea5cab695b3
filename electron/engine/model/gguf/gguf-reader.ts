// GGUF v2/v3 reader (spec: ggml/docs/gguf.md): header, metadata and tensor index, read from the
// start of the file only, plus byte-range reads of one tensor's data. Invariant: every count and
// length is checked against what the rest of the file (and GgufLimits) can hold before anything is
// allocated, so a hostile file ends in a KiwiError, never a crash, hang or giant allocation.
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { constants as bufferConstants } from 'node:buffer';
import { KiwiError } from '../../errors.js';
import { GgmlType, GgufValueType, ggmlTypeName, isKnownGgmlType, tensorByteLength } from './gguf-types.js';
import type { GgufValue } from './gguf-types.js';

export interface GgufTensorInfo {
  name: string;
  type: GgmlType;
  /** ne[0] first, as in the file (ne[0] is the contiguous, fastest-varying dimension). */
  dims: number[];
  /** ABSOLUTE file offset of the tensor's data (in `path` when set, else in the file's path). */
  offset: number;
  byteLength: number;
  /** For a model split over several files (llama.cpp's gguf-split): the file that holds this tensor. */
  path?: string;
}

export interface GgufFile {
  /** The file's path; '' when parsed from memory with parseGguf. */
  path: string;
  version: 2 | 3;
  fileSize: number;
  alignment: number;
  /** Absolute offset of the tensor data section (start of the first tensor's alignment grid). */
  dataOffset: number;
  metadata: Map<string, GgufValue>;
  /** The GGUF value type of each key (and the element type of arrays), to write values back exactly. */
  metadataTypes: Map<string, GgufValueTypeInfo>;
  tensors: GgufTensorInfo[];
  tensor(name: string): GgufTensorInfo | undefined;
  /**
   * For a model split over several files: every file in order (the first is `path`, whose header
   * holds the metadata); tensors from the others carry their `path`. Absent for a single file.
   */
  splits?: Array<{ path: string; fileSize: number }>;
}

export interface GgufValueTypeInfo {
  type: GgufValueType;
  /** For arrays: the type of their elements. */
  elementType?: GgufValueType;
}

export interface GgufLimits {
  /** The header (magic .. end of the tensor index) may not be larger than this. */
  maxHeaderBytes: number;
  maxTensors: number;
  maxKeys: number;
  /** Longest metadata key or string value, in bytes. */
  maxStringBytes: number;
  /** Most elements of one metadata array. */
  maxArrayLength: number;
  /** Deepest nesting of arrays of arrays. */
  maxArrayDepth: number;
  /**
   * Most elements of string, bool and nested arrays in the whole header together: each becomes a
   * JS value, so this bounds memory where a file packs millions of tiny elements.
   */
  maxTotalElements: number;
}

export const DEFAULT_GGUF_LIMITS: Readonly<GgufLimits> = Object.freeze({
  // Real headers are at most a few tens of MB (vocabularies of ~260k tokens plus merges).
  maxHeaderBytes: 256 * 1024 * 1024,
  // Real models have at most a few thousand tensors and a few hundred keys.
  maxTensors: 1 << 16,
  maxKeys: 1 << 16,
  maxStringBytes: 16 * 1024 * 1024,
  maxArrayLength: 1 << 26,
  maxArrayDepth: 8,
  // Real vocabularies hold ~260k tokens plus ~500k merges.
  maxTotalElements: 1 << 23,
});

// Metadata arrays become typed arrays over the file's bytes, which are little-endian.
if (new Uint8Array(Uint16Array.of(1).buffer)[0] !== 1) throw new Error('Kiwi reads GGUF only on little-endian CPUs');

const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const DEFAULT_ALIGNMENT = 32;
const MAX_ALIGNMENT = 1 << 24;
const MAX_DIMS = 4; // GGML_MAX_DIMS
const MAX_TENSOR_NAME_BYTES = 63; // GGML_MAX_NAME is 64 including the terminating NUL

// Smallest encodings, used to bound counts by the bytes left before reading anything.
const MIN_KV_BYTES = 8 + 1 + 4 + 1; // key length + 1-byte key + value type + 1-byte value
const MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 4 + 8; // name length + 1-byte name + n_dims + type + offset

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Raised inside the parser when the bytes in memory end before the file does. */
class NeedMoreBytes {
  constructor(readonly end: number) {}
}

function invalid(message: string, details: Record<string, unknown> = {}): KiwiError {
  return new KiwiError('GGUF_INVALID', `invalid GGUF file: ${message}`, details);
}

class Cursor {
  pos = 0;
  /** Elements of string/bool/nested arrays read so far (see GgufLimits.maxTotalElements). */
  elements = 0;
  private readonly view: DataView;
  private readonly text: Buffer;

  constructor(
    readonly bytes: Uint8Array,
    /** Size of the whole file; bytes may hold only its start. */
    readonly fileSize: number,
    readonly limits: GgufLimits,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Bytes that can still follow pos in the header, bounded by the file and the header limit. */
  remaining(): number {
    return Math.min(this.fileSize, this.limits.maxHeaderBytes) - this.pos;
  }

  need(n: number, what: string): void {
    const end = this.pos + n;
    if (end > this.fileSize) throw invalid(`file is truncated while reading ${what} at offset ${String(this.pos)}`);
    if (end > this.limits.maxHeaderBytes) {
      throw new KiwiError(
        'GGUF_UNSUPPORTED',
        `GGUF header is larger than the limit of ${String(this.limits.maxHeaderBytes)} bytes (at ${what})`,
      );
    }
    if (end > this.bytes.length) throw new NeedMoreBytes(end);
  }

  u8(what: string): number {
    this.need(1, what);
    return this.view.getUint8(this.pos++);
  }
  i8(what: string): number {
    this.need(1, what);
    return this.view.getInt8(this.pos++);
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return v;
  }
  i16(what: string): number {
    this.need(2, what);
    const v = this.view.getInt16(this.pos, true);
    this.pos += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  i32(what: string): number {
    this.need(4, what);
    const v = this.view.getInt32(this.pos, true);
    this.pos += 4;
    return v;
  }
  f32(what: string): number {
    this.need(4, what);
    const v = this.view.getFloat32(this.pos, true);
    this.pos += 4;
    return v;
  }
  f64(what: string): number {
    this.need(8, what);
    const v = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }
  u64(what: string): bigint {
    this.need(8, what);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }
  i64(what: string): bigint {
    this.need(8, what);
    const v = this.view.getBigInt64(this.pos, true);
    this.pos += 8;
    return v;
  }

  /** Re-reads a u32 already parsed (no bounds check needed: pos was read before). */
  u32At(pos: number): number {
    return this.view.getUint32(pos, true);
  }

  /** A u64 that must be a count or size no larger than `max`. */
  size(what: string, max: number, why: string): number {
    const v = this.u64(what);
    if (v > BigInt(max)) throw invalid(`${what} is ${v.toString()}, more than ${why} (${String(max)})`, { offset: this.pos - 8 });
    return Number(v);
  }

  string(what: string, maxBytes: number): string {
    const left = Math.max(0, this.remaining() - 8);
    this.need(8, `length of ${what}`);
    // Two u32 halves: avoids a BigInt per string on vocabularies of 100k+ tokens.
    const lo = this.view.getUint32(this.pos, true);
    const hi = this.view.getUint32(this.pos + 4, true);
    this.pos += 8;
    const len = hi * 0x100000000 + lo;
    if (len > maxBytes) throw invalid(`${what} is ${String(len)} bytes long, more than the limit of ${String(maxBytes)}`);
    if (len > left) throw invalid(`${what} is ${String(len)} bytes long, more than the ${String(left)} bytes left in the file (or under the header size limit)`);
    this.need(len, what);
    const start = this.pos;
    this.pos += len;
    // Node's native decoder is much faster than TextDecoder on ~100k short vocab strings, but it
    // replaces bad bytes silently; only when a U+FFFD shows up is the strict decoder consulted.
    const s = this.text.toString('utf8', start, start + len);
    if (s.includes('\uFFFD')) {
      try {
        utf8.decode(this.bytes.subarray(start, start + len));
      } catch {
        throw invalid(`${what} at offset ${String(start)} is not valid UTF-8`);
      }
    }
    return s;
  }

  /** Copies `n` bytes into a fresh, aligned buffer (typed arrays need element alignment). */
  copy(n: number, what: string): ArrayBuffer {
    this.need(n, what);
    const out = new Uint8Array(n);
    out.set(this.bytes.subarray(this.pos, this.pos + n));
    this.pos += n;
    return out.buffer;
  }
}

const NUMERIC_ELEMENT_BYTES: Partial<Record<GgufValueType, number>> = {
  [GgufValueType.UINT8]: 1,
  [GgufValueType.INT8]: 1,
  [GgufValueType.UINT16]: 2,
  [GgufValueType.INT16]: 2,
  [GgufValueType.UINT32]: 4,
  [GgufValueType.INT32]: 4,
  [GgufValueType.FLOAT32]: 4,
  [GgufValueType.UINT64]: 8,
  [GgufValueType.INT64]: 8,
  [GgufValueType.FLOAT64]: 8,
};

function bigToValue(v: bigint): number | bigint {
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

function readScalar(c: Cursor, type: number, what: string): GgufValue {
  switch (type) {
    case GgufValueType.UINT8:
      return c.u8(what);
    case GgufValueType.INT8:
      return c.i8(what);
    case GgufValueType.UINT16:
      return c.u16(what);
    case GgufValueType.INT16:
      return c.i16(what);
    case GgufValueType.UINT32:
      return c.u32(what);
    case GgufValueType.INT32:
      return c.i32(what);
    case GgufValueType.FLOAT32:
      return c.f32(what);
    case GgufValueType.FLOAT64:
      return c.f64(what);
    case GgufValueType.UINT64:
      return bigToValue(c.u64(what));
    case GgufValueType.INT64:
      return bigToValue(c.i64(what));
    case GgufValueType.BOOL: {
      const b = c.u8(what);
      if (b > 1) throw invalid(`${what} is a bool with byte value ${String(b)} (must be 0 or 1)`);
      return b === 1;
    }
    case GgufValueType.STRING:
      return c.string(what, c.limits.maxStringBytes);
    default:
      throw invalid(`${what} has unknown value type ${String(type)}`);
  }
}

/** Minimum bytes one element of an array of `type` occupies, for bounding the count. */
function minElementBytes(type: number): number {
  const numeric = NUMERIC_ELEMENT_BYTES[type as GgufValueType];
  if (numeric !== undefined) return numeric;
  if (type === GgufValueType.BOOL) return 1;
  if (type === GgufValueType.STRING) return 8;
  if (type === GgufValueType.ARRAY) return 4 + 8;
  return 1;
}

function readValue(c: Cursor, type: number, what: string, depth: number): GgufValue {
  if (type !== GgufValueType.ARRAY) return readScalar(c, type, what);
  if (depth >= c.limits.maxArrayDepth) {
    throw invalid(`${what} nests arrays deeper than ${String(c.limits.maxArrayDepth)} levels`);
  }
  const elemType = c.u32(`element type of ${what}`);
  if (GgufValueType[elemType] === undefined) throw invalid(`${what} has unknown element type ${String(elemType)}`);
  const elemBytes = minElementBytes(elemType);
  const maxCount = Math.min(c.limits.maxArrayLength, Math.floor(Math.max(0, c.remaining() - 8) / elemBytes));
  const count = c.size(`element count of ${what}`, maxCount, 'the rest of the file or the limits allow');
  const numeric = NUMERIC_ELEMENT_BYTES[elemType as GgufValueType];
  if (numeric !== undefined) {
    const buf = c.copy(count * numeric, what);
    switch (elemType as GgufValueType) {
      case GgufValueType.UINT8:
        return new Uint8Array(buf);
      case GgufValueType.INT8:
        return new Int8Array(buf);
      case GgufValueType.UINT16:
        return new Uint16Array(buf);
      case GgufValueType.INT16:
        return new Int16Array(buf);
      case GgufValueType.UINT32:
        return new Uint32Array(buf);
      case GgufValueType.INT32:
        return new Int32Array(buf);
      case GgufValueType.FLOAT32:
        return new Float32Array(buf);
      case GgufValueType.UINT64:
        return new BigUint64Array(buf);
      case GgufValueType.INT64:
        return new BigInt64Array(buf);
      default:
        return new Float64Array(buf);
    }
  }
  c.elements += count;
  if (c.elements > c.limits.maxTotalElements) {
    throw invalid(`${what} takes the header past ${String(c.limits.maxTotalElements)} array elements in all`);
  }
  // One label for all elements: building a name per element is a measurable cost on vocabularies.
  const label = `an element of ${what}`;
  const out: GgufValue[] = new Array<GgufValue>(count);
  if (elemType === GgufValueType.STRING) {
    for (let i = 0; i < count; i++) out[i] = c.string(label, c.limits.maxStringBytes);
  } else {
    for (let i = 0; i < count; i++) out[i] = readValue(c, elemType, label, depth + 1);
  }
  return out;
}

function alignUp(n: number, alignment: number): number {
  const r = n % alignment;
  return r === 0 ? n : n + (alignment - r);
}

function parseAt(c: Cursor, path: string): GgufFile {
  const magic = c.u32('magic');
  if (magic !== GGUF_MAGIC) {
    throw invalid(`wrong magic 0x${magic.toString(16).padStart(8, '0')} (expected the bytes "GGUF"); this is not a GGUF file`);
  }
  const version = c.u32('version');
  if (version === 1) {
    throw new KiwiError(
      'GGUF_UNSUPPORTED',
      'GGUF version 1 is not supported (it used 32-bit counts); re-convert the model with a current llama.cpp',
      { version },
    );
  }
  if (version !== 2 && version !== 3) {
    const swapped = ((version & 0xff) << 24) | ((version >>> 8) & 0xff) << 16 | ((version >>> 16) & 0xff) << 8 | (version >>> 24);
    const hint = swapped === 2 || swapped === 3 ? ' (this looks like a big-endian GGUF; use a little-endian one)' : '';
    throw new KiwiError('GGUF_UNSUPPORTED', `GGUF version ${String(version)} is not supported; Kiwi reads versions 2 and 3${hint}`, {
      version,
    });
  }
  const tensorCount = c.size(
    'tensor count',
    Math.min(c.limits.maxTensors, Math.floor(Math.max(0, c.remaining() - 8) / MIN_TENSOR_INFO_BYTES)),
    'the rest of the file or the limits allow',
  );
  const kvCount = c.size(
    'metadata key count',
    Math.min(c.limits.maxKeys, Math.floor(Math.max(0, c.remaining() - 8) / MIN_KV_BYTES)),
    'the rest of the file or the limits allow',
  );

  const metadata = new Map<string, GgufValue>();
  const metadataTypes = new Map<string, GgufValueTypeInfo>();
  for (let i = 0; i < kvCount; i++) {
    const key = c.string(`metadata key #${String(i)}`, Math.min(c.limits.maxStringBytes, 65535));
    if (key.length === 0) throw invalid(`metadata key #${String(i)} is empty`);
    if (metadata.has(key)) throw invalid(`metadata key '${key}' appears twice`);
    const type = c.u32(`value type of '${key}'`);
    if (GgufValueType[type] === undefined) throw invalid(`metadata key '${key}' has unknown value type ${String(type)}`);
    const at = c.pos;
    metadata.set(key, readValue(c, type, `metadata '${key}'`, 0));
    metadataTypes.set(key, type === GgufValueType.ARRAY ? { type, elementType: c.u32At(at) } : { type });
  }

  let alignment = DEFAULT_ALIGNMENT;
  const align = metadata.get('general.alignment');
  if (align !== undefined) {
    if (typeof align !== 'number' || !Number.isInteger(align) || align <= 0 || align > MAX_ALIGNMENT || (align & (align - 1)) !== 0) {
      throw invalid(`general.alignment is ${String(align)}; it must be a power of two no larger than ${String(MAX_ALIGNMENT)}`);
    }
    alignment = align;
  }

  const raw: Array<{ name: string; type: GgmlType; dims: number[]; relOffset: number; byteLength: number }> = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = c.string(`name of tensor #${String(i)}`, MAX_TENSOR_NAME_BYTES);
    if (names.has(name)) throw invalid(`tensor '${name}' appears twice`);
    names.add(name);
    const nDims = c.u32(`dimension count of tensor '${name}'`);
    if (nDims > MAX_DIMS) throw invalid(`tensor '${name}' has ${String(nDims)} dimensions; ggml allows at most ${String(MAX_DIMS)}`);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) {
      dims.push(c.size(`dimension ${String(d)} of tensor '${name}'`, Number.MAX_SAFE_INTEGER, 'the largest addressable size'));
    }
    const typeId = c.u32(`type of tensor '${name}'`);
    if (!isKnownGgmlType(typeId)) {
      throw new KiwiError('GGUF_UNSUPPORTED', `tensor '${name}' has ggml type ${String(typeId)} (${ggmlTypeName(typeId)}), which Kiwi does not know`, {
        tensor: name,
        type: typeId,
      });
    }
    let byteLength: number;
    try {
      byteLength = tensorByteLength(typeId, dims);
    } catch (err) {
      if (err instanceof KiwiError) throw invalid(`tensor '${name}': ${err.message}`, { tensor: name });
      throw err;
    }
    const relOffset = c.size(`offset of tensor '${name}'`, Number.MAX_SAFE_INTEGER, 'the largest addressable offset');
    if (relOffset % alignment !== 0) {
      throw invalid(`tensor '${name}' has offset ${String(relOffset)}, not a multiple of the alignment ${String(alignment)}`);
    }
    raw.push({ name, type: typeId, dims, relOffset, byteLength });
  }

  const dataOffset = alignUp(c.pos, alignment);
  const tensors: GgufTensorInfo[] = raw.map((t) => {
    const offset = dataOffset + t.relOffset;
    if (offset + t.byteLength > c.fileSize) {
      throw invalid(
        `tensor '${t.name}' (${String(t.byteLength)} bytes at offset ${String(offset)}) lies outside the file of ${String(c.fileSize)} bytes; the file may be truncated`,
        { tensor: t.name },
      );
    }
    return { name: t.name, type: t.type, dims: t.dims, offset, byteLength: t.byteLength };
  });

  // Tensors may be stored in any order but must not share bytes.
  const byOffset = tensors.filter((t) => t.byteLength > 0).sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1]!;
    const cur = byOffset[i]!;
    if (prev.offset + prev.byteLength > cur.offset) throw invalid(`tensors '${prev.name}' and '${cur.name}' overlap`);
  }

  const index = new Map(tensors.map((t) => [t.name, t]));
  return {
    path,
    version,
    fileSize: c.fileSize,
    alignment,
    dataOffset,
    metadata,
    metadataTypes,
    tensors,
    tensor: (name: string) => index.get(name),
  };
}

function checkLimits(limits: Partial<GgufLimits> | undefined): GgufLimits {
  return { ...DEFAULT_GGUF_LIMITS, ...limits };
}

/**
 * Parses a GGUF header from memory. `bytes` holds the start of the file (or all of it);
 * `fileSize` is the size of the whole file (default: bytes.length), against which tensor
 * extents are checked.
 */
export function parseGguf(bytes: Uint8Array, fileSize: number = bytes.length, limits?: Partial<GgufLimits>): GgufFile {
  if (!Number.isSafeInteger(fileSize) || fileSize < bytes.length) {
    throw new KiwiError('USAGE', `fileSize ${String(fileSize)} is smaller than the ${String(bytes.length)} bytes given`);
  }
  try {
    return parseAt(new Cursor(bytes, fileSize, checkLimits(limits)), '');
  } catch (err) {
    if (err instanceof NeedMoreBytes) {
      throw invalid(`the header continues past the ${String(bytes.length)} bytes given (needs at least ${String(err.end)})`);
    }
    throw err;
  }
}

/**
 * Opens a GGUF file and reads its header (only the header: works for files of any size). For a
 * model split by llama.cpp's gguf-split (`name-00001-of-00003.gguf`), give the first file: the
 * headers of the others are read too and their tensors merged into one index.
 */
export async function openGguf(path: string, limits?: Partial<GgufLimits>): Promise<GgufFile> {
  const lim = checkLimits(limits);
  const first = await readHeader(path, lim);
  const count = splitNumber(first, 'split.count');
  if (count === undefined || count <= 1) return first;
  return mergeSplits(first, count, lim);
}

function splitNumber(file: GgufFile, key: string): number | undefined {
  const v = file.metadata.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw invalid(`${key} is ${String(v)}; it must be a non-negative integer`);
  return v;
}

const SPLIT_NAME = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;
const MAX_SPLITS = 9999;

async function mergeSplits(first: GgufFile, count: number, lim: GgufLimits): Promise<GgufFile> {
  const no = splitNumber(first, 'split.no') ?? 0;
  const m = SPLIT_NAME.exec(first.path);
  if (no !== 0) {
    const hint = m !== null ? ` (${m[1]!}-00001-of-${m[3]!}.gguf)` : '';
    throw new KiwiError('GGUF_UNSUPPORTED', `${first.path} is part ${String(no + 1)} of a split model; open its first file${hint}`);
  }
  if (count > MAX_SPLITS) throw invalid(`split.count is ${String(count)}, more than ${String(MAX_SPLITS)}`);
  if (m === null || Number(m[3]) !== count) {
    throw invalid(`${first.path} is split into ${String(count)} files but is not named like llama.cpp's splits (<name>-00001-of-${String(count).padStart(5, '0')}.gguf)`);
  }
  const tensors = [...first.tensors];
  const index = new Map(tensors.map((t) => [t.name, t]));
  const splits = [{ path: first.path, fileSize: first.fileSize }];
  for (let i = 1; i < count; i++) {
    const path = `${m[1]!}-${String(i + 1).padStart(5, '0')}-of-${m[3]!}.gguf`;
    const part = await readHeader(path, lim);
    if (splitNumber(part, 'split.no') !== i || splitNumber(part, 'split.count') !== count) {
      throw invalid(`${path} does not say it is split ${String(i + 1)} of ${String(count)}`);
    }
    for (const t of part.tensors) {
      if (index.has(t.name)) throw invalid(`tensor '${t.name}' appears in more than one split (again in ${path})`);
      const moved = { ...t, path };
      tensors.push(moved);
      index.set(t.name, moved);
    }
    splits.push({ path, fileSize: part.fileSize });
  }
  const total = splitNumber(first, 'split.tensors.count');
  if (total !== undefined && total !== tensors.length) {
    throw invalid(`split.tensors.count is ${String(total)} but the ${String(count)} splits hold ${String(tensors.length)} tensors`);
  }
  return { ...first, tensors, tensor: (name: string) => index.get(name), splits };
}

async function readHeader(path: string, lim: GgufLimits): Promise<GgufFile> {
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new KiwiError('FILE_NOT_FOUND', `model file not found: ${path}`, { path });
    throw new KiwiError('FILE_NOT_FOUND', `cannot open model file ${path}: ${(err as Error).message}`, { path });
  }
  try {
    const stat = await fh.stat();
    if (!stat.isFile()) throw new KiwiError('FILE_NOT_FOUND', `${path} is not a regular file`, { path });
    const fileSize = stat.size;
    // Start with 2 MiB and grow geometrically, re-parsing from the start: the parse is cheap
    // next to the I/O, and this keeps one parser for memory and files.
    let have = Math.min(fileSize, 2 << 20, lim.maxHeaderBytes);
    for (;;) {
      const bytes = await readExactly(fh, 0, have, path);
      try {
        const file = parseAt(new Cursor(bytes, fileSize, lim), path);
        return file;
      } catch (err) {
        if (!(err instanceof NeedMoreBytes)) throw err;
        have = Math.min(fileSize, lim.maxHeaderBytes, Math.max(err.end, have * 4));
      }
    }
  } finally {
    await fh.close();
  }
}

async function readExactly(fh: FileHandle, position: number, length: number, path: string): Promise<Buffer> {
  const out = Buffer.allocUnsafe(length);
  let done = 0;
  while (done < length) {
    // fs reads are limited to 2 GiB per call.
    const chunk = Math.min(length - done, 1 << 30);
    const { bytesRead } = await fh.read(out, done, chunk, position + done);
    if (bytesRead === 0) {
      throw invalid(`${path} ended at ${String(position + done)} bytes while reading; was it truncated or changed while open?`);
    }
    done += bytesRead;
  }
  return out;
}

/**
 * Reads a tensor's bytes, or the byte range [start, end) of them (relative to the tensor).
 * Opens the file per call; for many reads, keep a handle with {@link openTensorReader}.
 */
export async function readTensorBytes(
  file: GgufFile,
  tensor: GgufTensorInfo,
  range?: { start: number; end: number },
): Promise<Buffer> {
  const reader = await openTensorReader(file);
  try {
    return await reader.read(tensor, range);
  } finally {
    await reader.close();
  }
}

export interface GgufTensorReader {
  read(tensor: GgufTensorInfo, range?: { start: number; end: number }): Promise<Buffer>;
  close(): Promise<void>;
}

/** Keeps the file open for several tensor reads. */
export async function openTensorReader(file: GgufFile): Promise<GgufTensorReader> {
  if (file.path === '') throw new KiwiError('USAGE', 'this GGUF was parsed from memory; open it with openGguf(path) to read tensors');
  // One handle per file, opened on first use (a split model's other files may never be needed).
  const handles = new Map<string, Promise<FileHandle>>();
  const handle = (path: string): Promise<FileHandle> => {
    let h = handles.get(path);
    if (h === undefined) {
      h = open(path, 'r').catch((err: unknown) => {
        throw new KiwiError('FILE_NOT_FOUND', `cannot open model file ${path}: ${(err as Error).message}`, { path });
      });
      handles.set(path, h);
    }
    return h;
  };
  await handle(file.path);
  return {
    async read(tensor, range) {
      const start = range?.start ?? 0;
      const end = range?.end ?? tensor.byteLength;
      if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end < start || end > tensor.byteLength) {
        throw new KiwiError(
          'USAGE',
          `byte range [${String(start)}, ${String(end)}) is outside tensor '${tensor.name}' of ${String(tensor.byteLength)} bytes`,
        );
      }
      if (end - start > bufferConstants.MAX_LENGTH) {
        throw new KiwiError('USAGE', `cannot read ${String(end - start)} bytes at once; read tensor '${tensor.name}' in ranges`);
      }
      const path = tensor.path ?? file.path;
      return readExactly(await handle(path), tensor.offset + start, end - start, path);
    },
    async close() {
      const all = await Promise.allSettled(handles.values());
      handles.clear();
      for (const r of all) if (r.status === 'fulfilled') await r.value.close();
    },
  };
}
